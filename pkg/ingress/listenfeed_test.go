package ingress_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestListenStreamsShareAFollow: the listen streams of one thread on an ingress share one
// consumer on the server. A stream that resumes after an earlier message reads what it missed
// with a consumer of its own, and gives it up for the shared one once it has caught up; every
// stream gets every message once, in order. The last stream to close removes the shared
// consumer.
func TestListenStreamsShareAFollow(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	store := historyStore(t, s)
	ctx := context.Background()
	const wf = "default:Echo:Supervisor Workflow:shared"
	cur, err := store.Cursor(ctx, "default", wf, "p")
	require.NoError(t, err)
	appendText := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			text := fmt.Sprintf("m%d", i)
			require.NoError(t, store.Append(ctx, "default", wf, "p", &cur, &history.Message{ID: text, Text: &text}))
		}
	}
	consumers := func() int { return historyConsumers(t, s) }
	waitConsumers := func(n int, why string) { t.Helper(); waitHistoryConsumers(t, s, n, why) }
	expect := func(st *stream, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			_, m := st.next(t)
			require.Equal(t, fmt.Sprintf("m%d", i), m.ID, "message %d", i)
		}
	}
	base := consumers()
	thread := q("workflowId", wf, "participantId", "p")
	auth := bearerHeader(s.Key)

	live := make([]*stream, 5)
	for i := range live {
		live[i] = listen(t, s, thread, auth...)
		require.Equal(t, "listening", live[i].comment(t))
	}
	waitConsumers(base+1, "five new streams")
	appendText(0, 10)
	for _, st := range live {
		expect(st, 0, 10)
	}

	resumed := listen(t, s, thread, append(auth, "Last-Event-ID", "m3")...)
	require.Equal(t, "listening", resumed.comment(t))
	expect(resumed, 4, 10)
	waitConsumers(base+1, "a resumed stream once it has read what it missed")
	appendText(10, 20)
	for _, st := range append(live, resumed) {
		expect(st, 10, 20)
	}
	for _, st := range append(live, resumed) {
		st.quiet(t, 100*time.Millisecond)
	}

	// A stream that resumes at the thread's newest message joins at once.
	caughtUp := listen(t, s, thread, append(auth, "Last-Event-ID", "m19")...)
	require.Equal(t, "listening", caughtUp.comment(t))
	waitConsumers(base+1, "a stream resuming at the newest message")
	appendText(20, 21)
	expect(caughtUp, 20, 21)

	for _, st := range append(live, resumed, caughtUp) {
		st.Close()
	}
	waitConsumers(base, "every stream closed")

	// A stream that resumes alone starts the shared follow, which has passed on nothing yet, and
	// reads with its own until its own has had a message the shared one passed on before: the
	// thread's next two, or more when the shared follow passes them on later than the stream's.
	alone := listen(t, s, thread, append(auth, "Last-Event-ID", "m15")...)
	require.Equal(t, "listening", alone.comment(t))
	expect(alone, 16, 21)
	waitConsumers(base+2, "a stream resuming alone")
	appendText(21, 23)
	expect(alone, 21, 23)
	onShared := func() bool { // within a second
		for start := time.Now(); consumers() != base+1; time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > time.Second {
				return false
			}
		}
		return true
	}
	next := 23
	for ; next < 33 && !onShared(); next++ {
		t.Logf("the stream resuming alone is on its own follow %d messages on", next-21)
		appendText(next, next+1)
		expect(alone, next, next+1)
	}
	waitConsumers(base+1, "the stream resuming alone, once on the shared follow")
	appendText(next, next+2)
	expect(alone, next, next+2)
	alone.quiet(t, 100*time.Millisecond)
	alone.Close()
	waitConsumers(base, "the last stream closed")
	// The gauge goes down when the stream's handler returns, which may be after its consumer
	// is gone. A failure shows the last value read.
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 0.0, metricValue(t, s.URL, "agentbus_ingress_listeners"), "open listen streams")
	}, 5*time.Second, 10*time.Millisecond)
}

// TestListenStreamsOpenedAtOnceShareAFollow: streams of one thread opened at the same moment,
// each of which may start a follow, end up on one; every one gets the thread's messages.
func TestListenStreamsOpenedAtOnceShareAFollow(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	store := historyStore(t, s)
	ctx := context.Background()
	base := historyConsumers(t, s)

	const wf, n = "default:Echo:Supervisor Workflow:at-once", 8
	thread := q("workflowId", wf, "participantId", "p")
	streams := make([]*stream, n)
	opened := make(chan int, n)
	for i := range streams {
		reqCtx, cancel := context.WithCancel(ctx)
		req := newRequest(t, reqCtx, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/messaging/listen?"+thread.Encode(), nil, bearerHeader(s.Key)...)
		go func() {
			defer func() { opened <- i }()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				cancel()
				return
			}
			st := &stream{Resp: resp, Events: make(chan sse.Event, 100), cancel: cancel, done: make(chan struct{})}
			go func() {
				defer close(st.done)
				defer close(st.Events)
				scanEvents(resp.Body, func(ev sse.Event) bool { st.Events <- ev; return true })
			}()
			streams[i] = st
		}()
	}
	for range n {
		<-opened
	}
	for i, st := range streams {
		require.NotNil(t, st, "stream %d did not open", i)
		t.Cleanup(st.Close)
		require.Equal(t, http.StatusOK, st.Resp.StatusCode, "stream %d", i)
		require.Equal(t, "listening", st.comment(t), "stream %d", i)
	}
	waitHistoryConsumers(t, s, base+1, fmt.Sprintf("%d streams opened at once", n))
	cur, err := store.Cursor(ctx, "default", wf, "p")
	require.NoError(t, err)
	text := "hello"
	require.NoError(t, store.Append(ctx, "default", wf, "p", &cur, &history.Message{ID: "m0", Text: &text}))
	for i, st := range streams {
		_, m := st.next(t)
		assert.Equal(t, "m0", m.ID, "stream %d", i)
	}
}

// historyStore is the stack's history store, on a connection of its own.
func historyStore(t *testing.T, s *stacktest.Stack) *history.Store {
	t.Helper()
	js := natstest.JetStream(t, s.NATS)
	return history.NewStore(s.Res.Messages, s.Res.Topics, js)
}

// historyConsumers is the number of consumers of the stack's history stream.
func historyConsumers(t *testing.T, s *stacktest.Stack) int {
	t.Helper()
	info, err := s.Res.Messages.Info(context.Background())
	require.NoError(t, err)
	return info.State.Consumers
}

// waitHistoryConsumers waits until the history stream has n consumers; why names the moment.
func waitHistoryConsumers(t *testing.T, s *stacktest.Stack, n int, why string) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := s.Res.Messages.Info(context.Background())
		return err == nil && info.State.Consumers == n
	}, 10*time.Second, 10*time.Millisecond, "%s: %d consumers of the history stream, want %d", why, historyConsumers(t, s), n)
}
