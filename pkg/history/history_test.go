package history_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// Every test stops what it starts: NATS servers and follows.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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

// appendN appends n chat messages named prefix-0 … prefix-(n-1), ten per call, with scope(i).
func appendN(t *testing.T, e env, participant, prefix string, n int, scope func(int) string) []*history.Message {
	t.Helper()
	cur, err := e.store.Cursor(e.ctx, tenant, wf, participant)
	if err != nil {
		t.Fatal(err)
	}
	var all []*history.Message
	for i := 0; i < n; i += 10 {
		var batch []*history.Message
		for j := i; j < min(i+10, n); j++ {
			m := chat(fmt.Sprintf("%s-%d", prefix, j), fmt.Sprintf("text %d", j))
			if scope != nil {
				m.Scope = scope(j)
			}
			batch = append(batch, m)
		}
		if err := e.store.Append(e.ctx, tenant, wf, participant, &cur, batch...); err != nil {
			t.Fatalf("append: %v", err)
		}
		all = append(all, batch...)
	}
	return all
}

// walk reads the whole thread page by page and checks that cursors only move back.
func walk(t *testing.T, e env, participant string, opt history.PageOptions) []history.Message {
	t.Helper()
	var all []history.Message
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
		page, next, err := e.store.Page(e.ctx, tenant, wf, participant, opt)
		if err != nil {
			t.Fatalf("page before %d: %v", opt.Before, err)
		}
		size := opt.Size
		if size == 0 {
			size = history.DefaultPageSize
		}
		if len(page) > size {
			t.Fatalf("page of %d messages, size %d", len(page), size)
		}
		all = append(all, page...)
		if next == 0 {
			return all
		}
		if len(page) == 0 || next != page[len(page)-1].Seq {
			t.Fatalf("next = %d, want the oldest Seq of the page", next)
		}
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
	text := "hello"
	msgs := []*history.Message{
		{ID: "m1", CreatedAt: created, Direction: history.In, MessageType: history.Chat, Text: &text,
			RequestID: "r1", ParticipantID: user, WorkflowID: wf, Hint: "be brief", Scope: "billing"},
		{ID: "m2", CreatedAt: created, Direction: history.Out, MessageType: history.Data,
			Data: json.RawMessage(`{"sum":3}`), RequestID: "r1"},
		{ID: "m3", Direction: history.Out, MessageType: history.Webhook, RequestID: "r2"},
	}
	var cur history.Cursor
	if err := e.store.Append(e.ctx, tenant, wf, user, &cur, msgs...); err != nil {
		t.Fatal(err)
	}
	if cur.LastSeq != msgs[2].Seq || !slices.Equal(cur.Prev, []uint64{msgs[1].Seq, msgs[0].Seq}) {
		t.Fatalf("cursor = %+v after appending seqs %d %d %d", cur, msgs[0].Seq, msgs[1].Seq, msgs[2].Seq)
	}
	if loaded, err := e.store.Cursor(e.ctx, tenant, wf, user); err != nil || loaded.LastSeq != cur.LastSeq || !slices.Equal(loaded.Prev, cur.Prev) {
		t.Fatalf("Cursor = %+v, %v; want %+v", loaded, err, cur)
	}

	page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if next != 0 {
		t.Errorf("next = %d, want 0", next)
	}
	if got, want := ids(page), []string{"m3", "m2", "m1"}; !slices.Equal(got, want) {
		t.Fatalf("page = %v, want %v", got, want)
	}
	m1 := page[2]
	if !m1.CreatedAt.Equal(created.Truncate(time.Millisecond)) || m1.Hint != "be brief" || m1.Scope != "billing" ||
		m1.Text == nil || *m1.Text != "hello" || m1.Data != nil || m1.RequestID != "r1" || m1.Seq != msgs[0].Seq {
		t.Errorf("m1 read back as %+v", m1)
	}
	// Append fills the thread's ids and a creation time.
	if m3 := page[0]; m3.WorkflowID != wf || m3.ParticipantID != user || m3.CreatedAt.IsZero() {
		t.Errorf("m3 read back as %+v", m3)
	}

	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	tests := []struct {
		name  string
		msg   history.Message
		check func(map[string]any) error
	}{
		{"chat has text and null data", page[2], func(j map[string]any) error {
			if j["text"] != "hello" || j["data"] != nil || j["createdAt"] != "2025-03-04T04:06:07.891Z" ||
				j["scope"] != "billing" || j["hint"] != "be brief" || j["direction"] != 0.0 || j["messageType"] != 0.0 {
				return errors.New("wrong fields")
			}
			return nil
		}},
		{"data has null text and an object", page[1], func(j map[string]any) error {
			if j["text"] != nil || j["data"].(map[string]any)["sum"] != 3.0 || j["messageType"] != 1.0 || j["direction"] != 1.0 {
				return errors.New("wrong fields")
			}
			if _, ok := j["scope"]; ok {
				return errors.New("empty scope is not omitted")
			}
			return nil
		}},
		{"webhook has both null", page[0], func(j map[string]any) error {
			if j["text"] != nil || j["data"] != nil || j["messageType"] != 4.0 {
				return errors.New("wrong fields")
			}
			if !stamp.MatchString(j["createdAt"].(string)) {
				return fmt.Errorf("createdAt %q", j["createdAt"])
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			var j map[string]any
			if err := json.Unmarshal(b, &j); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"id", "createdAt", "direction", "messageType", "text", "data", "requestId", "participantId", "workflowId"} {
				if _, ok := j[k]; !ok {
					t.Errorf("%s missing", k)
				}
			}
			if _, ok := j["Seq"]; ok {
				t.Error("Seq is in the JSON form")
			}
			if err := tt.check(j); err != nil {
				t.Errorf("%v: %s", err, b)
			}
		})
	}
}

func TestEmptyThread(t *testing.T) {
	e := setup(t)
	page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{})
	if err != nil || len(page) != 0 || next != 0 {
		t.Fatalf("Page = %v, %d, %v; want empty", page, next, err)
	}
	cur, err := e.store.Cursor(e.ctx, tenant, wf, user)
	if err != nil || cur.LastSeq != 0 || cur.Prev != nil {
		t.Fatalf("Cursor = %+v, %v; want zero", cur, err)
	}
	topics, err := e.store.Topics(e.ctx, tenant, wf, user)
	if err != nil || topics == nil || len(topics) != 0 {
		t.Fatalf("Topics = %#v, %v; want empty", topics, err)
	}
}

func TestPagingThroughTheThread(t *testing.T) {
	e := setup(t)
	msgs := appendN(t, e, user, "m", 150, nil)
	want := reversedIDs(msgs)
	for _, size := range []int{20, 1, 7, 31, 32, 33, 100} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			all := walk(t, e, user, history.PageOptions{Size: size})
			if got := ids(all); !slices.Equal(got, want) {
				t.Fatalf("walked %d messages %v…, want %d", len(got), got[:min(5, len(got))], len(want))
			}
			for i := 1; i < len(all); i++ {
				if all[i].Seq >= all[i-1].Seq {
					t.Fatalf("message %d has Seq %d after %d", i, all[i].Seq, all[i-1].Seq)
				}
			}
		})
	}
	t.Run("size above the maximum", func(t *testing.T) {
		page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{Size: 1000})
		if err != nil || len(page) != history.MaxPageSize || next != page[len(page)-1].Seq {
			t.Fatalf("Page = %d messages, next %d, %v", len(page), next, err)
		}
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
		{"middle of the thread", msgs[45].Seq, []string{"m-44", "m-43", "m-42"}, nil},
		{"oldest message", msgs[0].Seq, nil, nil},
		{"second message", msgs[1].Seq, []string{"m-0"}, nil},
		{"past the end", other[0].Seq + 1000, nil, nil},
		{"another thread's message", other[0].Seq, nil, history.ErrBadCursor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, next, err := e.store.Page(e.ctx, tenant, wf, user, history.PageOptions{Size: 3, Before: tt.before})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got := ids(page); !slices.Equal(got, tt.want) && len(got)+len(tt.want) > 0 {
				t.Fatalf("page = %v, want %v", got, tt.want)
			}
			if len(tt.want) == 3 && next != page[2].Seq {
				t.Errorf("next = %d, want %d", next, page[2].Seq)
			}
			if len(tt.want) < 3 && next != 0 {
				t.Errorf("next = %d, want 0", next)
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
			if got, want := ids(all), wantOf(tt.scope); !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}

func TestTopics(t *testing.T) {
	e := setup(t)
	appendN(t, e, user, "m", 20, func(i int) string { return []string{"support", "", "billing", "support"}[i%4] })
	appendN(t, e, "bob", "b", 1, func(int) string { return "other" })
	got, err := e.store.Topics(e.ctx, tenant, wf, user)
	if err != nil || !slices.Equal(got, []string{"billing", "support"}) {
		t.Fatalf("Topics = %v, %v", got, err)
	}

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
		switch {
		case err == nil:
			stored++
		case !errors.Is(err, history.ErrConflict):
			t.Fatal(err)
		}
	}
	if stored != 1 {
		t.Fatalf("%d appends on an empty cursor succeeded, want 1", stored)
	}
	got, err = e.store.Topics(e.ctx, tenant, wf, "carol")
	if err != nil || len(got) != 1 {
		t.Fatalf("Topics = %v, %v; want the one stored message's scope", got, err)
	}
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
				if err != nil {
					t.Error(err)
					return
				}
				err = s.Append(e.ctx, tenant, wf, user, &cur, &history.Message{ID: fmt.Sprint(i), Scope: fmt.Sprintf("t%d", i)})
				if err == nil {
					return
				}
				if !errors.Is(err, history.ErrConflict) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := e.store.Topics(e.ctx, tenant, wf, user)
	want := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Topics = %v, %v; want %v", got, err, want)
	}
	all := walk(t, e, user, history.PageOptions{})
	if len(all) != 8 {
		t.Fatalf("thread has %d messages, want 8", len(all))
	}
}

func TestConflict(t *testing.T) {
	e := setup(t)
	first, err := e.store.Cursor(e.ctx, tenant, wf, user)
	if err != nil {
		t.Fatal(err)
	}
	second := first
	if err := e.store.Append(e.ctx, tenant, wf, user, &first, chat("a", "a")); err != nil {
		t.Fatal(err)
	}
	before := second
	if err := e.store.Append(e.ctx, tenant, wf, user, &second, chat("b", "b")); !errors.Is(err, history.ErrConflict) {
		t.Fatalf("stale append err = %v, want ErrConflict", err)
	}
	if second.LastSeq != before.LastSeq {
		t.Fatalf("a failed append moved the cursor to %d", second.LastSeq)
	}
	// Once appended, the first writer's cursor stays good; the second reloads.
	if err := e.store.Append(e.ctx, tenant, wf, user, &first, chat("c", "c")); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Append(e.ctx, tenant, wf, user, &second, chat("b", "b")); !errors.Is(err, history.ErrConflict) {
		t.Fatalf("stale append err = %v, want ErrConflict", err)
	}
	if second, err = e.store.Cursor(e.ctx, tenant, wf, user); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Append(e.ctx, tenant, wf, user, &second, chat("b", "b")); err != nil {
		t.Fatal(err)
	}
	if got := ids(walk(t, e, user, history.PageOptions{})); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Fatalf("thread = %v", got)
	}
}

func TestDedupe(t *testing.T) {
	e := setup(t)
	var cur history.Cursor
	orig := chat("same", "once")
	if err := e.store.Append(e.ctx, tenant, wf, user, &cur, orig, chat("next", "next")); err != nil {
		t.Fatal(err)
	}
	after := cur

	// A redelivered request stores its messages again with a reloaded cursor.
	again, again2 := chat("same", "once"), chat("next", "next")
	if err := e.store.Append(e.ctx, tenant, wf, user, &cur, again, again2); err != nil {
		t.Fatal(err)
	}
	if again.Seq != orig.Seq {
		t.Errorf("duplicate got Seq %d, want the stored %d", again.Seq, orig.Seq)
	}
	if cur.LastSeq != after.LastSeq || !slices.Equal(cur.Prev, after.Prev) {
		t.Errorf("duplicates moved the cursor from %+v to %+v", after, cur)
	}
	// A cursor from before the first store is stale: reloaded, the retry stores nothing new.
	var stale history.Cursor
	err := e.store.Append(e.ctx, tenant, wf, user, &stale, chat("same", "once"))
	if !errors.Is(err, history.ErrConflict) {
		t.Fatalf("stale duplicate err = %v, want ErrConflict", err)
	}
	if err := e.store.Append(e.ctx, tenant, wf, user, &cur, chat("new", "new")); err != nil {
		t.Fatal(err)
	}
	if got := ids(walk(t, e, user, history.PageOptions{})); !slices.Equal(got, []string{"new", "next", "same"}) {
		t.Fatalf("thread = %v", got)
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
		if err := e.store.Append(e.ctx, tenant, th.wf, th.participant, curs[key], m); err != nil {
			t.Fatal(err)
		}
	}
	// Another tenant with the same workflow id and participant.
	if err := e.store.Append(e.ctx, "other", wf, user, &history.Cursor{}, chat("t-0", "x")); err != nil {
		t.Fatal(err)
	}
	for i, th := range threads {
		page, _, err := e.store.Page(e.ctx, tenant, th.wf, th.participant, history.PageOptions{Size: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 30 {
			t.Errorf("thread %d has %d messages, want 30", i, len(page))
		}
		for _, m := range page {
			if m.ID[0] != byte('0'+i) {
				t.Errorf("thread %d has message %s", i, m.ID)
			}
		}
	}
}

func TestExpiredMessagesEndTheThread(t *testing.T) {
	e := setup(t)
	msgs := appendN(t, e, user, "m", 40, nil)
	// MaxAge drops the oldest messages; deleting one stands for that.
	if err := e.res.Messages.DeleteMsg(e.ctx, msgs[9].Seq); err != nil {
		t.Fatal(err)
	}
	all := walk(t, e, user, history.PageOptions{Size: 7})
	if got, want := ids(all), reversedIDs(msgs[10:]); !slices.Equal(got, want) {
		t.Fatalf("thread = %v, want %v", got, want)
	}
}

func TestFollow(t *testing.T) {
	e := setup(t)
	var cur history.Cursor
	if err := e.store.Append(e.ctx, tenant, wf, user, &cur, chat("old", "old")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	live, err := e.store.Follow(ctx, tenant, wf, user, 0)
	if err != nil {
		t.Fatal(err)
	}
	var (
		sent []*history.Message
		bob  history.Cursor
	)
	for i := range 5 {
		m := chat(fmt.Sprintf("live-%d", i), "x")
		if err := e.store.Append(e.ctx, tenant, wf, user, &cur, m); err != nil {
			t.Fatal(err)
		}
		// Other threads' messages are not followed.
		if err := e.store.Append(e.ctx, tenant, wf, "bob", &bob, chat(fmt.Sprintf("bob-%d", i), "x")); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	got := receive(t, live, 3)
	for i, m := range got {
		if m.ID != sent[i].ID || m.Seq != sent[i].Seq {
			t.Fatalf("followed %s@%d, want %s@%d", m.ID, m.Seq, sent[i].ID, sent[i].Seq)
		}
	}
	cancel()
	// The channel closes after ctx ends, whatever it still had to deliver.
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-live:
		case <-deadline:
			t.Fatal("channel not closed after cancel")
		}
	}

	// Resuming after the last message received delivers the rest, then new ones.
	ctx2, cancel2 := context.WithCancel(e.ctx)
	defer cancel2()
	resumed, err := e.store.Follow(ctx2, tenant, wf, user, got[len(got)-1].Seq)
	if err != nil {
		t.Fatal(err)
	}
	last := chat("after", "x")
	if err := e.store.Append(e.ctx, tenant, wf, user, &cur, last); err != nil {
		t.Fatal(err)
	}
	rest := receive(t, resumed, 3)
	if want := []string{"live-3", "live-4", "after"}; !slices.Equal(ids(rest), want) {
		t.Fatalf("resumed with %v, want %v", ids(rest), want)
	}
	cancel2()
	for range resumed {
	}
	// Both follows removed their consumers when they ended.
	info, err := e.res.Messages.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left after the follows ended", info.State.Consumers)
	}
}

func receive(t *testing.T, ch <-chan history.Message, n int) []history.Message {
	t.Helper()
	var out []history.Message
	deadline := time.After(5 * time.Second)
	for len(out) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %d messages", len(out))
			}
			out = append(out, m)
		case <-deadline:
			t.Fatalf("received %d messages, want %d", len(out), n)
		}
	}
	return out
}

func TestMessageJSONRoundTrip(t *testing.T) {
	text := "hi"
	in := history.Message{ID: "x", CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 6_000_000, time.UTC), Text: &text,
		Data: json.RawMessage(`{"a":[1,2]}`), RequestID: "r", ParticipantID: "p", WorkflowID: "w", Scope: "s", Hint: "h"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":"x","createdAt":"2025-01-02T03:04:05.006Z","direction":0,"messageType":0,"text":"hi","data":{"a":[1,2]},"hint":"h","requestId":"r","participantId":"p","workflowId":"w","scope":"s"}`
	if string(b) != want {
		t.Fatalf("JSON = %s\nwant   %s", b, want)
	}
	var out history.Message
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !out.CreatedAt.Equal(in.CreatedAt) || *out.Text != text || string(out.Data) != string(in.Data) || out.Scope != "s" {
		t.Fatalf("read back %+v", out)
	}
	var empty history.Message
	if err := json.Unmarshal([]byte(`{"data":null,"text":null}`), &empty); err != nil || empty.Data != nil || empty.Text != nil {
		t.Fatalf("null fields read back as %+v, %v", empty, err)
	}
	if b, err := json.Marshal(history.Message{Data: json.RawMessage{}}); err != nil || !regexp.MustCompile(`"data":null`).Match(b) {
		t.Fatalf("empty data marshals as %s, %v", b, err)
	}
}
