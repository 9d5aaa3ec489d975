package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/agentbus/agentbus/pkg/fairshare"
	"github.com/agentbus/agentbus/pkg/idle"
	"github.com/agentbus/agentbus/pkg/instance"
)

// liveIdle is how long an unused instance's event counts and activity time may wait in memory:
// past it, the host writes them (one write per idle period, none while the instance is busy).
const liveIdle = 2 * time.Second

// liveKeep is how long a host keeps an unused instance in memory, its counts written, so that an
// instance called every few seconds is not read again (its record and its threads' cursors) on
// every call, nor written when dropped. Past it, or sooner when the idle instances kept hold more
// than liveKeepBytes (the tenants holding the most give way, IdleBudget), an idle instance costs
// the host nothing.
const liveKeep = 30 * time.Second

// liveKeepBytes bounds what the idle instances kept past liveIdle hold: their states, and
// liveBaseBytes each; the hosts of a process that share an IdleBudget together.
const liveKeepBytes = 16 << 20

// IdleBudget bounds the memory the idle instance copies kept by the hosts of a process hold
// together (HostConfig.IdleBudget): a workflow host process runs a host for each remote agent,
// and a budget of each host's own would let the process hold as many budgets as tenants
// register agents. Past it, the tenants holding the most give way, across the hosts
// (fairshare.Shares): each host keeps of a tenant's copies its part of the tenant's share, in
// proportion to what it holds of them, as the hosts' last sweeps (a second apart at most) found
// them. It is safe for concurrent use.
type IdleBudget struct {
	bytes int
	mu    sync.Mutex
	// held is what each host's last sweep kept, by host and tenant; totals adds them up by
	// tenant, and total over all.
	held   map[string]map[string]int
	totals map[string]int
	total  int
}

// NewIdleBudget returns a budget of about bytes for the idle instance copies of the hosts that
// share it.
func NewIdleBudget(bytes int) *IdleBudget {
	return &IdleBudget{bytes: bytes, held: make(map[string]map[string]int), totals: make(map[string]int)}
}

// allow records that the host's idle copies hold held, by tenant, and returns how much of each
// tenant's the host may keep; nil when it may keep all.
func (b *IdleBudget) allow(host string, held map[string]int) map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for t, n := range b.held[host] {
		b.totals[t] -= n
		b.total -= n
		if b.totals[t] == 0 {
			delete(b.totals, t)
		}
	}
	if len(held) == 0 {
		delete(b.held, host)
	} else {
		b.held[host] = held
	}
	for t, n := range held {
		b.totals[t] += n
		b.total += n
	}
	if b.total <= b.bytes {
		return nil
	}
	shares := fairshare.Shares(b.totals, b.bytes)
	allow := make(map[string]int, len(held))
	for t, n := range held {
		allow[t] = shares[t] * n / b.totals[t]
	}
	return allow
}

// liveBaseBytes is about what a live instance holds besides its state: the record's other
// fields, a cursor or two, the ring of requests with kept results (keptRing), the map entry.
const liveBaseBytes = 1 << 10

// liveSet holds the instances in use on a host. Partitions are keyed by workflow, so one host
// holds all conversations of an instance and its copy stays the one that writes.
type liveSet struct {
	// budget bounds the idle copies this host and those sharing it keep (NewIdleBudget).
	budget *IdleBudget
	store  *instance.Store
	log    *slog.Logger
	hostID string
	// count follows len(m); nil without metrics.
	count prometheus.Gauge
	// mayAct is given to every live copy (liveInstance.mayAct).
	mayAct func(context.Context) error
	// keep is how long an idle instance is kept (liveKeep; tests shorten it); guarded by mu.
	keep time.Duration
	// gen counts the tenures this host began (stale): a copy loaded before the last is read
	// again before its next request, since another host may have run the instance meanwhile.
	gen atomic.Uint64

	mu sync.Mutex
	m  map[liveKey]*liveInstance
	// sweeps rests while the set is empty, and the next instance acquired wakes it.
	sweeps *idle.Loop
}

func newLiveSet(budget *IdleBudget, store *instance.Store, log *slog.Logger, hostID string, count prometheus.Gauge, mayAct func(context.Context) error) *liveSet {
	if budget == nil {
		budget = NewIdleBudget(liveKeepBytes)
	}
	return &liveSet{budget: budget, store: store, log: log, hostID: hostID, count: count, mayAct: mayAct, keep: liveKeep,
		m: make(map[liveKey]*liveInstance), sweeps: idle.NewLoop(sweepEvery, sweepEvery)}
}

// stale makes every copy in memory read its record anew before its next request: called when
// the host begins a tenure of a partition, whose instances another host may have run since this
// host last did (their history cursors need nothing: an append expects its thread's last
// sequence, and one that meets another's reads the thread again).
func (s *liveSet) stale() { s.gen.Add(1) }

// acquire returns the instance's live copy (not loaded yet when new); release it after use.
func (s *liveSet) acquire(tenant, workflowID string) *liveInstance {
	k := liveKey{tenant, workflowID}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.m[k]
	if l == nil {
		l = &liveInstance{store: s.store, key: k, hostID: s.hostID, mayAct: s.mayAct}
		s.m[k] = l
		if s.count != nil {
			s.count.Inc()
		}
		s.sweeps.Wake()
	}
	l.users++
	return l
}

func (s *liveSet) release(l *liveInstance) {
	s.mu.Lock()
	l.users--
	if l.users == 0 {
		l.idleSince = time.Now()
	}
	s.mu.Unlock()
}

// sweep writes the unwritten counts of instances idle for longer than liveIdle and drops those
// idle for longer than keep, and, while those kept by the hosts sharing its budget hold more
// than it allows, some of them (IdleBudget; all idle ones when all is set). It returns how many it could not write. The
// last sweep, with all set, leaves reporting them to its caller.
func (s *liveSet) sweep(ctx context.Context, all bool) (notWritten int) {
	now := time.Now()
	var idle, kept []*liveInstance
	held := make(map[string]int)
	s.mu.Lock()
	for k, l := range s.m {
		if l.users != 0 {
			continue
		}
		switch since := now.Sub(l.idleSince); {
		case all || since > s.keep:
			delete(s.m, k)
			idle = append(idle, l)
		case since > liveIdle:
			kept = append(kept, l)
			held[l.key.tenant] += l.bytes()
		}
	}
	if allow := s.budget.allow(s.hostID, held); allow != nil {
		var drop []*liveInstance
		// The tenants that hold the most give way, each its longest idle first: a tenant that
		// calls thousands of instances of a shared agent fills the budget with its own, not by
		// pushing another's out of memory (which would cost that tenant's next calls their
		// records read again).
		kept, drop = fairshare.TrimTo(kept, allow,
			func(l *liveInstance) string { return l.key.tenant }, (*liveInstance).bytes,
			func(a, b *liveInstance) int { return a.idleSince.Compare(b.idleSince) })
		for _, l := range drop {
			delete(s.m, l.key)
		}
		idle = append(idle, drop...)
	}
	if s.count != nil {
		s.count.Sub(float64(len(idle)))
	}
	s.mu.Unlock()
	// The kept ones' counts are written too (once: a written copy is clean until its next call).
	idle = append(idle, kept...)
	// One write per instance: written one after the other they would fall behind a host that
	// sees thousands of new instances a second, and the idle ones would pile up in memory. A
	// regular sweep spreads its writes over the time until the next: after a burst of traffic
	// over many instances they would otherwise all go at once, competing with live calls (1,000
	// writes took about 28 ms). The last sweep, when the host stops, writes at once.
	flush := idle[:0]
	for _, l := range idle {
		if l.needsFlush() {
			flush = append(flush, l)
		}
	}
	pace := rate.NewLimiter(rate.Inf, flushConcurrency)
	if !all {
		pace.SetLimit(rate.Limit(float64(len(flush)) / sweepEvery.Seconds()))
	}
	sem := make(chan struct{}, flushConcurrency)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, l := range flush {
		_ = pace.Wait(ctx) // returns at once when ctx ends: the writes then fail and say so
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := l.flush(ctx); err != nil {
				failed.Add(1)
				if !all {
					s.log.Warn("writing instance counts", "workflowId", l.key.workflowID, "err", err)
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

// flushConcurrency bounds the instance writes a sweep has in flight; a sweep of this many or
// fewer writes them at once.
const flushConcurrency = 32

// sweepEvery is how often the host sweeps its idle instances out of memory.
const sweepEvery = liveIdle / 2

// startSweeps sweeps every sweepEvery until stopSweeps, with ctx. While the set is empty the
// sweeps rest: an idle host's sweep neither wakes every second nor holds a goroutine.
func (s *liveSet) startSweeps(ctx context.Context) {
	s.sweeps.Start(sweepEvery, func() bool {
		s.sweep(ctx, false)
		return s.empty()
	})
}

// stopSweeps stops the sweeps; call it after ctx ended.
func (s *liveSet) stopSweeps() { s.sweeps.Stop() }

// empty reports whether the set holds no instance.
func (s *liveSet) empty() bool { return s.size() == 0 }

// size returns how many instances are held in memory.
func (s *liveSet) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
