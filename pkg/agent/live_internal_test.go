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
	s := newLiveSet(nil, store, slog.New(slog.NewTextHandler(io.Discard, nil)), "host-1", nil, func(context.Context) error { return nil })
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
	assert.Equal(t, n, s.size(), "idle for less than liveKeep, the instances are kept")
	for _, l := range idle {
		got, err := store.Get(ctx, l.key.tenant, l.key.workflowID)
		require.NoError(t, err)
		require.Equal(t, int64(1), got.Events, "%s: its count was written", l.key.workflowID)
		assert.False(t, l.needsFlush(), "%s: its copy is clean", l.key.workflowID)
	}

	// Past liveKeep they leave memory, with nothing more to write.
	s.mu.Lock()
	for _, l := range s.m {
		l.idleSince = time.Now().Add(-2 * liveKeep)
	}
	s.mu.Unlock()
	assert.Zero(t, s.sweep(ctx, false))
	assert.Zero(t, s.size(), "the idle instances left memory")
}

// The idle instances kept past liveIdle hold at most liveKeepBytes: the longest idle go first.
func TestLiveSetKeepsWithinBudget(t *testing.T) {
	s := newLiveSet(nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "host-1", nil, func(context.Context) error { return nil })
	const n = 3 * liveKeepBytes / (liveBaseBytes + 4096) // three times the budget, at 4 KiB of state each
	for i := range n {
		l := s.acquire("default", fmt.Sprintf("default:Echo:Supervisor Workflow:b-%d", i))
		l.size.Store(4096)
		s.release(l)
	}
	base := time.Now().Add(-liveIdle - time.Second)
	s.mu.Lock()
	for i := range n {
		s.m[liveKey{"default", fmt.Sprintf("default:Echo:Supervisor Workflow:b-%d", i)}].idleSince = base.Add(-time.Duration(i) * time.Millisecond) // b-0 the least idle
	}
	s.mu.Unlock()
	assert.Zero(t, s.sweep(context.Background(), false))
	kept := s.size()
	assert.LessOrEqual(t, kept*(liveBaseBytes+4096), liveKeepBytes)
	assert.Greater(t, kept*(liveBaseBytes+4096), liveKeepBytes-(liveBaseBytes+4096), "the budget is used")
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range kept {
		if _, ok := s.m[liveKey{"default", fmt.Sprintf("default:Echo:Supervisor Workflow:b-%d", i)}]; !ok {
			t.Fatalf("b-%d is not kept, though among the %d least idle", i, kept)
		}
	}
}

// One tenant's many idle instances do not push another's few out of memory, though the few are
// idle for longer: over the budget, the tenants holding the most give way, each its longest idle
// first, and a third tenant over its share keeps an equal share.
func TestLiveSetKeepsEachTenantsShare(t *testing.T) {
	s := newLiveSet(nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "host-1", nil, func(context.Context) error { return nil })
	const each = liveBaseBytes + 4096
	busy := 2 * liveKeepBytes / each // twice the budget
	name := func(tenant string, i int) liveKey {
		return liveKey{tenant, fmt.Sprintf("%s:Echo:Supervisor Workflow:i-%d", tenant, i)}
	}
	add := func(k liveKey, idleFor time.Duration) {
		l := s.acquire(k.tenant, k.workflowID)
		l.size.Store(4096)
		s.release(l)
		s.mu.Lock()
		l.idleSince = time.Now().Add(-idleFor)
		s.mu.Unlock()
	}
	for i := range busy { // idle 3 s, i-0 the longest
		add(name("busy", i), liveIdle+time.Second+time.Duration(busy-i)*time.Microsecond)
	}
	for i := range 10 { // idle 20 s: longer than any of busy's
		add(name("quiet", i), 20*time.Second)
	}
	third := liveKeepBytes / each // a half of the budget, as much as the other two may keep together
	for i := range third {
		add(name("third", i), liveIdle+time.Second)
	}

	assert.Zero(t, s.sweep(context.Background(), false))
	s.mu.Lock()
	defer s.mu.Unlock()
	has := func(k liveKey) bool { _, ok := s.m[k]; return ok }
	held := map[string]int{}
	for k := range s.m {
		held[k.tenant] += each
	}
	for i := range 10 {
		assert.True(t, has(name("quiet", i)), "quiet's instance %d is kept", i)
	}
	share := (liveKeepBytes - 10*each) / 2
	assert.LessOrEqual(t, held["busy"]+held["third"]+held["quiet"], liveKeepBytes)
	for _, tenant := range []string{"busy", "third"} {
		assert.LessOrEqual(t, held[tenant], share, tenant)
		assert.Greater(t, held[tenant], share-each, "%s keeps its share", tenant)
	}
	kept := held["busy"] / each
	for i := range kept { // the least idle are kept: i-(busy-1) back to i-(busy-kept)
		assert.True(t, has(name("busy", busy-1-i)), "busy's instance %d is among its least idle", busy-1-i)
	}
}

// The hosts of a process that share an IdleBudget keep their idle copies within it together:
// a tenant whose copies fill both hosts gives way on each, about in proportion to what each
// holds, and a quiet tenant keeps its own; a host that stops leaves its part to the others.
func TestIdleBudgetSharedByHosts(t *testing.T) {
	budget := NewIdleBudget(liveKeepBytes)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	one := newLiveSet(budget, nil, log, "host-1", nil, func(context.Context) error { return nil })
	two := newLiveSet(budget, nil, log, "host-2", nil, func(context.Context) error { return nil })
	const each = liveBaseBytes + 4096
	add := func(s *liveSet, tenant string, n int) {
		for i := range n {
			l := s.acquire(tenant, fmt.Sprintf("%s:Agent-%s:Supervisor Workflow:i-%d", tenant, s.hostID, i))
			l.size.Store(4096)
			s.release(l)
			s.mu.Lock()
			l.idleSince = time.Now().Add(-liveIdle - time.Second - time.Duration(n-i)*time.Microsecond)
			s.mu.Unlock()
		}
	}
	busyOne, busyTwo := liveKeepBytes/each, liveKeepBytes/each/2 // 1.5 budgets together
	add(one, "busy", busyOne)
	add(two, "busy", busyTwo)
	add(two, "quiet", 10)
	held := func() map[string]int {
		h := map[string]int{}
		for _, s := range []*liveSet{one, two} {
			s.mu.Lock()
			for k := range s.m {
				h[s.hostID+" "+k.tenant] += each
			}
			s.mu.Unlock()
		}
		return h
	}
	for range 2 { // the second round sees both hosts' first
		assert.Zero(t, one.sweep(context.Background(), false))
		assert.Zero(t, two.sweep(context.Background(), false))
	}
	h := held()
	assert.Equal(t, 10*each, h["host-2 quiet"], "the quiet tenant keeps its own")
	busy := h["host-1 busy"] + h["host-2 busy"]
	assert.LessOrEqual(t, busy+h["host-2 quiet"], liveKeepBytes, "within the one budget: %v", h)
	// Each host trims by the others' last sweep, which may have held more since: together
	// they may give a little more way than needed, each keeping some.
	assert.Greater(t, busy, (liveKeepBytes-10*each)*8/10, "busy keeps most of the rest: %v", h)
	ratio := float64(h["host-1 busy"]) / float64(h["host-2 busy"])
	assert.True(t, ratio > 1.5 && ratio < 3.5, "each host about in proportion of what it held (2): %v", h)

	// The second host stops: its last sweep leaves its part of the budget to the first.
	assert.Zero(t, two.sweep(context.Background(), true))
	add(one, "busy", busyOne) // the same instances again, idle again
	assert.Zero(t, one.sweep(context.Background(), false))
	assert.Greater(t, held()["host-1 busy"], liveKeepBytes-each, "the whole budget is the first host's")
}

// An empty set's sweeps rest, an instance acquired starts them again, and the instance is swept
// out once idle, after which they rest again.
func TestLiveSetRestsWhileEmpty(t *testing.T) {
	s := newLiveSet(nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "host-1", nil, func(context.Context) error { return nil })
	s.mu.Lock()
	s.keep = 10 * time.Millisecond
	s.mu.Unlock()
	resting := s.sweeps.Resting
	ctx, cancel := context.WithCancel(context.Background())
	s.startSweeps(ctx)
	defer func() { cancel(); s.stopSweeps() }()

	require.Eventually(t, resting, 3*sweepEvery, 10*time.Millisecond, "an empty set's sweep rests")
	l := s.acquire("default", "default:Echo:Supervisor Workflow:r")
	assert.False(t, resting(), "an instance wakes it")
	s.release(l)
	require.Eventually(t, func() bool { return s.size() == 0 && resting() }, 5*sweepEvery, 10*time.Millisecond,
		"the idle instance is swept out, and the sweep rests again")
}
