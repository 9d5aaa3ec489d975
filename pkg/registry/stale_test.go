package registry

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// clock is a settable time source safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestStaleHeartbeatIsNotLive feeds real bucket entries to a Directory with a controlled clock:
// a host whose last heartbeat arrived more than three intervals ago is taken for dead (its
// heartbeat expires from the bucket without a delete marker, so the Directory must age it out).
func TestStaleHeartbeatIsNotLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, Beat(ctx, res.Hosts, Host{ID: "h1", Agents: []string{"Echo"}}))
	entry, err := res.Hosts.Get(ctx, subject.HostKey("h1"))
	require.NoError(t, err)

	clk := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &Directory{log: slog.New(slog.DiscardHandler), now: clk.Now, agents: map[string]Agent{}, hosts: map[string]seenHost{}, changed: make(chan struct{}, 1)}
	d.applyHost(entry, false)

	tests := []struct {
		name    string
		advance time.Duration
		want    bool
	}{
		{name: "fresh", advance: 0, want: true},
		{name: "one interval old", advance: HeartbeatInterval, want: true},
		{name: "just under three intervals", advance: 2*HeartbeatInterval - time.Millisecond, want: true},
		{name: "past three intervals", advance: 2 * time.Millisecond, want: false},
	}
	for _, tt := range tests {
		// Subtests run in order and share the clock.
		t.Run(tt.name, func(t *testing.T) {
			clk.Advance(tt.advance)
			assert.Equal(t, tt.want, d.Live("Echo"), "Live(Echo) %v after the last beat", clk.Now().Sub(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
		})
	}

	// The next beat revives it.
	d.applyHost(entry, false)
	assert.True(t, d.Live("Echo"), "Echo not live after a fresh beat")
}
