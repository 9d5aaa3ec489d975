package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// TestSweepPacesWrites: a regular sweep spreads the writes of many idle instances over the time
// until the next sweep instead of writing them all at once; every count is still written, and
// the instances leave memory.
func TestSweepPacesWrites(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	store := instance.NewStore(res.Instances)
	s := newLiveSet(store, slog.New(slog.NewTextHandler(io.Discard, nil)), "host-1", nil, func(context.Context) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const n = 4 * flushConcurrency
	idle := make([]*liveInstance, n)
	for i := range idle {
		wf := fmt.Sprintf("default:Echo:Supervisor Workflow:sweep-%d", i)
		saved, err := store.Put(ctx, instance.Record{Tenant: "default", WorkflowID: wf, RunID: "run", Status: instance.Running})
		require.NoError(t, err)
		l := s.acquire("default", wf)
		l.mu.Lock()
		saved.Events = 1 // a count not written yet
		l.rec, l.loaded, l.found, l.dirty = saved, true, true, true
		l.mu.Unlock()
		s.release(l)
		idle[i] = l
	}
	s.mu.Lock()
	for _, l := range s.m {
		l.idleSince = time.Now().Add(-2 * liveIdle)
	}
	s.mu.Unlock()

	start := time.Now()
	s.sweep(ctx, false)
	took := time.Since(start)
	// The first flushConcurrency go at once, the rest at n per sweepEvery.
	least := sweepEvery * time.Duration(n-flushConcurrency) / n
	assert.GreaterOrEqual(t, took, least*9/10, "%d writes were spread over the sweep interval", n)
	assert.Zero(t, s.size(), "the idle instances left memory")
	for _, l := range idle {
		got, err := store.Get(ctx, l.key.tenant, l.key.workflowID)
		require.NoError(t, err)
		require.Equal(t, int64(1), got.Events, "%s: its count was written", l.key.workflowID)
	}
}
