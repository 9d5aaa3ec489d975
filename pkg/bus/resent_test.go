package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A request sent to its inbox again because no acknowledgement came for an earlier send carries
// subject.HeaderResent, by Publish and by Waiter.Await: a NATS failover may store that copy
// twice, and the host checks such a copy against the request's thread. The first send carries
// no mark, nor does a message to another subject than an inbox.
func TestResentRequestsAreMarked(t *testing.T) {
	bus.SetResendAfter(t, 200*time.Millisecond)
	f := newAwaitFixture(t, "RESENT", "resent.>")
	publish := func(subj, id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
		defer cancel()
		_, err := bus.Publish(ctx, f.js, requestMsg(subj, id))
		require.NoError(t, err)
	}

	published := subject.Inbox("Agent", "tenant", "tenant:Agent:T:a", "published")
	lossyServer(t, f.nc, published, "", stored)
	marks := resentMarks(t, f.nc, published)
	publish(published, "id-1")
	assert.Equal(t, []string{"", "1"}, marks(2), "Publish: the first send, and the copy sent again")

	awaited := subject.Inbox("Agent", "tenant", "tenant:Agent:T:a", "awaited")
	lossyServer(t, f.nc, awaited, "", stored)
	marks = resentMarks(t, f.nc, awaited)
	_, _, err := f.await(t, requestMsg(awaited, "id-2"), 2*time.Second, 500*time.Millisecond, nil)
	assert.ErrorIs(t, err, bus.ErrReplyTimeout)
	assert.Equal(t, []string{"", "1"}, marks(2), "Await: the first send, and the copy sent again")

	lossyServer(t, f.nc, "plain.a", "", stored)
	marks = resentMarks(t, f.nc, "plain.a")
	publish("plain.a", "id-3")
	assert.Equal(t, []string{"", ""}, marks(2), "a message to another subject than an inbox")
}

// resentMarks records the subject.HeaderResent of every message published on subj, in order,
// until the test ends; the function it returns waits up to a second for n of them.
func resentMarks(t *testing.T, nc *nats.Conn, subj string) func(n int) []string {
	t.Helper()
	var (
		mu    sync.Mutex
		marks []string
	)
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		mu.Lock()
		marks = append(marks, m.Header.Get(subject.HeaderResent))
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	read := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), marks...)
	}
	return func(n int) []string {
		deadline := time.Now().Add(time.Second)
		for len(read()) < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return read()
	}
}
