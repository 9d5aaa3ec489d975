package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/keys"
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
	status, ct, b := get(t, base, path, query, hdr...)
	if status != http.StatusOK || ct != "application/json" {
		t.Fatalf("GET %s?%s: %d %s %s", path, query.Encode(), status, ct, b)
	}
	var a historyAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
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
		if status != http.StatusOK {
			t.Fatalf("webhook %s: %d %s", id, status, b)
		}
	}
}

// waitThread polls the newest page of a thread until it holds n messages: the host answers a
// webhook before it stores the outgoing message.
func waitThread(t *testing.T, s *stacktest.Stack, participant string, n int) []storedMessage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", participant, "pageSize", "100"), "Authorization", "Bearer "+s.Key)
		if len(a.Messages) >= n {
			return a.Messages
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread of %s has %d messages, want %d", participant, len(a.Messages), n)
		}
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
	s := stacktest.Start(t, stacktest.Options{})
	auth := []string{"Authorization", "Bearer " + s.Key}
	webhookCalls(t, s, "Alice", "r-0", "r-1", "r-2", "r-3", "r-4")
	webhookCalls(t, s, "bob", "b-0")
	all := waitThread(t, s, "alice", 10)
	waitThread(t, s, "bob", 2)

	t.Run("newest page", func(t *testing.T) {
		a := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "ALICE"), auth...)
		if a.WorkflowID != echoWF || a.ParticipantID != "alice" || a.ThreadID != subject.ThreadID(echoWF, "alice") {
			t.Fatalf("answer names %s / %s / %s", a.WorkflowID, a.ParticipantID, a.ThreadID)
		}
		if a.Page != 1 || a.PageSize != 20 || a.Next != nil {
			t.Fatalf("page %d size %d next %v, want 1, 20, none", a.Page, a.PageSize, a.Next)
		}
		if len(a.Messages) != 10 {
			t.Fatalf("%d messages, want 10", len(a.Messages))
		}
		seen := map[string]bool{}
		for i, m := range a.Messages {
			// Newest first: each call's outgoing message, then its incoming one.
			wantReq, wantDir := fmt.Sprintf("r-%d", 4-i/2), 1-i%2
			if m.RequestID != wantReq || m.Direction != wantDir {
				t.Errorf("message %d is %s direction %d, want %s direction %d", i, m.RequestID, m.Direction, wantReq, wantDir)
			}
			if m.MessageType != 4 || m.WorkflowID != echoWF || m.ParticipantID != "alice" || m.ID == "" || seen[m.ID] {
				t.Errorf("message %d: %+v", i, m)
			}
			seen[m.ID] = true
			if _, err := time.Parse(time.RFC3339, m.CreatedAt); err != nil {
				t.Errorf("message %d createdAt %q: %v", i, m.CreatedAt, err)
			}
			if m.Direction == 0 && (m.Text == nil || *m.Text != "echo") {
				t.Errorf("incoming message %d has text %v, want the method", i, m.Text)
			}
		}
	})

	t.Run("page numbers", func(t *testing.T) {
		for _, tc := range []struct {
			page     string
			from, to int
			next     bool
		}{
			{"1", 0, 3, true}, {"2", 3, 6, true}, {"3", 6, 9, true}, {"4", 9, 10, false}, {"5", 10, 10, false},
		} {
			a := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "alice", "pageSize", "3", "page", tc.page), auth...)
			if got, want := messageIDs(a.Messages), messageIDs(all[tc.from:tc.to]); !slices.Equal(got, want) {
				t.Errorf("page %s = %v, want %v", tc.page, got, want)
			}
			if (a.Next != nil) != tc.next || a.PageSize != 3 || fmt.Sprint(a.Page) != tc.page {
				t.Errorf("page %s: page %d size %d next %v", tc.page, a.Page, a.PageSize, a.Next)
			}
		}
	})

	t.Run("cursors", func(t *testing.T) {
		var got []string
		query := q("workflowId", echoWF, "participantId", "alice", "pageSize", "4")
		for page := 1; ; page++ {
			if page > 5 {
				t.Fatal("paging does not end")
			}
			a := readHistory(t, s.URL, historyPath("default"), query, auth...)
			if a.Page != page {
				t.Errorf("page %d answered as page %d", page, a.Page)
			}
			got = append(got, messageIDs(a.Messages)...)
			if a.Next == nil {
				break
			}
			query.Set("before", *a.Next)
		}
		if want := messageIDs(all); !slices.Equal(got, want) {
			t.Fatalf("walked %v, want %v", got, want)
		}
	})

	t.Run("addressing", func(t *testing.T) {
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
				if got := messageIDs(a.Messages); !slices.Equal(got, want) || a.WorkflowID != echoWF {
					t.Fatalf("read %s %v, want %v", a.WorkflowID, got, want)
				}
			})
		}
		other := readHistory(t, s.URL, historyPath("default"), q("workflowId", "default:Echo:Conversational:default", "participantId", "alice"), auth...)
		if len(other.Messages) != 0 || other.Next != nil {
			t.Fatalf("another workflow's thread has %d messages", len(other.Messages))
		}
	})

	t.Run("bad paging", func(t *testing.T) {
		first := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "alice", "pageSize", "1"), auth...)
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
				status, ct, b := get(t, s.URL, historyPath("default"), query, auth...)
				if p := problemOf(t, status, ct, b, 400); p["type"] != "urn:agentbus:problem:"+tc.slug {
					t.Fatalf("type %v, want %s", p["type"], tc.slug)
				}
			})
		}
	})
}

func TestHistoryRefusals(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	ctx := context.Background()
	user, _, err := s.Keys.Create(ctx, keys.NewKey{Tenant: "default", Role: keys.RoleUser, Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitKnown(ctx, user); err != nil {
		t.Fatal(err)
	}
	bearerKey := func(k string) []string { return []string{"Authorization", "Bearer " + k} }
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
				{"bad key", path, thread, bearerKey("abk_nope"), 401, "unauthorized", ""},
				{"bad apikey with a good header", path, with(thread, "apikey", "abk_nope"), bearerKey(s.Key), 401, "unauthorized", ""},
				{"other tenant's key", path, thread, bearerKey(s.OtherKey), 403, "forbidden", ""},
				{"other tenant's key by apikey", path, with(thread, "apikey", s.OtherKey), nil, 403, "forbidden", ""},
				{"path and X-Tenant-Id differ", path, thread, append(bearerKey(s.Key), "X-Tenant-Id", "other"), 400, "tenant-mismatch", ""},
				{"no tenant", bare, thread, bearerKey(s.Key), 400, "missing-tenant", ""},
				{"X-Tenant-Id of another tenant", bare, thread, append(bearerKey(s.Key), "X-Tenant-Id", "other"), 403, "forbidden", ""},
				{"missing participantId", path, q("workflowId", echoWF), bearerKey(s.Key), 400, "missing-parameter", "participantId"},
				{"blank participantId", path, q("workflowId", echoWF, "participantId", "  "), bearerKey(s.Key), 400, "missing-parameter", "participantId"},
				{"missing workflow", path, q("participantId", "alice"), bearerKey(s.Key), 400, "missing-parameter", "workflowId"},
				{"missing activationName", path, q("agentName", "Echo", "participantId", "alice"), bearerKey(s.Key), 400, "missing-parameter", "activationName"},
				{"workflowId and agentName", path, with(thread, "agentName", "Echo"), bearerKey(s.Key), 400, "invalid-query", "workflowId"},
				{"three-segment workflowId", path, q("workflowId", "default:Echo:x", "participantId", "alice"), bearerKey(s.Key), 400, "invalid-workflow", "workflowId"},
				{"other tenant's workflowId", path, q("workflowId", "other:Echo:Supervisor Workflow:default", "participantId", "alice"), bearerKey(s.Key), 403, "forbidden", ""},
				{"bad query encoding", path + "?x=%zz&", nil, bearerKey(s.Key), 400, "invalid-query", ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					status, ct, b := get(t, s.URL, tc.path, tc.q, tc.hdr...)
					p := problemOf(t, status, ct, b, tc.want)
					if p["type"] != "urn:agentbus:problem:"+tc.slug {
						t.Fatalf("type %v, want %s", p["type"], tc.slug)
					}
					if detail, _ := p["detail"].(string); !strings.Contains(detail, tc.detail) {
						t.Fatalf("detail %q does not name %s", detail, tc.detail)
					}
					if strings.Contains(string(b), "abk_") {
						t.Fatal("the answer shows key material")
					}
				})
			}
			t.Run("user key reads", func(t *testing.T) {
				if endpoint == "listen" {
					return // TestHistoryListen streams; a refusal is all this table checks
				}
				readHistory(t, s.URL, path, thread, bearerKey(user)...)
			})
			t.Run("POST", func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, s.URL+path+"?"+thread.Encode(), nil)
				req.Header.Set("Authorization", "Bearer "+s.Key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				problemOf(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, 405)
				if resp.Header.Get("Allow") != http.MethodGet {
					t.Fatalf("Allow = %q", resp.Header.Get("Allow"))
				}
			})
		})
	}
}

// with returns a copy of v with name set to value.
func with(v url.Values, name, value string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	out.Set(name, value)
	return out
}

// sendChat sends a Chat message through the send endpoint and waits for its reply; it skips the
// test when the send endpoint does not answer yet.
func sendChat(t *testing.T, s *stacktest.Stack, participant, text, topic string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"agentName": "Echo", "activationName": "default", "participantId": participant, "type": "Chat", "text": text, "topic": topic})
	req, err := http.NewRequest(http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Skipf("the send endpoint does not work yet (%d %.200s): topics need scoped messages", resp.StatusCode, b)
	}
}

func TestHistoryTopics(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	auth := []string{"Authorization", "Bearer " + s.Key}
	topicsPath := "/api/v1/admin/tenants/default/messaging/topics"
	thread := q("workflowId", echoWF, "participantId", "carol")

	// A thread of webhook calls only has no topics: an empty list, not null.
	webhookCalls(t, s, "carol", "w-0")
	a := readHistory(t, s.URL, topicsPath, thread, auth...)
	if a.Topics == nil || len(a.Topics) != 0 || a.ThreadID != subject.ThreadID(echoWF, "carol") || a.ParticipantID != "carol" {
		t.Fatalf("topics answer %+v, want an empty list", a)
	}

	sendChat(t, s, "Carol", "one", "t2")
	sendChat(t, s, "carol", "two", "t1")
	sendChat(t, s, "carol", "three", "t2")
	sendChat(t, s, "carol", "four", "")
	a = readHistory(t, s.URL, topicsPath, thread, auth...)
	if !slices.Equal(a.Topics, []string{"t1", "t2"}) {
		t.Fatalf("topics = %v, want [t1 t2]", a.Topics)
	}

	// A topic keeps both sides of its messages, newest first, and pages within the topic.
	page := readHistory(t, s.URL, historyPath("default"), with(thread, "topic", "t2"), auth...)
	var texts []string
	for _, m := range page.Messages {
		if m.Scope != "t2" || m.MessageType != 0 {
			t.Errorf("topic t2 page has %+v", m)
		}
		texts = append(texts, fmt.Sprintf("%d:%s", m.Direction, *m.Text))
	}
	if want := []string{"1:You said: three", "0:three", "1:You said: one", "0:one"}; !slices.Equal(texts, want) {
		t.Fatalf("topic t2 = %v, want %v", texts, want)
	}
	first := readHistory(t, s.URL, historyPath("default"), with(with(thread, "topic", "t2"), "pageSize", "3"), auth...)
	if len(first.Messages) != 3 || first.Next == nil {
		t.Fatalf("first page of t2 has %d messages, next %v", len(first.Messages), first.Next)
	}
	rest := readHistory(t, s.URL, historyPath("default"), with(with(with(thread, "topic", "t2"), "pageSize", "3"), "before", *first.Next), auth...)
	if got := messageIDs(append(first.Messages, rest.Messages...)); !slices.Equal(got, messageIDs(page.Messages)) || rest.Next != nil {
		t.Fatalf("t2 by pages = %v, want %v", got, messageIDs(page.Messages))
	}
	if none := readHistory(t, s.URL, historyPath("default"), with(thread, "topic", "nope"), auth...); len(none.Messages) != 0 {
		t.Fatalf("unknown topic has %d messages", len(none.Messages))
	}
}

// sseEvent is one event or comment of an event stream.
type sseEvent struct {
	ID, Event, Data string
	// Comment is the text of a comment line; such an event has no other field.
	Comment string
}

// stream is an open listen request.
type stream struct {
	Resp   *http.Response
	Events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
}

// listen opens the event stream of a thread; its cleanup closes it.
func listen(t *testing.T, s *stacktest.Stack, query url.Values, hdr ...string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/messaging/listen?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	st := &stream{Resp: resp, Events: make(chan sseEvent, 100), cancel: cancel, done: make(chan struct{})}
	t.Cleanup(st.Close)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("listen: %d %s", resp.StatusCode, b)
	}
	go func() {
		defer close(st.done)
		defer close(st.Events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					st.Events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ev.Comment = strings.TrimSpace(line[1:])
			default:
				name, value, _ := strings.Cut(line, ":")
				value = strings.TrimPrefix(value, " ")
				switch name {
				case "id":
					ev.ID = value
				case "event":
					ev.Event = value
				case "data":
					ev.Data += value
				}
			}
		}
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
func (st *stream) next(t *testing.T) (sseEvent, storedMessage) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-st.Events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if ev.Comment != "" {
				continue
			}
			var m storedMessage
			if ev.Event != "message" {
				t.Fatalf("event %q, want message", ev.Event)
			}
			if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
				t.Fatalf("event data %q: %v", ev.Data, err)
			}
			if ev.ID != m.ID {
				t.Fatalf("event id %q, message id %q", ev.ID, m.ID)
			}
			return ev, m
		case <-timeout:
			t.Fatal("no event within 10s")
		}
	}
}

// comment returns the stream's first comment.
func (st *stream) comment(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-st.Events:
		if ev.Comment == "" {
			t.Fatalf("first event %+v, want a comment", ev)
		}
		return ev.Comment
	case <-time.After(10 * time.Second):
		t.Fatal("no comment within 10s")
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
			if ev.Comment == "" {
				t.Fatalf("unexpected event %+v", ev)
			}
		case <-timeout:
			return
		}
	}
}

func TestHistoryListen(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	thread := q("workflowId", echoWF, "participantId", "dave")
	auth := []string{"Authorization", "Bearer " + s.Key}
	// History from before the stream is not sent.
	webhookCalls(t, s, "dave", "old")
	waitThread(t, s, "dave", 2)

	first := listen(t, s, thread, auth...)
	if ct, cc := first.Resp.Header.Get("Content-Type"), first.Resp.Header.Get("Cache-Control"); ct != "text/event-stream" || cc != "no-cache" {
		t.Fatalf("Content-Type %q, Cache-Control %q", ct, cc)
	}
	webhookCalls(t, s, "Dave", "a")
	var got []storedMessage
	for range 2 {
		_, m := first.next(t)
		got = append(got, m)
	}
	if got[0].RequestID != "a" || got[0].Direction != 0 || got[1].RequestID != "a" || got[1].Direction != 1 || got[0].ParticipantID != "dave" || got[0].MessageType != 4 {
		t.Fatalf("events %+v", got)
	}
	if stored := waitThread(t, s, "dave", 4); !slices.Equal(messageIDs(stored[:2]), []string{got[1].ID, got[0].ID}) {
		t.Fatalf("event ids %v are not the stored %v", messageIDs(got), messageIDs(stored[:2]))
	}
	first.Close()

	// Missed while disconnected: b and c; resuming delivers exactly those, then live ones.
	webhookCalls(t, s, "dave", "b", "c")
	resumed := listen(t, s, thread, append(auth, "Last-Event-ID", got[1].ID)...)
	if c := resumed.comment(t); c != "listening" {
		t.Fatalf("comment %q", c)
	}
	webhookCalls(t, s, "dave", "d")
	var reqs []string
	for range 6 {
		_, m := resumed.next(t)
		reqs = append(reqs, fmt.Sprintf("%s/%d", m.RequestID, m.Direction))
	}
	if want := []string{"b/0", "b/1", "c/0", "c/1", "d/0", "d/1"}; !slices.Equal(reqs, want) {
		t.Fatalf("resumed with %v, want %v", reqs, want)
	}
	resumed.quiet(t, 200*time.Millisecond)
	resumed.Close()

	t.Run("lastEventId query", func(t *testing.T) {
		stored := waitThread(t, s, "dave", 10)
		st := listen(t, s, with(with(thread, "lastEventId", stored[3].ID), "apikey", s.Key))
		var ids []string
		for range 3 {
			_, m := st.next(t)
			ids = append(ids, m.ID)
		}
		if want := []string{stored[2].ID, stored[1].ID, stored[0].ID}; !slices.Equal(ids, want) {
			t.Fatalf("resumed with %v, want %v", ids, want)
		}
	})

	t.Run("unknown Last-Event-ID", func(t *testing.T) {
		st := listen(t, s, thread, append(auth, "Last-Event-ID", "no-such-id")...)
		if c := st.comment(t); c != "last-event-id not found" {
			t.Fatalf("comment %q", c)
		}
		webhookCalls(t, s, "dave", "e")
		for dir := range 2 {
			if _, m := st.next(t); m.RequestID != "e" || m.Direction != dir {
				t.Fatalf("event %d after an unknown id is %+v, want e's, direction %d", dir, m, dir)
			}
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
