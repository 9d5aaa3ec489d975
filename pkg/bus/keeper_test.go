package bus_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestInboxKeeper: requests handled one at a time empty the inbox after each. Without a marker
// the NATS file store replaces its block file at every emptying; with the keeper's marker it
// keeps writing the same file. The marker is never delivered, each new one replaces the last, an
// idle keeper places no more and rests until the next acknowledgement, and a stopped
// one leaves none.
func TestInboxKeeper(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.Server(t, dir)
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(t, err)
	inbox, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	cons, err := inbox.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       subject.PartitionConsumer("Echo", 0),
		FilterSubject: subject.Partition("Echo", 0),
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	keeper := bus.NewInboxKeeper(js, inbox, "Echo")

	blocks := func() []string {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", subject.InboxStream("Echo"), "msgs", "*.blk"))
		require.NoError(t, err)
		return files
	}
	// count returns the requests and the markers in the inbox.
	count := func() (requests, markers uint64) {
		t.Helper()
		info, err := inbox.Info(ctx, jetstream.WithSubjectFilter(subject.InboxMarker("Echo")))
		require.NoError(t, err)
		markers = info.State.Subjects[subject.InboxMarker("Echo")]
		return info.State.Msgs - markers, markers
	}
	requests := func() uint64 { r, _ := count(); return r }
	markers := func() uint64 { _, m := count(); return m }
	// handle sends n requests, each handled and acknowledged before the next.
	handle := func(n int) {
		t.Helper()
		for range n {
			_, err := js.Publish(ctx, subject.Inbox("Echo", "default", "wf", "p"), []byte("request"))
			require.NoError(t, err)
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			require.NoError(t, err)
			require.NotEqual(t, subject.InboxMarker("Echo"), m.Subject(), "a partition consumer never delivers a marker")
			require.NoError(t, m.DoubleAck(ctx))
			keeper.Acked()
			require.Eventually(t, func() bool { return requests() == 0 }, 5*time.Second, time.Millisecond)
		}
	}

	handle(3)
	before := blocks()
	handle(10)
	require.NotEqual(t, before, blocks(), "the premise: without a marker every emptying replaces the block file")

	kctx, stopKeeper := context.WithCancel(ctx)
	keeper.Start(kctx)
	require.Eventually(t, func() bool { return keeper.Placed() == 1 }, 5*time.Second, 5*time.Millisecond, "a first marker at once")
	assert.Equal(t, uint64(1), markers())

	before = blocks()
	handle(10)
	assert.Equal(t, before, blocks(), "with a marker the block file stays")

	require.Eventually(t, func() bool { return keeper.Placed() == 2 }, 3*bus.MarkerInterval, 5*time.Millisecond,
		"a new marker after requests were acknowledged")
	require.Eventually(t, func() bool { return markers() == 1 }, 5*time.Second, 5*time.Millisecond, "the new marker replaced the last")
	time.Sleep(bus.MarkerInterval + bus.MarkerInterval/2)
	assert.Equal(t, uint64(2), keeper.Placed(), "an idle keeper places no marker")
	require.Eventually(t, keeper.Resting, 3*bus.MarkerInterval, 5*time.Millisecond, "an idle keeper rests")
	handle(1)
	require.Eventually(t, func() bool { return keeper.Placed() == 3 }, 3*bus.MarkerInterval, 5*time.Millisecond,
		"an acknowledgement wakes a resting keeper")
	assert.False(t, keeper.Resting())
	require.Eventually(t, func() bool { return markers() == 1 }, 5*time.Second, 5*time.Millisecond)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.NumPending+uint64(info.NumAckPending), "markers are nobody's work")

	stopKeeper()
	keeper.Stop()
	assert.Zero(t, markers(), "a stopped keeper leaves no marker")
}
