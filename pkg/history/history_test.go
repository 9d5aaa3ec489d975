package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// Every test stops what it starts: NATS servers and follows.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}

const (
	tenant = "acme"
	wf     = "acme:Echo:Supervisor Workflow:default"
	user   = "alice@example.com"
)

type env struct {
	ctx   context.Context
	store *history.Store
	res   *bus.Resources
}

func setup(t *testing.T) env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	res := natstest.Bus(t, bus.Config{})
	return env{ctx: ctx, store: history.NewStore(res.Messages, res.Topics, res.JS), res: res}
}

// another is a second Store on the same bus, as another host would have.
func (e env) another() *history.Store {
	return history.NewStore(e.res.Messages, e.res.Topics, e.res.JS)
}

func chat(id, text string) *history.Message {
	return &history.Message{ID: id, Direction: history.In, MessageType: history.Chat, Text: &text, RequestID: "r-" + id}
}

// appendN appends n chat messages named prefix-0 … prefix-(n-1) with scope(i), as records of
// two messages (exchanges) and one in turn, so that pages end inside records too.
func appendN(t *testing.T, e env, participant, prefix string, n int, scope func(int) string) []*history.Message {
	t.Helper()
	cur, err := e.store.Cursor(e.ctx, tenant, wf, participant)
	require.NoError(t, err)
	var all []*history.Message
	for i, k := 0, 2; i < n; i, k = i+k, 3-k {
		var batch []*history.Message
		for j := i; j < min(i+k, n); j++ {
			m := chat(fmt.Sprintf("%s-%d", prefix, j), fmt.Sprintf("text %d", j))
			if scope != nil {
				m.Scope = scope(j)
			}
			batch = append(batch, m)
		}
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, participant, &cur, batch...), "append")
		all = append(all, batch...)
	}
	return all
}

// walk reads the whole thread page by page and checks that cursors only move back.
func walk(t *testing.T, e env, participant string, opt history.PageOptions) []history.Message {
	t.Helper()
	var all []history.Message
	for pages := 0; ; pages++ {
		require.LessOrEqual(t, pages, 1000, "paging does not end")
		page, next, err := e.store.Page(e.ctx, tenant, wf, participant, opt)
		require.NoError(t, err, "page before %d", opt.Before)
		size := opt.Size
		if size == 0 {
			size = history.DefaultPageSize
		}
		require.LessOrEqual(t, len(page), size, "page of %d messages, size %d", len(page), size)
		all = append(all, page...)
		if next == 0 {
			return all
		}
		require.NotEmpty(t, page, "next = %d on an empty page", next)
		require.Equal(t, page[len(page)-1].Pos, next, "next, want the oldest Seq of the page")
		opt.Before = next
	}
}

func ids(ms []history.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func reversedIDs(ms []*history.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[len(ms)-1-i] = m.ID
	}
	return out
}

func TestAppendAndNewestPage(t *testing.T) {
	e := setup(t)
	created := time.Date(2025, 3, 4, 5, 6, 7, 891234567, time.FixedZone("CET", 3600))
	msgs := appendSample(t, e, created)

	page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{})
	require.NoError(t, err)
	assert.Zero(t, next, "next")
	require.Equal(t, []string{"m3", "m2", "m1"}, ids(page), "page")
	checkReadBack(t, page, msgs[0], created)

	for _, tt := range jsonFormCases(page) {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.msg)
			require.NoError(t, err)
			var j map[string]any
			require.NoError(t, json.Unmarshal(b, &j))
			for _, k := range []string{"id", "createdAt", "direction", "messageType", "text", "data", "requestId", "participantId", "workflowId"} {
				assert.Contains(t, j, k, "%s missing", k)
			}
			assert.NotContains(t, j, "Seq", "Seq is in the JSON form")
			tt.check(t, j)
			if t.Failed() {
				t.Logf("JSON: %s", b)
			}
		})
	}
}

// appendSample appends to the thread an exchange (m1, a chat message created at created, and
// m2, data; one record) and one message (m3, a webhook; another), and checks the cursor Append
// leaves and Cursor reads back. It returns the three messages.
func appendSample(t *testing.T, e env, created time.Time) []*history.Message {
	t.Helper()
	text := "hello"
	msgs := []*history.Message{
		{ID: "m1", CreatedAt: created, Direction: history.In, MessageType: history.Chat, Text: &text,
			RequestID: "r1", ParticipantID: user, WorkflowID: wf, Hint: "be brief", Scope: "billing"},
		{ID: "m2", CreatedAt: created, Direction: history.Out, MessageType: history.Data,
			Data: json.RawMessage(`{"sum":3}`), RequestID: "r1"},
		{ID: "m3", Direction: history.Out, MessageType: history.Webhook, RequestID: "r2"},
	}
	var cur history.Cursor
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, msgs[0], msgs[1]))
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, msgs[2]))
	require.Equal(t, msgs[0].Pos+1, msgs[1].Pos, "positions of an exchange's messages")
	require.Equal(t, msgs[2].Pos/2, cur.LastSeq, "cursor = %+v after appending at %d %d %d", cur, msgs[0].Pos, msgs[1].Pos, msgs[2].Pos)
	require.Equal(t, []uint64{msgs[0].Pos / 2}, cur.Prev, "cursor = %+v after appending at %d %d %d", cur, msgs[0].Pos, msgs[1].Pos, msgs[2].Pos)
	loaded, err := e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err, "Cursor")
	require.Equal(t, cur.LastSeq, loaded.LastSeq, "Cursor = %+v, want %+v", loaded, cur)
	require.Equal(t, cur.Prev, loaded.Prev, "Cursor = %+v, want %+v", loaded, cur)
	return msgs
}

// checkReadBack checks the messages of appendSample's page as read back: m1's fields as
// appended (its creation time to the millisecond), and m3's thread ids and creation time, which
// Append fills.
func checkReadBack(t *testing.T, page []history.Message, appended *history.Message, created time.Time) {
	t.Helper()
	m1 := page[2]
	assert.True(t, m1.CreatedAt.Equal(created.Truncate(time.Millisecond)), "m1 read back as %+v", m1)
	assert.Equal(t, "be brief", m1.Hint, "m1 read back as %+v", m1)
	assert.Equal(t, "billing", m1.Scope, "m1 read back as %+v", m1)
	if assert.NotNil(t, m1.Text, "m1 read back as %+v", m1) {
		assert.Equal(t, "hello", *m1.Text, "m1 read back as %+v", m1)
	}
	assert.Nil(t, m1.Data, "m1 read back as %+v", m1)
	assert.Equal(t, "r1", m1.RequestID, "m1 read back as %+v", m1)
	assert.Equal(t, appended.Pos, m1.Pos, "m1 read back as %+v", m1)
	// Append fills the thread's ids and a creation time.
	m3 := page[0]
	assert.Equal(t, wf, m3.WorkflowID, "m3 read back as %+v", m3)
	assert.Equal(t, user, m3.ParticipantID, "m3 read back as %+v", m3)
	assert.False(t, m3.CreatedAt.IsZero(), "m3 read back as %+v", m3)
}

// A jsonFormCase checks the JSON form of one message of appendSample's page.
type jsonFormCase struct {
	name  string
	msg   history.Message
	check func(*testing.T, map[string]any)
}

// jsonFormCases returns the checks of the JSON forms of the messages of appendSample's page,
// newest first.
func jsonFormCases(page []history.Message) []jsonFormCase {
	stamp := `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`
	return []jsonFormCase{
		{"chat has text and null data", page[2], func(t *testing.T, j map[string]any) {
			assert.Equal(t, "hello", j["text"], "text")
			assert.Nil(t, j["data"], "data")
			assert.Equal(t, "2025-03-04T04:06:07.891Z", j["createdAt"], "createdAt")
			assert.Equal(t, "billing", j["scope"], "scope")
			assert.Equal(t, "be brief", j["hint"], "hint")
			assert.Equal(t, 0.0, j["direction"], "direction")
			assert.Equal(t, 0.0, j["messageType"], "messageType")
		}},
		{"data has null text and an object", page[1], func(t *testing.T, j map[string]any) {
			assert.Nil(t, j["text"], "text")
			if assert.IsType(t, map[string]any{}, j["data"], "data") {
				assert.Equal(t, 3.0, j["data"].(map[string]any)["sum"], "data.sum")
			}
			assert.Equal(t, 1.0, j["messageType"], "messageType")
			assert.Equal(t, 1.0, j["direction"], "direction")
			assert.NotContains(t, j, "scope", "empty scope is not omitted")
		}},
		{"webhook has both null", page[0], func(t *testing.T, j map[string]any) {
			assert.Nil(t, j["text"], "text")
			assert.Nil(t, j["data"], "data")
			assert.Equal(t, 4.0, j["messageType"], "messageType")
			if assert.IsType(t, "", j["createdAt"], "createdAt") {
				assert.Regexp(t, stamp, j["createdAt"], "createdAt")
			}
		}},
	}
}

func TestEmptyThread(t *testing.T) {
	e := setup(t)
	page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{})
	require.NoError(t, err, "Page")
	require.Empty(t, page, "Page: want empty")
	require.Zero(t, next, "Page's next: want 0")
	cur, err := e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err, "Cursor")
	require.Zero(t, cur.LastSeq, "Cursor = %+v; want zero", cur)
	require.Nil(t, cur.Prev, "Cursor = %+v; want zero", cur)
	topics, err := e.store.Topics(e.ctx, tenant, wf, user)
	require.NoError(t, err, "Topics")
	require.NotNil(t, topics, "Topics: want empty, not nil")
	require.Empty(t, topics, "Topics: want empty")
}

func TestPagingThroughTheThread(t *testing.T) {
	e := setup(t)
	msgs := appendN(t, e, user, "m", 150, nil)
	want := reversedIDs(msgs)
	for _, size := range []int{20, 1, 7, 31, 32, 33, 100} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			all := walk(t, e, user, history.PageOptions{Size: size})
			require.Equal(t, want, ids(all), "walked messages")
			for i := 1; i < len(all); i++ {
				require.Less(t, all[i].Pos, all[i-1].Pos, "message %d has Seq %d after %d", i, all[i].Pos, all[i-1].Pos)
			}
		})
	}
	t.Run("size above the maximum", func(t *testing.T) {
		page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{Size: 1000})
		require.NoError(t, err)
		require.Len(t, page, history.MaxPageSize)
		require.Equal(t, page[len(page)-1].Pos, next, "next")
	})
}

func TestBeforeCursor(t *testing.T) {
	e := setup(t)
	msgs := appendN(t, e, user, "m", 60, nil)
	other := appendN(t, e, "bob", "o", 1, nil)
	tests := []struct {
		name    string
		before  uint64
		want    []string
		wantErr error
	}{
		{"middle of the thread", msgs[45].Pos, []string{"m-44", "m-43", "m-42"}, nil},
		{"oldest message", msgs[0].Pos, nil, nil},
		{"second message", msgs[1].Pos, []string{"m-0"}, nil},
		{"past the end", other[0].Pos + 1000, nil, nil},
		{"another thread's message", other[0].Pos, nil, history.ErrBadCursor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{Size: 3, Before: tt.before})
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			if len(tt.want) == 0 {
				require.Empty(t, page, "page")
			} else {
				require.Equal(t, tt.want, ids(page), "page")
			}
			if len(tt.want) == 3 {
				assert.Equal(t, page[2].Pos, next, "next")
			}
			if len(tt.want) < 3 {
				assert.Zero(t, next, "next")
			}
		})
	}
}

func TestScopeFilter(t *testing.T) {
	e := setup(t)
	scope := func(i int) string {
		switch {
		case i == 3 || i == 90:
			return "rare"
		case i%3 == 0:
			return ""
		case i%3 == 1:
			return "a"
		}
		return "b"
	}
	msgs := appendN(t, e, user, "m", 120, scope)
	wantOf := func(s string) []string {
		var out []string
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Scope == s {
				out = append(out, msgs[i].ID)
			}
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		scope string
		size  int
	}{
		{"rare scope across chain links", "rare", 20},
		{"common scope paged", "a", 5},
		{"common scope in one page", "b", 100},
		{"unknown scope", "nope", 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			all := walk(t, e, user, history.PageOptions{Size: tt.size, Scope: tt.scope})
			if want := wantOf(tt.scope); len(want) == 0 {
				require.Empty(t, all)
			} else {
				require.Equal(t, want, ids(all))
			}
		})
	}
}

func TestTopics(t *testing.T) {
	e := setup(t)
	appendN(t, e, user, "m", 20, func(i int) string { return []string{"support", "", "billing", "support"}[i%4] })
	appendN(t, e, "bob", "b", 1, func(int) string { return "other" })
	got, err := e.store.Topics(e.ctx, tenant, wf, user)
	require.NoError(t, err, "Topics")
	require.Equal(t, []string{"billing", "support"}, got, "Topics")

	// Hosts with their own caches adding scopes at once lose none.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			s := e.another()
			errs <- s.Append(e.ctx, tenant, wf, "carol", &history.Cursor{}, &history.Message{Scope: fmt.Sprintf("t%d", i)})
		})
	}
	wg.Wait()
	close(errs)
	stored := 0
	for err := range errs {
		if err == nil {
			stored++
		} else {
			require.ErrorIs(t, err, history.ErrConflict)
		}
	}
	require.Equal(t, 1, stored, "appends on an empty cursor that succeeded")
	got, err = e.store.Topics(e.ctx, tenant, wf, "carol")
	require.NoError(t, err, "Topics")
	require.Len(t, got, 1, "Topics: want the one stored message's scope")
}

func TestTopicsConcurrentWriters(t *testing.T) {
	e := setup(t)
	// Eight threads' writers would not share a list; eight stores writing one thread's list
	// after reloading their cursors do.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s := e.another()
			for {
				cur, err := s.Cursor(e.ctx, tenant, wf, user)
				if !assert.NoError(t, err) {
					return
				}
				err = s.Append(e.ctx, tenant, wf, user, &cur, &history.Message{ID: fmt.Sprint(i), Scope: fmt.Sprintf("t%d", i)})
				if err == nil {
					return
				}
				if !assert.ErrorIs(t, err, history.ErrConflict) {
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := e.store.Topics(e.ctx, tenant, wf, user)
	require.NoError(t, err, "Topics")
	require.Equal(t, []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}, got, "Topics")
	all := walk(t, e, user, history.PageOptions{})
	require.Len(t, all, 8, "thread's messages")
}

func TestConflict(t *testing.T) {
	e := setup(t)
	first, err := e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err)
	second := first
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &first, chat("a", "a")))
	before := second
	require.ErrorIs(t, e.store.Append(e.ctx, tenant, wf, user, &second, chat("b", "b")), history.ErrConflict, "stale append")
	require.Equal(t, before.LastSeq, second.LastSeq, "a failed append moved the cursor")
	// Once appended, the first writer's cursor stays good; the second reloads.
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &first, chat("c", "c")))
	require.ErrorIs(t, e.store.Append(e.ctx, tenant, wf, user, &second, chat("b", "b")), history.ErrConflict, "stale append")
	second, err = e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err)
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &second, chat("b", "b")))
	require.Equal(t, []string{"b", "c", "a"}, ids(walk(t, e, user, history.PageOptions{})), "thread")
}

// Each record names the request that stored it (Cursor.Origin), and a Cursor read from the
// thread knows the newest record's (Newest): a copy of an earlier request delivered again can
// tell that a later one stored a record since.
func TestOrigin(t *testing.T) {
	e := setup(t)
	cur, err := e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err)
	require.Zero(t, cur.Newest, "an empty thread")
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("a", "a")))
	read, err := e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err)
	require.Zero(t, read.Newest, "a record appended without an origin names none")

	first := history.Origin{Seq: 7, Stored: 1_700_000_000_000_000_000}
	cur.Origin = first
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("b", "b"), chat("c", "c")))
	require.Equal(t, first, cur.Newest, "the appending cursor")
	read, err = e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err)
	require.Equal(t, first, read.Newest, "a cursor read anew")

	later := history.Origin{Seq: 9, Stored: first.Stored + 1}
	cur.Origin = later
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("d", "d")))
	read, err = e.store.Recover(e.ctx, tenant, wf, user, "r-b", false)
	require.NoError(t, err)
	require.Equal(t, later, read.Newest, "a cursor Recover read")
	assert.True(t, first.Before(read.Newest), "the earlier request's copy sees a later record")
	assert.False(t, later.Before(read.Newest), "the newest record's own request")
}

// HeldEarlier finds the messages an earlier copy of a request stored (a request the inbox
// stored twice), past the records of later requests, but not those of the request's own copy,
// of a request stored after it, of one outside the window (the id names a new request there) or
// of a record that names no origin.
func TestHeldEarlier(t *testing.T) {
	e := setup(t)
	const window = 10 * time.Minute
	at := int64(1_700_000_000_000_000_000)
	held := func(requestID string, o history.Origin) bool {
		t.Helper()
		ok, err := e.store.HeldEarlier(e.ctx, tenant, wf, user, requestID, o, window)
		require.NoError(t, err)
		return ok
	}
	assert.False(t, held("r-a", history.Origin{Seq: 50, Stored: at}), "an empty thread")

	var cur history.Cursor
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("none", "none")))
	cur.Origin = history.Origin{Seq: 5, Stored: at - window.Nanoseconds() - 1}
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("old", "old")))
	cur.Origin = history.Origin{Seq: 10, Stored: at}
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("a", "a"), chat("a2", "a2")))
	for i := range 6 { // later requests' exchanges
		cur.Origin = history.Origin{Seq: uint64(11 + i), Stored: at + int64(i+1)}
		id := fmt.Sprint("later-", i)
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat(id, id), chat(id+"-reply", id)))
	}

	second := history.Origin{Seq: 30, Stored: at + 100}
	assert.True(t, held("r-a", second), "the first copy's messages, behind later requests'")
	assert.False(t, held("r-a", history.Origin{Seq: 10, Stored: at}), "the request's own copy")
	assert.False(t, held("r-a", history.Origin{Seq: 9, Stored: at - 1}), "a copy stored before the messages' request")
	assert.False(t, held("r-new", second), "a request that stored nothing")
	assert.False(t, held("r-later-5", history.Origin{Seq: 12, Stored: at + 2}), "a later request's messages")
	assert.False(t, held("r-old", second), "messages stored before the window")
	assert.False(t, held("r-none", second), "messages of a record that names no origin")
	assert.False(t, held("r-a", history.Origin{Seq: 30, Stored: at + window.Nanoseconds() + 1}),
		"a copy stored more than the window after them")
}

func TestOriginBefore(t *testing.T) {
	at := int64(1_700_000_000_000_000_000)
	for _, c := range []struct {
		name string
		o, p history.Origin
		want bool
	}{
		{"an earlier sequence stored earlier", history.Origin{3, at}, history.Origin{4, at + 1}, true},
		{"an earlier sequence stored at the same time", history.Origin{3, at}, history.Origin{4, at}, true},
		{"the same request", history.Origin{4, at}, history.Origin{4, at}, false},
		{"a later sequence", history.Origin{5, at}, history.Origin{4, at}, false},
		{"an inbox made again: a lower sequence stored later", history.Origin{3, at + 5}, history.Origin{900, at}, false},
		{"no origin on the record", history.Origin{3, at}, history.Origin{}, false},
		{"no origin of the request", history.Origin{}, history.Origin{4, at}, false},
	} {
		assert.Equal(t, c.want, c.o.Before(c.p), c.name)
	}
}

func TestDedupe(t *testing.T) {
	e := setup(t)
	var cur history.Cursor
	orig := chat("same", "once")
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, orig, chat("next", "next")))
	after := cur

	// A handler run again stores its messages again with the same cursor.
	again, again2 := chat("same", "once"), chat("next", "next")
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, again, again2))
	assert.Equal(t, orig.Pos, again.Pos, "duplicate's Seq, want the stored one")
	assert.Equal(t, after.LastSeq, cur.LastSeq, "duplicates moved the cursor from %+v to %+v", after, cur)
	assert.Equal(t, after.Prev, cur.Prev, "duplicates moved the cursor from %+v to %+v", after, cur)
	// A cursor from before the first store is stale (an append whose acknowledgement was lost):
	// reloaded, it knows the newest record, and the retry stores nothing new.
	var stale history.Cursor
	err := e.store.Append(e.ctx, tenant, wf, user, &stale, chat("same", "once"))
	require.ErrorIs(t, err, history.ErrConflict, "stale duplicate")
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("new", "new")))
	require.Equal(t, []string{"new", "next", "same"}, ids(walk(t, e, user, history.PageOptions{})), "thread")
}

// A request stored alone by one delivery and with its reply by another (or the other way round)
// keeps one copy of each message.
func TestDedupeAcrossRecords(t *testing.T) {
	reply := func(id string) *history.Message {
		return &history.Message{ID: id, Direction: history.Out, MessageType: history.Data, Data: json.RawMessage(`{"ok":true}`)}
	}
	t.Run("alone, then with its reply", func(t *testing.T) {
		e := setup(t)
		var cur history.Cursor
		in := chat("in", "hi")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, in))
		// A redelivery with a reloaded cursor stores the exchange: the reply is added alone.
		cur, err := e.store.Cursor(e.ctx, tenant, wf, user)
		require.NoError(t, err)
		in2, out := chat("in", "hi"), reply("out")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, in2, out))
		assert.Equal(t, in.Pos, in2.Pos, "the request's position, want the stored one")
		assert.Greater(t, out.Pos, in.Pos, "the reply's position")
		require.Equal(t, []string{"out", "in"}, ids(walk(t, e, user, history.PageOptions{})), "thread")
	})
	t.Run("with its reply, then alone", func(t *testing.T) {
		e := setup(t)
		var cur history.Cursor
		in, out := chat("in", "hi"), reply("out")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, in, out))
		// A redelivery stores the request before running the handler, then the reply.
		cur, err := e.store.Cursor(e.ctx, tenant, wf, user)
		require.NoError(t, err)
		in2, out2 := chat("in", "hi"), reply("out")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, in2))
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, out2))
		assert.Equal(t, in.Pos, in2.Pos, "the request's position, want the stored one")
		assert.Equal(t, out.Pos, out2.Pos, "the reply's position, want the stored one")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("next", "x")))
		require.Equal(t, []string{"next", "out", "in"}, ids(walk(t, e, user, history.PageOptions{})), "thread")
	})
}

// A redelivered request's writer recovers the messages the request stored: they are the thread's
// newest records carrying its id, several records deep; a plain Cursor knows only the newest
// record's. A replayed request's messages may lie behind later requests' (deep).
func TestRecover(t *testing.T) {
	t.Run("plain cursor", func(t *testing.T) {
		e, first := storedRequest(t)
		cur, err := e.store.Cursor(e.ctx, tenant, wf, user)
		require.NoError(t, err)
		msgs := requestAgain()
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, msgs[2]))
		assert.Equal(t, first[2].Pos, msgs[2].Pos, "the newest record's message is known")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, msgs[0]))
		assert.NotEqual(t, first[0].Pos, msgs[0].Pos, "an older record's message is not")
	})
	t.Run("redelivered", func(t *testing.T) {
		e, first := storedRequest(t)
		cur, err := e.store.Recover(e.ctx, tenant, wf, user, "r", false)
		require.NoError(t, err)
		runAgain(t, e, &cur, first)
		require.Equal(t, []string{"out", "result", "call", "in", "before"}, ids(walk(t, e, user, history.PageOptions{})), "thread")
	})
	t.Run("replayed", func(t *testing.T) {
		e, first := storedThenLater(t)
		deep, err := e.store.Recover(e.ctx, tenant, wf, user, "r", true)
		require.NoError(t, err)
		runAgain(t, e, &deep, first)
		require.Equal(t, []string{"out", "later", "result", "call", "in", "before"}, ids(walk(t, e, user, history.PageOptions{})), "thread")
	})
	t.Run("conflict after recovery", func(t *testing.T) {
		// The redelivered request found its messages, then another writer appended to the
		// thread (a host that still held the partition): the cursor read anew after the
		// conflict carries what the first one knew.
		e, first := storedRequest(t)
		cur, err := e.store.Recover(e.ctx, tenant, wf, user, "r", false)
		require.NoError(t, err)
		other, err := e.store.Cursor(e.ctx, tenant, wf, user)
		require.NoError(t, err)
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &other, ofRequest("s", "other", "another writer")))
		msgs := requestAgain()
		require.ErrorIs(t, e.store.Append(e.ctx, tenant, wf, user, &cur, msgs[2], msgs[3]), history.ErrConflict)
		fresh, err := e.store.Cursor(e.ctx, tenant, wf, user)
		require.NoError(t, err)
		fresh.Carry(&cur)
		runAgain(t, e, &fresh, first)
		require.Equal(t, []string{"out", "other", "result", "call", "in", "before"}, ids(walk(t, e, user, history.PageOptions{})), "thread")
	})
	t.Run("tail stops at another request", func(t *testing.T) {
		e, first := storedThenLater(t)
		tail, err := e.store.Recover(e.ctx, tenant, wf, user, "r", false)
		require.NoError(t, err)
		in := ofRequest("r", "in", "hi")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &tail, in))
		assert.NotEqual(t, first[0].Pos, in.Pos, "found behind another request's record")
	})
}

// ofRequest returns a chat message with the id and text, stored by the request req.
func ofRequest(req, id, text string) *history.Message {
	m := chat(id, text)
	m.RequestID = req
	return m
}

// storedRequest returns a thread in which an earlier request q stored one message, then the
// request r stored its chat message, a tool call and its result, and its host died. It returns
// r's messages.
func storedRequest(t *testing.T) (env, []*history.Message) {
	t.Helper()
	e := setup(t)
	var cur history.Cursor
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, ofRequest("q", "before", "an earlier request")))
	msgs := []*history.Message{ofRequest("r", "in", "hi"), ofRequest("r", "call", "tool call"), ofRequest("r", "result", "tool result")}
	for _, m := range msgs {
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, m))
	}
	return e, msgs
}

// storedThenLater is storedRequest, then a later request's record: a replay's situation.
func storedThenLater(t *testing.T) (env, []*history.Message) {
	t.Helper()
	e, msgs := storedRequest(t)
	cur, err := e.store.Cursor(e.ctx, tenant, wf, user)
	require.NoError(t, err)
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, ofRequest("s", "later", "a later request")))
	return e, msgs
}

// requestAgain returns the messages the request r of storedRequest stores when it runs again:
// those it stored, then its answer.
func requestAgain() []*history.Message {
	return []*history.Message{ofRequest("r", "in", "hi"), ofRequest("r", "call", "tool call"), ofRequest("r", "result", "tool result"), ofRequest("r", "out", "answer")}
}

// runAgain stores the request's messages again with cur, as exchanges, and checks that those
// stored before (first) kept their positions.
func runAgain(t *testing.T, e env, cur *history.Cursor, first []*history.Message) {
	t.Helper()
	msgs := requestAgain()
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, cur, msgs[0], msgs[1]))
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, cur, msgs[2], msgs[3]))
	for i := range first {
		assert.Equal(t, first[i].Pos, msgs[i].Pos, "%s: the stored position", first[i].ID)
	}
}

// A message id seen in one thread is no duplicate in another: a caller may send one requestId
// to two workflows, and the ids of their replies derive from it.
func TestSameIDInTwoThreads(t *testing.T) {
	e := setup(t)
	var a, b history.Cursor
	ma, mb := chat("reply-of-r1", "a"), chat("reply-of-r1", "b")
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &a, ma))
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, "bob", &b, mb))
	assert.NotEqual(t, ma.Pos, mb.Pos)
	for _, p := range []string{user, "bob"} {
		page, _, err := e.store.Page(e.ctx, tenant, wf, p, history.PageOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"reply-of-r1"}, ids(page), "thread of %s", p)
	}
}

// Two messages too large to share a record are stored as two.
func TestLargeExchange(t *testing.T) {
	e := setup(t)
	big := strings.Repeat("x", 300<<10)
	in, out := chat("in", big), chat("out", big)
	var cur history.Cursor
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, in, out))
	assert.Equal(t, in.Pos/2+1, out.Pos/2, "records of the two messages")
	page, _, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"out", "in"}, ids(page))
}

// Following from the first message of an exchange delivers its second.
func TestFollowInsideAnExchange(t *testing.T) {
	e := setup(t)
	var cur history.Cursor
	in, out := chat("in", "a"), chat("out", "b")
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, in, out))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	live, err := e.store.Follow(ctx, tenant, wf, user, in.Pos)
	require.NoError(t, err)
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("next", "c")))
	got := receive(t, live, 2)
	require.Equal(t, []string{"out", "next"}, ids(got))
	require.Equal(t, out.Pos, got[0].Pos)
	cancel()
	for range live {
	}
}

func TestThreadsIsolated(t *testing.T) {
	e := setup(t)
	curs := map[string]*history.Cursor{}
	threads := []struct{ wf, participant string }{{wf, user}, {wf, "bob"}, {"acme:Echo:Supervisor Workflow:other", user}}
	for i := range 90 {
		th := threads[i%3]
		key := th.wf + "|" + th.participant
		if curs[key] == nil {
			curs[key] = &history.Cursor{}
		}
		m := chat(fmt.Sprintf("%d-%s", i%3, fmt.Sprint(i)), "x")
		require.NoError(t, e.store.Append(e.ctx, tenant, th.wf, th.participant, curs[key], m))
	}
	// Another tenant with the same workflow id and participant.
	require.NoError(t, e.store.Append(e.ctx, "other", wf, user, &history.Cursor{}, chat("t-0", "x")))
	for i, th := range threads {
		page, _, err := e.store.Page(e.ctx, tenant, th.wf, th.participant, history.PageOptions{Size: 100})
		require.NoError(t, err)
		assert.Len(t, page, 30, "thread %d's messages", i)
		for _, m := range page {
			assert.Equal(t, byte('0'+i), m.ID[0], "thread %d has message %s", i, m.ID)
		}
	}
}

func TestExpiredMessagesEndTheThread(t *testing.T) {
	e := setup(t)
	msgs := appendN(t, e, user, "m", 40, nil)
	// MaxAge drops the oldest records; deleting one stands for that. m-8 is a record alone
	// (appendN), at sequence Pos/2.
	require.NoError(t, e.res.Messages.DeleteMsg(e.ctx, msgs[8].Pos/2))
	all := walk(t, e, user, history.PageOptions{Size: 7})
	require.Equal(t, reversedIDs(msgs[9:]), ids(all), "thread")
}

func TestFollow(t *testing.T) {
	e := setup(t)
	var cur history.Cursor
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, chat("old", "old")))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	live, err := e.store.Follow(ctx, tenant, wf, user, 0)
	require.NoError(t, err)
	var (
		sent []*history.Message
		bob  history.Cursor
	)
	for i := range 5 {
		m := chat(fmt.Sprintf("live-%d", i), "x")
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, m))
		// Other threads' messages are not followed.
		require.NoError(t, e.store.Append(e.ctx, tenant, wf, "bob", &bob, chat(fmt.Sprintf("bob-%d", i), "x")))
		sent = append(sent, m)
	}
	got := receive(t, live, 3)
	for i, m := range got {
		require.Equal(t, sent[i].ID, m.ID, "followed %s@%d, want %s@%d", m.ID, m.Pos, sent[i].ID, sent[i].Pos)
		require.Equal(t, sent[i].Pos, m.Pos, "followed %s@%d, want %s@%d", m.ID, m.Pos, sent[i].ID, sent[i].Pos)
	}
	cancel()
	// The channel closes after ctx ends, whatever it still had to deliver.
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-live:
		case <-deadline:
			require.FailNow(t, "channel not closed after cancel")
		}
	}

	// Resuming after the last message received delivers the rest, then new ones.
	ctx2, cancel2 := context.WithCancel(e.ctx)
	defer cancel2()
	resumed, err := e.store.Follow(ctx2, tenant, wf, user, got[len(got)-1].Pos)
	require.NoError(t, err)
	last := chat("after", "x")
	require.NoError(t, e.store.Append(e.ctx, tenant, wf, user, &cur, last))
	rest := receive(t, resumed, 3)
	require.Equal(t, []string{"live-3", "live-4", "after"}, ids(rest), "resumed with")
	cancel2()
	for range resumed {
	}
	// Both follows removed their consumers when they ended.
	info, err := e.res.Messages.Info(e.ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Consumers, "consumers left after the follows ended")
}

func receive(t *testing.T, ch <-chan history.Message, n int) []history.Message {
	t.Helper()
	var out []history.Message
	deadline := time.After(5 * time.Second)
	for len(out) < n {
		select {
		case m, ok := <-ch:
			require.True(t, ok, "channel closed after %d messages", len(out))
			out = append(out, m)
		case <-deadline:
			require.FailNowf(t, "not all messages received", "received %d messages, want %d", len(out), n)
		}
	}
	return out
}

func TestMessageJSONRoundTrip(t *testing.T) {
	text := "hi"
	in := history.Message{ID: "x", CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 6_000_000, time.UTC), Text: &text,
		Data: json.RawMessage(`{"a":[1,2]}`), RequestID: "r", ParticipantID: "p", WorkflowID: "w", Scope: "s", Hint: "h"}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	const want = `{"id":"x","createdAt":"2025-01-02T03:04:05.006Z","direction":0,"messageType":0,"text":"hi","data":{"a":[1,2]},"hint":"h","requestId":"r","participantId":"p","workflowId":"w","scope":"s"}`
	// The exact bytes, field order included, not only the same JSON value.
	require.Equal(t, want, string(b), "JSON")
	var out history.Message
	require.NoError(t, json.Unmarshal(b, &out))
	require.True(t, out.CreatedAt.Equal(in.CreatedAt), "read back %+v", out)
	require.NotNil(t, out.Text, "read back %+v", out)
	require.Equal(t, text, *out.Text, "read back %+v", out)
	require.Equal(t, string(in.Data), string(out.Data), "read back %+v", out)
	require.Equal(t, "s", out.Scope, "read back %+v", out)
	var empty history.Message
	require.NoError(t, json.Unmarshal([]byte(`{"data":null,"text":null}`), &empty), "null fields")
	require.Nil(t, empty.Data, "null fields read back as %+v", empty)
	require.Nil(t, empty.Text, "null fields read back as %+v", empty)
	b, err = json.Marshal(history.Message{Data: json.RawMessage{}})
	require.NoError(t, err, "empty data marshals")
	require.Contains(t, string(b), `"data":null`, "empty data marshals as")
}
