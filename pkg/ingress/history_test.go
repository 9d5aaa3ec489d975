package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

const echoWF = "default:Echo:Supervisor Workflow:default"

// storedMessage is a history message as clients read it.
type storedMessage struct {
	ID            string          `json:"id"`
	CreatedAt     string          `json:"createdAt"`
	Direction     int             `json:"direction"`
	MessageType   int             `json:"messageType"`
	Text          *string         `json:"text"`
	Data          json.RawMessage `json:"data"`
	RequestID     string          `json:"requestId"`
	ParticipantID string          `json:"participantId"`
	WorkflowID    string          `json:"workflowId"`
	Scope         string          `json:"scope"`
	Hint          string          `json:"hint"`
}

type historyAnswer struct {
	WorkflowID    string          `json:"workflowId"`
	ParticipantID string          `json:"participantId"`
	ThreadID      string          `json:"threadId"`
	Page          int             `json:"page"`
	PageSize      int             `json:"pageSize"`
	Messages      []storedMessage `json:"messages"`
	Next          *string         `json:"next"`
	Topics        []string        `json:"topics"`
}

// readHistory reads a history or topics answer that must succeed.
func readHistory(t *testing.T, base, path string, query url.Values, hdr ...string) historyAnswer {
	t.Helper()
	status, ct, b := doGet(t, base, path, query, hdr...)
	require.Equal(t, http.StatusOK, status, "GET %s?%s: %s", path, query.Encode(), b)
	require.Equal(t, "application/json", ct, "GET %s?%s", path, query.Encode())
	var a historyAnswer
	require.NoError(t, json.Unmarshal(b, &a), "decoding %s", b)
	return a
}

func historyPath(tenant string) string {
	return "/api/v1/admin/tenants/" + tenant + "/messaging/history"
}

// webhookCalls makes one echo webhook call per request id for the participant, one at a time.
func webhookCalls(t *testing.T, s *stacktest.Stack, participant string, requestIDs ...string) {
	t.Helper()
	for _, id := range requestIDs {
		status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key, "participantId", participant), []byte("hello"), "Idempotency-Key", id)
		require.Equal(t, http.StatusOK, status, "webhook %s: %s", id, b)
	}
}

// waitThread polls the newest page of a thread until it holds n messages: the host answers a
// webhook before it stores the outgoing message.
func waitThread(t *testing.T, s *stacktest.Stack, participant string, n int) []storedMessage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", participant, "pageSize", "100"), bearerHeader(s.Key)...)
		if len(a.Messages) >= n {
			return a.Messages
		}
		require.False(t, time.Now().After(deadline), "thread of %s has %d messages, want %d", participant, len(a.Messages), n)
		time.Sleep(10 * time.Millisecond)
	}
}

func messageIDs(msgs []storedMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func TestHistoryPages(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	webhookCalls(t, s, "Alice", "r-0", "r-1", "r-2", "r-3", "r-4")
	webhookCalls(t, s, "bob", "b-0")
	all := waitThread(t, s, "alice", 10)
	waitThread(t, s, "bob", 2)

	t.Run("newest page", func(t *testing.T) { historyNewestPage(t, s) })
	t.Run("page numbers", func(t *testing.T) { historyPageNumbers(t, s, all) })
	t.Run("cursors", func(t *testing.T) { historyCursors(t, s, all) })
	t.Run("addressing", func(t *testing.T) { historyAddressing(t, s, all) })
	t.Run("bad paging", func(t *testing.T) { historyBadPaging(t, s) })
}

// historyNewestPage checks the newest page of alice's thread, and its messages.
func historyNewestPage(t *testing.T, s *stacktest.Stack) {
	auth := bearerHeader(s.Key)
	a := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "ALICE"), auth...)
	require.Equal(t, echoWF, a.WorkflowID, "the answer's workflow")
	require.Equal(t, "alice", a.ParticipantID, "the answer's participant")
	require.Equal(t, subject.ThreadID(echoWF, "alice"), a.ThreadID, "the answer's thread")
	require.Equal(t, 1, a.Page, "page")
	require.Equal(t, 20, a.PageSize, "page size")
	require.Nil(t, a.Next, "next of the only page")
	require.Len(t, a.Messages, 10)
	seen := map[string]bool{}
	for i, m := range a.Messages {
		// Newest first: each call's outgoing message, then its incoming one.
		wantReq, wantDir := fmt.Sprintf("r-%d", 4-i/2), 1-i%2
		assert.Equal(t, wantReq, m.RequestID, "message %d's request", i)
		assert.Equal(t, wantDir, m.Direction, "message %d's direction", i)
		assert.Equal(t, 4, m.MessageType, "message %d: %+v", i, m)
		assert.Equal(t, echoWF, m.WorkflowID, "message %d: %+v", i, m)
		assert.Equal(t, "alice", m.ParticipantID, "message %d: %+v", i, m)
		assert.NotEmpty(t, m.ID, "message %d: %+v", i, m)
		assert.False(t, seen[m.ID], "message %d repeats an id: %+v", i, m)
		seen[m.ID] = true
		_, err := time.Parse(time.RFC3339, m.CreatedAt)
		assert.NoError(t, err, "message %d createdAt %q", i, m.CreatedAt)
		if m.Direction == 0 {
			assert.True(t, m.Text != nil && *m.Text == "echo", "incoming message %d has text %v, want the method", i, m.Text)
		}
	}
}

// historyPageNumbers checks pages by number, of three messages each.
func historyPageNumbers(t *testing.T, s *stacktest.Stack, all []storedMessage) {
	auth := bearerHeader(s.Key)
	for _, tc := range []struct {
		page     string
		from, to int
		next     bool
	}{
		{"1", 0, 3, true}, {"2", 3, 6, true}, {"3", 6, 9, true}, {"4", 9, 10, false}, {"5", 10, 10, false},
	} {
		a := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "alice", "pageSize", "3", "page", tc.page), auth...)
		assert.Equal(t, messageIDs(all[tc.from:tc.to]), messageIDs(a.Messages), "page %s", tc.page)
		assert.Equal(t, tc.next, a.Next != nil, "page %s: has a next", tc.page)
		assert.Equal(t, 3, a.PageSize, "page %s: size", tc.page)
		assert.Equal(t, tc.page, fmt.Sprint(a.Page), "page %s: number", tc.page)
	}
}

// historyCursors checks a walk of alice's thread by cursor, four messages a page.
func historyCursors(t *testing.T, s *stacktest.Stack, all []storedMessage) {
	auth := bearerHeader(s.Key)
	var got []string
	query := q("workflowId", echoWF, "participantId", "alice", "pageSize", "4")
	for page := 1; ; page++ {
		require.LessOrEqual(t, page, 5, "paging does not end")
		a := readHistory(t, s.URL, historyPath("default"), query, auth...)
		assert.Equal(t, page, a.Page, "page number")
		got = append(got, messageIDs(a.Messages)...)
		if a.Next == nil {
			break
		}
		query.Set("before", *a.Next)
	}
	assert.Equal(t, messageIDs(all), got, "the walk")
}

// historyAddressing checks every way to address alice's thread reads the same messages.
func historyAddressing(t *testing.T, s *stacktest.Stack, all []storedMessage) {
	auth := bearerHeader(s.Key)
	want := messageIDs(all)
	for _, tc := range []struct {
		name string
		path string
		q    url.Values
		hdr  []string
	}{
		{"agent and activation", historyPath("default"), q("agentName", "Echo", "activationName", "default", "participantId", "alice"), auth},
		{"explicit workflow type", historyPath("default"), q("agentName", "Echo", "workflowType", "Supervisor Workflow", "activationName", "default", "participantId", "alice"), auth},
		{"X-Tenant-Id", "/api/v1/admin/messaging/history", q("workflowId", echoWF, "participantId", "alice"), append([]string{"X-Tenant-Id", "default"}, auth...)},
		{"path and same X-Tenant-Id", historyPath("default"), q("workflowId", echoWF, "participantId", "alice"), append([]string{"X-Tenant-Id", "default"}, auth...)},
		{"apikey query", historyPath("default"), q("workflowId", echoWF, "participantId", "alice", "apikey", s.Key), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := readHistory(t, s.URL, tc.path, tc.q, tc.hdr...)
			assert.Equal(t, echoWF, a.WorkflowID)
			assert.Equal(t, want, messageIDs(a.Messages))
		})
	}
	other := readHistory(t, s.URL, historyPath("default"), q("workflowId", "default:Echo:Conversational:default", "participantId", "alice"), auth...)
	assert.Empty(t, other.Messages, "another workflow's thread")
	assert.Nil(t, other.Next, "another workflow's thread")
}

// historyBadPaging checks paging parameters the history refuses.
func historyBadPaging(t *testing.T, s *stacktest.Stack) {
	auth := bearerHeader(s.Key)
	first := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "alice", "pageSize", "1"), auth...)
	require.NotNil(t, first.Next, "first page of one")
	aliceCursor := *first.Next
	for _, tc := range []struct {
		name string
		q    url.Values
		slug string
	}{
		{"pageSize 0", q("pageSize", "0"), "invalid-query"},
		{"pageSize 101", q("pageSize", "101"), "invalid-query"},
		{"page 0", q("page", "0"), "invalid-query"},
		{"page not a number", q("page", "two"), "invalid-query"},
		{"page too deep", q("page", "200", "pageSize", "100"), "invalid-query"},
		{"page and before", q("page", "2", "before", aliceCursor), "invalid-query"},
		{"garbage cursor", q("before", "!!"), "invalid-cursor"},
		{"cursor of another thread", q("before", aliceCursor, "participantId", "bob"), "invalid-cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			query := q("workflowId", echoWF, "participantId", "alice")
			for k, v := range tc.q {
				query[k] = v
			}
			status, ct, b := doGet(t, s.URL, historyPath("default"), query, auth...)
			p := problemOf(t, status, ct, b, http.StatusBadRequest)
			assert.Equal(t, "urn:agentbus:problem:"+tc.slug, p["type"])
		})
	}
}

func TestHistoryRefusals(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	user, _ := storeKey(t, s, "default", keys.RoleUser, "reader")
	thread := q("workflowId", echoWF, "participantId", "alice")

	for _, endpoint := range []string{"history", "topics", "listen"} {
		t.Run(endpoint, func(t *testing.T) {
			path := "/api/v1/admin/tenants/default/messaging/" + endpoint
			bare := "/api/v1/admin/messaging/" + endpoint
			for _, tc := range []struct {
				name   string
				path   string
				q      url.Values
				hdr    []string
				want   int
				slug   string
				detail string
			}{
				{"no key", path, thread, nil, 401, "unauthorized", ""},
				{"bad key", path, thread, bearerHeader("abk_nope"), 401, "unauthorized", ""},
				{"bad apikey with a good header", path, with(thread, "apikey", "abk_nope"), bearerHeader(s.Key), 401, "unauthorized", ""},
				{"other tenant's key", path, thread, bearerHeader(s.OtherKey), 403, "forbidden", ""},
				{"other tenant's key by apikey", path, with(thread, "apikey", s.OtherKey), nil, 403, "forbidden", ""},
				{"path and X-Tenant-Id differ", path, thread, append(bearerHeader(s.Key), "X-Tenant-Id", "other"), 400, "tenant-mismatch", ""},
				{"no tenant", bare, thread, bearerHeader(s.Key), 400, "missing-tenant", ""},
				{"X-Tenant-Id of another tenant", bare, thread, append(bearerHeader(s.Key), "X-Tenant-Id", "other"), 403, "forbidden", ""},
				{"missing participantId", path, q("workflowId", echoWF), bearerHeader(s.Key), 400, "missing-parameter", "participantId"},
				{"blank participantId", path, q("workflowId", echoWF, "participantId", "  "), bearerHeader(s.Key), 400, "missing-parameter", "participantId"},
				{"missing workflow", path, q("participantId", "alice"), bearerHeader(s.Key), 400, "missing-parameter", "workflowId"},
				{"missing activationName", path, q("agentName", "Echo", "participantId", "alice"), bearerHeader(s.Key), 400, "missing-parameter", "activationName"},
				{"workflowId and agentName", path, with(thread, "agentName", "Echo"), bearerHeader(s.Key), 400, "invalid-query", "workflowId"},
				{"three-segment workflowId", path, q("workflowId", "default:Echo:x", "participantId", "alice"), bearerHeader(s.Key), 400, "invalid-workflow", "workflowId"},
				{"other tenant's workflowId", path, q("workflowId", "other:Echo:Supervisor Workflow:default", "participantId", "alice"), bearerHeader(s.Key), 403, "forbidden", ""},
				{"bad query encoding", path + "?x=%zz&", nil, bearerHeader(s.Key), 400, "invalid-query", ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					status, ct, b := doGet(t, s.URL, tc.path, tc.q, tc.hdr...)
					p := problemOf(t, status, ct, b, tc.want)
					assert.Equal(t, "urn:agentbus:problem:"+tc.slug, p["type"])
					detail, _ := p["detail"].(string)
					assert.Contains(t, detail, tc.detail, "the detail does not name it")
					assert.NotContains(t, string(b), "abk_", "the answer shows key material")
				})
			}
			t.Run("user key reads", func(t *testing.T) {
				if endpoint == "listen" {
					return // TestHistoryListen streams; a refusal is all this table checks
				}
				readHistory(t, s.URL, path, thread, bearerHeader(user)...)
			})
			t.Run("POST", func(t *testing.T) {
				status, h, b := doRequest(t, http.MethodPost, s.URL+path+"?"+thread.Encode(), nil, bearerHeader(s.Key)...)
				problemOf(t, status, h.Get("Content-Type"), b, http.StatusMethodNotAllowed)
				assert.Equal(t, http.MethodGet, h.Get("Allow"))
			})
		})
	}
}

// sendChat sends a Chat message with a topic through the send endpoint and waits for its reply.
func sendChat(t *testing.T, s *stacktest.Stack, participant, text, topic string) {
	t.Helper()
	status, _, b := send(t, s, "default", "wait=true",
		map[string]string{"agentName": "Echo", "activationName": "default", "participantId": participant, "type": "Chat", "text": text, "topic": topic},
		bearerHeader(s.Key)...)
	require.Equal(t, http.StatusOK, status, "sending a chat with topic %q: %.200s", topic, b)
}

func TestHistoryTopics(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	auth := bearerHeader(s.Key)
	topicsPath := "/api/v1/admin/tenants/default/messaging/topics"
	thread := q("workflowId", echoWF, "participantId", "carol")

	// A thread of webhook calls only has no topics: an empty list, not null.
	webhookCalls(t, s, "carol", "w-0")
	a := readHistory(t, s.URL, topicsPath, thread, auth...)
	require.NotNil(t, a.Topics, "topics answer %+v, want an empty list, not null", a)
	require.Empty(t, a.Topics, "topics answer %+v, want an empty list", a)
	require.Equal(t, subject.ThreadID(echoWF, "carol"), a.ThreadID, "topics answer %+v", a)
	require.Equal(t, "carol", a.ParticipantID, "topics answer %+v", a)

	sendChat(t, s, "Carol", "one", "t2")
	sendChat(t, s, "carol", "two", "t1")
	sendChat(t, s, "carol", "three", "t2")
	sendChat(t, s, "carol", "four", "")
	a = readHistory(t, s.URL, topicsPath, thread, auth...)
	require.Equal(t, []string{"t1", "t2"}, a.Topics, "topics")

	// A topic keeps both sides of its messages, newest first, and pages within the topic.
	page := readHistory(t, s.URL, historyPath("default"), with(thread, "topic", "t2"), auth...)
	var texts []string
	for _, m := range page.Messages {
		assert.Equal(t, "t2", m.Scope, "topic t2 page has %+v", m)
		assert.Equal(t, 0, m.MessageType, "topic t2 page has %+v", m)
		require.NotNil(t, m.Text, "topic t2 page has %+v", m)
		texts = append(texts, fmt.Sprintf("%d:%s", m.Direction, *m.Text))
	}
	require.Equal(t, []string{"1:You said: three", "0:three", "1:You said: one", "0:one"}, texts, "topic t2")
	first := readHistory(t, s.URL, historyPath("default"), with(thread, "topic", "t2", "pageSize", "3"), auth...)
	require.Len(t, first.Messages, 3, "first page of t2")
	require.NotNil(t, first.Next, "first page of t2")
	rest := readHistory(t, s.URL, historyPath("default"), with(thread, "topic", "t2", "pageSize", "3", "before", *first.Next), auth...)
	assert.Equal(t, messageIDs(page.Messages), messageIDs(append(first.Messages, rest.Messages...)), "t2 by pages")
	assert.Nil(t, rest.Next, "t2's last page")
	none := readHistory(t, s.URL, historyPath("default"), with(thread, "topic", "nope"), auth...)
	assert.Empty(t, none.Messages, "unknown topic")
}

// stream is an open listen request.
type stream struct {
	Resp   *http.Response
	Events chan sse.Event
	cancel context.CancelFunc
	done   chan struct{}
}

// listen opens the event stream of a thread of the default tenant; its cleanup closes it.
func listen(t *testing.T, s *stacktest.Stack, query url.Values, hdr ...string) *stream {
	t.Helper()
	return listenAt(t, s, "default", query, hdr...)
}

// listenAt opens the event stream of a thread of tenant; its cleanup closes it.
func listenAt(t *testing.T, s *stacktest.Stack, tenant string, query url.Values, hdr ...string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := http.DefaultClient.Do(newRequest(t, ctx, http.MethodGet, s.URL+"/api/v1/admin/tenants/"+tenant+"/messaging/listen?"+query.Encode(), nil, hdr...))
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		require.Equal(t, http.StatusOK, resp.StatusCode, "listen: %s", b)
	}
	st := &stream{Resp: resp, Events: make(chan sse.Event, 100), cancel: cancel, done: make(chan struct{})}
	t.Cleanup(st.Close)
	go func() {
		defer close(st.done)
		defer close(st.Events)
		scanEvents(resp.Body, func(ev sse.Event) bool { st.Events <- ev; return true })
	}()
	return st
}

// Close disconnects and waits for the reader to stop.
func (st *stream) Close() {
	st.cancel()
	st.Resp.Body.Close()
	<-st.done
}

// next returns the stream's next message event, skipping comments.
func (st *stream) next(t *testing.T) (sse.Event, storedMessage) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-st.Events:
			require.True(t, ok, "the stream ended")
			if ev.IsComment() {
				continue
			}
			var m storedMessage
			require.Equal(t, "message", ev.Event, "event type")
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &m), "event data %q", ev.Data)
			require.Equal(t, m.ID, ev.ID, "the event's id is its message's")
			return ev, m
		case <-timeout:
			require.FailNow(t, "no event within 10s")
		}
	}
}

// ended waits until the stream ends, skipping what comes before, and fails the test if it does
// not within 5 s.
func (st *stream) ended(t *testing.T, msgAndArgs ...any) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-st.Events:
			if !ok {
				return
			}
		case <-timeout:
			require.FailNow(t, "the stream did not end within 5s", msgAndArgs...)
		}
	}
}

// comment returns the stream's first comment.
func (st *stream) comment(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-st.Events:
		require.NotEmpty(t, ev.Comment, "first event %+v, want a comment", ev)
		return ev.Comment
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no comment within 10s")
	}
	return ""
}

// quiet checks that the stream delivers no message for a while.
func (st *stream) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev := <-st.Events:
			require.NotEmpty(t, ev.Comment, "unexpected event %+v", ev)
		case <-timeout:
			return
		}
	}
}

func TestHistoryListen(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	thread := q("workflowId", echoWF, "participantId", "dave")
	auth := bearerHeader(s.Key)
	// History from before the stream is not sent.
	webhookCalls(t, s, "dave", "old")
	waitThread(t, s, "dave", 2)

	last := checkLiveEvents(t, s, thread)

	// Missed while disconnected: b and c; resuming delivers exactly those, then live ones.
	webhookCalls(t, s, "dave", "b", "c")
	resumed := listen(t, s, thread, append(auth, "Last-Event-ID", last)...)
	require.Equal(t, "listening", resumed.comment(t), "comment")
	webhookCalls(t, s, "dave", "d")
	var reqs []string
	for range 6 {
		_, m := resumed.next(t)
		reqs = append(reqs, fmt.Sprintf("%s/%d", m.RequestID, m.Direction))
	}
	require.Equal(t, []string{"b/0", "b/1", "c/0", "c/1", "d/0", "d/1"}, reqs, "resumed with")
	resumed.quiet(t, 200*time.Millisecond)
	resumed.Close()

	t.Run("lastEventId query", func(t *testing.T) {
		stored := waitThread(t, s, "dave", 10)
		st := listen(t, s, with(thread, "lastEventId", stored[3].ID, "apikey", s.Key))
		var ids []string
		for range 3 {
			_, m := st.next(t)
			ids = append(ids, m.ID)
		}
		assert.Equal(t, []string{stored[2].ID, stored[1].ID, stored[0].ID}, ids, "resumed with")
	})

	t.Run("unknown Last-Event-ID", func(t *testing.T) {
		st := listen(t, s, thread, append(auth, "Last-Event-ID", "no-such-id")...)
		require.Equal(t, "last-event-id not found", st.comment(t), "comment")
		webhookCalls(t, s, "dave", "e")
		for dir := range 2 {
			_, m := st.next(t)
			assert.Equal(t, "e", m.RequestID, "event %d after an unknown id is %+v", dir, m)
			assert.Equal(t, dir, m.Direction, "event %d after an unknown id is %+v", dir, m)
		}
	})

	t.Run("other threads", func(t *testing.T) {
		st := listen(t, s, thread, auth...)
		st.comment(t)
		webhookCalls(t, s, "erin", "x")
		waitThread(t, s, "erin", 2)
		st.quiet(t, 200*time.Millisecond)
	})
}

// checkLiveEvents opens a stream of dave's thread and checks that a webhook call arrives on it as
// two events, the call then its answer, with the ids of the stored messages. It returns the id of
// the last.
func checkLiveEvents(t *testing.T, s *stacktest.Stack, thread url.Values) string {
	t.Helper()
	auth := bearerHeader(s.Key)
	first := listen(t, s, thread, auth...)
	require.Equal(t, "text/event-stream", first.Resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", first.Resp.Header.Get("Cache-Control"))
	webhookCalls(t, s, "Dave", "a")
	var got []storedMessage
	for range 2 {
		_, m := first.next(t)
		got = append(got, m)
	}
	assert.Equal(t, "a", got[0].RequestID, "events %+v", got)
	assert.Equal(t, 0, got[0].Direction, "events %+v", got)
	assert.Equal(t, "dave", got[0].ParticipantID, "events %+v", got)
	assert.Equal(t, 4, got[0].MessageType, "events %+v", got)
	assert.Equal(t, "a", got[1].RequestID, "events %+v", got)
	assert.Equal(t, 1, got[1].Direction, "events %+v", got)
	stored := waitThread(t, s, "dave", 4)
	require.Equal(t, messageIDs(stored[:2]), []string{got[1].ID, got[0].ID}, "the event ids are not the stored ones")
	first.Close()
	return got[1].ID
}
