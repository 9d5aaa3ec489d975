package agent_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A host whose watch of the heartbeats lags behind the bucket takes nothing over from a host
// its watch shows as silent, even when that host is paused; once the watch has caught up it
// does, and the paused host, back, is fenced: the request changes the state once.
func TestLaggingWatchTakesNothingOver(t *testing.T) {
	t.Parallel()
	fa := newIncAgent("Lag")
	const ackWait = 30 * time.Second
	s := stacktest.Start(t, stacktest.Options{Partitions: 1}) // no host of its own

	// The taker's connection loses the heartbeats its watch would deliver while told to.
	var lag atomic.Bool
	heartbeats := []byte(subject.KVKeyPrefix(subject.HostsBucket))
	ds := &natstest.Proxy{Server: s.NATS.Server, Drop: func(toServer bool, subj []byte) bool {
		return !toServer && lag.Load() && bytes.HasPrefix(subj, heartbeats)
	}}
	startHost(t, s, agent.HostConfig{ID: "taker", Conn: ds.Connect(t, "taker"), Agents: []*agent.Agent{fa.agent()}, AckWait: ackWait})
	g := &natstest.Proxy{Server: s.NATS.Server}
	id := idOwning("Lag", 1, 0, "taker")
	fa.paused.Store(id)
	h, _, _ := startHost(t, s, agent.HostConfig{ID: id, Conn: g.Connect(t, id),
		Agents: []*agent.Agent{fa.agent()}, AckWait: ackWait, ShutdownGrace: time.Second})
	waitFor(t, 10*time.Second, "the holder owns the partition", func() bool {
		return len(h.Partitions()["Lag"]) == 1 && settled(t, s, "Lag", 1, []string{"taker", id})
	})
	wf := enqueueInc(t, s, "Lag", "l", "inc-1")
	waitFor(t, 5*time.Second, "the holder starts the request", func() bool { return fa.runs(id) == 1 })
	takeovers := func() string { // the partition's takeover count
		e, err := s.Res.Tenures.Get(t.Context(), subject.TenureKey("Lag", 0))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return "0"
		}
		require.NoError(t, err)
		return string(e.Value())
	}

	// The taker's watch stops delivering heartbeats, and the holder pauses: the taker's
	// directory reads the bucket when no heartbeat arrives (its own, written, is fresh there),
	// and counts the holder, whose heartbeats stopped, dead.
	lag.Store(true)
	g.Pause()
	paused := time.Now()
	time.Sleep(3*time.Second + 3*time.Second)
	assert.Equal(t, "0", takeovers(), "a takeover counted while the watch lagged")
	assert.Zero(t, fa.runs("taker"), "the request ran on the taker while its watch lagged")
	require.Positive(t, ds.Dropped.Load(), "no heartbeat was kept from the taker's watch")

	// The watch catches up: the holder's last heartbeat is old, and the taker takes over.
	lag.Store(false)
	took := waitFor(t, 8*time.Second, "the taker runs the request", func() bool { return fa.runs("taker") == 1 })
	t.Logf("the taker ran the request %v after the watch caught up (%v after the pause)", took.Round(time.Millisecond),
		time.Since(paused).Round(time.Millisecond))
	assert.Equal(t, "1", takeovers())

	close(fa.release)
	g.Resume() // the holder comes back: its late write is refused
	waitFor(t, 10*time.Second, "the holder's late write is refused", func() bool { return fa.late() != nil })
	time.Sleep(time.Second)
	assert.Equal(t, 1, stateCount(t, s, wf), "the request changed the state more than once")
}
