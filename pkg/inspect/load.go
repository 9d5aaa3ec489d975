package inspect

import (
	"cmp"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/subject"
)

// Load reports: every workflow host tells, every LoadEvery while it holds requests (and once
// more when it holds none any more, or stops), how many of each tenant's requests of each agent
// it holds, on the core NATS subject subject.HostLoad. The ingress instances add them up to
// bound a tenant's queued requests and to show the queues; the hosts divide the concurrency
// caps among themselves by them.

// Timing and bounds of the load reports.
const (
	// LoadEvery is how often a host reports while it holds requests.
	LoadEvery = 250 * time.Millisecond
	// LoadFor is how long a report counts after it arrived: four periods, so that a late or
	// lost report does not drop its host's requests.
	LoadFor = 4 * LoadEvery
	// MaxLoadEntries bounds the entries of one report (about 60 bytes each); a host holding
	// requests of more tenants and agents reports those with the most queued, and sets Full.
	MaxLoadEntries = 2048
)

// LoadVersion is the version of Load; a report of another version is ignored.
const LoadVersion = 1

// Load is a host's report.
type Load struct {
	V    int    `json:"v"`
	Host string `json:"host"`
	// Entries are the tenants and agents the host holds requests of.
	Entries []LoadEntry `json:"entries"`
	// Full: entries were left out (MaxLoadEntries), those with the fewest requests queued.
	Full bool `json:"full,omitempty"`
}

// LoadEntry is what a host holds of one tenant's requests of one agent.
type LoadEntry struct {
	Tenant string `json:"t"`
	Agent  string `json:"a"`
	// Queued counts the requests held that do not run: waiting for a slot, behind an earlier
	// request of their conversation, or for a request held elsewhere. Running counts those in
	// a handler (a retry's backoff and a call the handler waits for included).
	Queued  int `json:"q,omitempty"`
	Running int `json:"r,omitempty"`
	// Want is how many of the agent's slots the tenant could use on the host now: its
	// conversations whose next request may run, running or not.
	Want int `json:"w,omitempty"`
	// OldestMs is how long the oldest queued request has waited since the inbox stored it.
	OldestMs int64 `json:"o,omitempty"`
	// Crowded are the partitions of the agent's inbox (of Partitions) the tenant crowds on the
	// host: each holds at least half the requests the host takes of it at once, and the tenant
	// at least its share of that half (over the tenants holding some). The ingress instances
	// refuse the tenant's new calls of the agent to those partitions meanwhile, so that they
	// have room for the other tenants' requests: past the most a host holds, a partition's
	// requests wait in the inbox in arrival order, behind the backlog
	// (docs/limits.md#handler-slots).
	Crowded    []int `json:"c,omitempty"`
	Partitions int   `json:"pn,omitempty"`
}

// Pair names a tenant's requests of an agent.
type Pair struct{ Tenant, Agent string }

// LoadBoard adds up the hosts' reports: each host's last one counts for LoadFor. It is safe
// for concurrent use; reading a pair's sum is a map lookup.
type LoadBoard struct {
	mu    sync.Mutex
	hosts map[string]*hostLoad
	sums  map[Pair]*TenantQueue
	// crowding holds, per pair, the partitions the hosts' reports name Crowded; crowded is its
	// length, read without the lock, so that a call pays one atomic load while no host reports a
	// crowded partition.
	crowding map[Pair]*crowdedParts
	crowded  atomic.Int64
	swept    time.Time
}

// hostLoad is a host's last report, as received.
type hostLoad struct {
	at      time.Time
	entries map[Pair]LoadEntry
}

// NewLoadBoard returns an empty board.
func NewLoadBoard() *LoadBoard {
	return &LoadBoard{hosts: map[string]*hostLoad{}, sums: map[Pair]*TenantQueue{}, crowding: map[Pair]*crowdedParts{}}
}

// crowdedParts are the partitions of an agent's inbox a tenant crowds, as the hosts report
// them.
type crowdedParts struct {
	// reports counts the reports that name some; parts counts them per partition; n is the
	// inbox's partition count they give.
	reports int
	parts   map[int]int
	n       int
}

// Take takes in a report as it arrived (its JSON) at now; a report it cannot read is ignored.
func (b *LoadBoard) Take(data []byte, now time.Time) {
	var l Load
	if json.Unmarshal(data, &l) != nil || l.V != LoadVersion || l.Host == "" || len(l.Entries) > MaxLoadEntries {
		return
	}
	b.TakeLoad(l, now)
}

// TakeLoad takes in a report.
func (b *LoadBoard) TakeLoad(l Load, now time.Time) {
	entries := make(map[Pair]LoadEntry, len(l.Entries))
	for _, e := range l.Entries {
		entries[Pair{e.Tenant, e.Agent}] = e
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old := b.hosts[l.Host]; old != nil {
		b.add(old.entries, -1)
	}
	if len(entries) == 0 {
		delete(b.hosts, l.Host)
		return
	}
	b.hosts[l.Host] = &hostLoad{at: now, entries: entries}
	b.add(entries, 1)
}

// add adds entries to the sums (sign 1) or takes them off (-1). b.mu is held.
func (b *LoadBoard) add(entries map[Pair]LoadEntry, sign int) {
	for p, e := range entries {
		s := b.sums[p]
		if s == nil {
			s = &TenantQueue{Tenant: p.Tenant, Agent: p.Agent}
			b.sums[p] = s
		}
		s.Queued += sign * e.Queued
		s.Running += sign * e.Running
		s.Hosts += sign
		if s.Hosts <= 0 {
			delete(b.sums, p)
		}
		if len(e.Crowded) > 0 {
			b.addCrowded(p, e, sign)
		}
	}
	b.crowded.Store(int64(len(b.crowding)))
}

// sweep drops the reports older than LoadFor, at most once a LoadEvery. b.mu is held.
func (b *LoadBoard) sweep(now time.Time) {
	if now.Sub(b.swept) < LoadEvery {
		return
	}
	b.swept = now
	for id, h := range b.hosts {
		if now.Sub(h.at) > LoadFor {
			b.add(h.entries, -1)
			delete(b.hosts, id)
		}
	}
}

// Queued returns the requests of the pair the hosts hold queued, as reported.
func (b *LoadBoard) Queued(p Pair, now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	if s := b.sums[p]; s != nil {
		return s.Queued
	}
	return 0
}

// addCrowded adds the partitions e names Crowded to the pair's (sign 1) or takes them off
// (-1). b.mu is held.
func (b *LoadBoard) addCrowded(p Pair, e LoadEntry, sign int) {
	c := b.crowding[p]
	if c == nil {
		c = &crowdedParts{parts: map[int]int{}}
		b.crowding[p] = c
	}
	c.reports += sign
	for _, part := range e.Crowded {
		if c.parts[part] += sign; c.parts[part] <= 0 {
			delete(c.parts, part)
		}
	}
	if sign > 0 {
		c.n = e.Partitions
	}
	if c.reports <= 0 {
		delete(b.crowding, p)
	}
}

// Crowding reports whether a host's current report names the partition of the workflow
// instance (subject.InboxPartition) among those the pair crowds; a report without the inbox's
// partition count names every partition.
func (b *LoadBoard) Crowding(p Pair, workflowID string, now time.Time) bool {
	if b.crowded.Load() == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	c := b.crowding[p]
	if c == nil {
		return false
	}
	return c.n <= 0 || c.parts[subject.InboxPartition(p.Tenant, workflowID, c.n)] > 0
}

// Wants returns, by host, what each host other than except reported of the pair: its Want.
func (b *LoadBoard) Wants(p Pair, except string, now time.Time) map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	out := map[string]int{}
	for id, h := range b.hosts {
		if e, ok := h.entries[p]; ok && id != except {
			out[id] = e.Want
		}
	}
	return out
}

// Covered returns the time up to which every host's reports are in: the arrival of the oldest
// of the hosts' last reports, now when no host reports. A request a host took before then is
// in its reports.
func (b *LoadBoard) Covered(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	at := now
	for _, h := range b.hosts {
		if h.at.Before(at) {
			at = h.at
		}
	}
	return at
}

// Reported reports whether host's report is current.
func (b *LoadBoard) Reported(host string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	_, ok := b.hosts[host]
	return ok
}

// Queues returns the pairs the hosts hold requests of, those of tenant only unless it is "",
// added up over the hosts, the most queued first, at most limit.
func (b *LoadBoard) Queues(tenant string, limit int, now time.Time) []TenantQueue {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	out := []TenantQueue{}
	for p, s := range b.sums {
		if tenant != "" && p.Tenant != tenant {
			continue
		}
		q := *s
		q.Crowding = b.crowding[p] != nil
		for _, h := range b.hosts {
			q.OldestWaitMs = max(q.OldestWaitMs, h.entries[p].OldestMs)
		}
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b TenantQueue) int {
		return cmp.Or(cmp.Compare(b.Queued, a.Queued), cmp.Compare(b.Running, a.Running),
			cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Agent, b.Agent))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// TenantQueue is what the hosts hold of one tenant's requests of one agent, as their load
// reports tell (every LoadEvery), and the limits that hold for them.
type TenantQueue struct {
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	// Queued counts the requests the hosts hold that do not run yet, Running those in a
	// handler; OldestWaitMs is how long the oldest queued one has waited since it was stored.
	Queued       int   `json:"queued"`
	Running      int   `json:"running"`
	OldestWaitMs int64 `json:"oldestWaitMs"`
	// Hosts counts the hosts that hold some.
	Hosts int `json:"hosts"`
	// Crowding: a host reports the tenant crowding a partition of the agent (LoadEntry's
	// Crowded), so its new calls of the agent to that partition are refused until no host does.
	Crowding bool `json:"crowding"`
	// MaxQueued and MaxConcurrent are the tenant's caps of the agent's requests queued and
	// running at once (0: none; docs/limits.md#per-tenant-limits).
	MaxQueued     int `json:"maxQueued"`
	MaxConcurrent int `json:"maxConcurrent"`
}
