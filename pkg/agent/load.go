package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/subject"
)

// The host's load report (inspect.Load): every inspect.LoadEvery while it holds requests, and
// once more when it holds none any more or stops, the host tells on subject.HostLoad how many of
// each tenant's requests of each agent it holds queued and running, how many of the tenant's
// conversations could run, and how long the oldest queued request has waited. It is counted
// under the host's lock in one pass over the conversations it holds, and costs no NATS round
// trip: one core NATS message a quarter of a second. The ingress instances bound the tenants'
// queued requests with the reports; the hosts divide the caps across the hosts by them
// (grants.go; CapWatch follows them), and keep the last one for their metrics.

// startLoadReports sends the host's load report every inspect.LoadEvery, and when asked sooner
// (reportSoon), until stopLoadReports, which sends an empty one, so that what it held no longer
// counts. A host that holds nothing does not count: its reports rest until a request comes
// (loadIdle, queueLocked) or another report is asked for.
func (h *Host) startLoadReports() {
	h.loadReports.Start(inspect.LoadEvery, func() bool {
		// Set before counting, which takes the lock queueLocked holds: a request queued after
		// the count finds the flag set and asks for a report.
		h.loadIdle.Store(true)
		l := h.countLoad(time.Now())
		h.lastLoad.Store(&l.Entries)
		if len(l.Entries) > 0 || h.loadSent {
			h.sendLoad(l)
		}
		h.loadSent = len(l.Entries) > 0
		if h.loadSent {
			h.loadIdle.Store(false)
		}
		return !h.loadSent
	})
}

// stopLoadReports stops the reports and sends an empty one if the last held entries.
func (h *Host) stopLoadReports() {
	h.loadReports.Stop()
	h.lastLoad.Store(nil)
	if h.loadSent {
		h.sendLoad(inspect.Load{V: inspect.LoadVersion, Host: h.cfg.ID, Entries: []inspect.LoadEntry{}})
	}
}

// wakeLoadLocked asks for a load report when the host reported holding nothing: it is about to
// hold a request. Call it with h.mu held.
func (h *Host) wakeLoadLocked() {
	if h.loadIdle.Load() {
		h.loadIdle.Store(false)
		h.reportSoon()
	}
}

// reportSoon has the load report sent now rather than at its next step.
func (h *Host) reportSoon() { h.loadReports.Kick() }

func (h *Host) sendLoad(l inspect.Load) {
	b, _ := json.Marshal(l)
	if err := h.cfg.Conn.Publish(subject.HostLoad, b); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("sending the load report", "err", err)
	}
}

// countLoad counts what the host holds, by tenant and agent.
func (h *Host) countLoad(now time.Time) inspect.Load {
	type count struct {
		inspect.LoadEntry
		oldest int64 // when the inbox stored the oldest queued request (Unix nanoseconds)
	}
	counts := map[shareKey]*count{}
	at := func(k shareKey) *count {
		c := counts[k]
		if c == nil {
			c = &count{LoadEntry: inspect.LoadEntry{Tenant: k.tenant, Agent: k.agent}}
			counts[k] = c
		}
		return c
	}
	crowded := false // a partition of a conversation holds crowdedAt requests
	h.mu.Lock()
	for _, c := range h.convs {
		if len(c.queue) == 0 {
			continue
		}
		crowded = crowded || c.queue[0].part.holding >= crowdedAt
		n := at(c.share)
		queued := c.queue
		if c.running {
			n.Running++
			queued = queued[1:]
		}
		n.Queued += len(queued)
		if len(queued) > 0 && (n.oldest == 0 || queued[0].stored < n.oldest) {
			n.oldest = queued[0].stored
		}
	}
	seen := map[*slots]bool{}
	for _, s := range h.slots {
		if !seen[s] {
			seen[s] = true
			s.ready.Range(func(k shareKey, waiting, out int) bool {
				at(k).Want = waiting + out
				return true
			})
		}
	}
	if crowded {
		h.markCrowdingLocked(func(k shareKey, part *partition) {
			e := at(k)
			e.Crowded = append(e.Crowded, part.key.n)
			e.Partitions = part.inbox.partitions
		})
	}
	h.mu.Unlock()

	l := inspect.Load{V: inspect.LoadVersion, Host: h.cfg.ID, Entries: make([]inspect.LoadEntry, 0, len(counts))}
	for _, c := range counts {
		slices.Sort(c.Crowded)
		if c.oldest > 0 {
			c.OldestMs = max(0, now.Sub(time.Unix(0, c.oldest)).Milliseconds())
		}
		l.Entries = append(l.Entries, c.LoadEntry)
	}
	slices.SortFunc(l.Entries, func(a, b inspect.LoadEntry) int {
		return cmp.Or(cmp.Compare(b.Queued, a.Queued), cmp.Compare(b.Running, a.Running),
			cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Agent, b.Agent))
	})
	if len(l.Entries) > inspect.MaxLoadEntries {
		l.Entries, l.Full = l.Entries[:inspect.MaxLoadEntries], true
	}
	return l
}

// markCrowdingLocked marks the tenants that hold at least their share of a crowded partition,
// with the partition: crowdedAt over the tenants holding some. So a tenant alone in it is
// marked at crowdedAt, and tenants joining it are marked from their part of that half, not from
// the average of what the partition holds, which the tenants under it could raise by turns
// until it is full. A partition's conversations are one agent's, so its tenants are counted by
// their share key. A partition is crowded from crowdedAt requests held (partition.holding).
// Call it with h.mu held.
func (h *Host) markCrowdingLocked(mark func(shareKey, *partition)) {
	type partShare struct {
		part  *partition
		share shareKey
	}
	byTenant := map[partShare]int{}
	tenants := map[*partition]int{}
	for _, c := range h.convs {
		if len(c.queue) == 0 || c.queue[0].part.holding < crowdedAt {
			continue
		}
		k := partShare{c.queue[0].part, c.share}
		if byTenant[k] == 0 {
			tenants[k.part]++
		}
		byTenant[k] += len(c.queue)
	}
	for k, n := range byTenant {
		if n*tenants[k.part] >= crowdedAt {
			mark(k.share, k.part)
		}
	}
}

// metricTenants is how many tenants keep their name in the tenant label of the queue metrics:
// those with the most requests held; the others are added up as metrics.Other.
const metricTenants = 20

var (
	queuedDesc = prometheus.NewDesc("agentbus_tenant_queued_requests",
		"Requests of a tenant the host holds that do not run yet, by agent, as of the host's last load report.",
		[]string{"agent", "tenant"}, nil)
	runningDesc = prometheus.NewDesc("agentbus_tenant_running_requests",
		"Requests of a tenant running in the agent's handlers on the host, by agent.",
		[]string{"agent", "tenant"}, nil)
	oldestDesc = prometheus.NewDesc("agentbus_tenant_oldest_queued_seconds",
		"How long the oldest queued request of a tenant the host holds has waited since the inbox stored it, by agent.",
		[]string{"agent", "tenant"}, nil)
)

// loadCollector exports the last load report of every host of the process that shares its
// registry, added up per agent and tenant when scraped.
type loadCollector struct {
	mu    sync.Mutex
	hosts []*Host
}

// collectLoad registers the host's queue metrics.
func (h *Host) collectLoad(r prometheus.Registerer) error {
	c, err := metrics.Register(r, &loadCollector{})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.hosts = append(c.hosts, h)
	c.mu.Unlock()
	return nil
}

func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuedDesc
	ch <- runningDesc
	ch <- oldestDesc
}

func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ agent, tenant string }
	sums := map[key]*inspect.LoadEntry{}
	byTenant := map[string]int{}
	c.mu.Lock()
	hosts := slices.Clone(c.hosts)
	c.mu.Unlock()
	for _, h := range hosts {
		last := h.lastLoad.Load()
		if last == nil {
			continue
		}
		for _, e := range *last {
			s := sums[key{e.Agent, e.Tenant}]
			if s == nil {
				s = &inspect.LoadEntry{Agent: e.Agent, Tenant: e.Tenant}
				sums[key{e.Agent, e.Tenant}] = s
			}
			s.Queued += e.Queued
			s.Running += e.Running
			s.OldestMs = max(s.OldestMs, e.OldestMs)
			byTenant[e.Tenant] += e.Queued + e.Running
		}
	}
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	slices.SortFunc(tenants, func(a, b string) int { return cmp.Or(cmp.Compare(byTenant[b], byTenant[a]), cmp.Compare(a, b)) })
	named := map[string]bool{}
	for _, t := range tenants[:min(len(tenants), metricTenants)] {
		named[t] = true
	}
	out := map[key]*inspect.LoadEntry{}
	for k, s := range sums {
		if !named[k.tenant] {
			k.tenant = metrics.Other
		}
		o := out[k]
		if o == nil {
			o = &inspect.LoadEntry{}
			out[k] = o
		}
		o.Queued += s.Queued
		o.Running += s.Running
		o.OldestMs = max(o.OldestMs, s.OldestMs)
	}
	for k, o := range out {
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(o.Queued), k.agent, k.tenant)
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(o.Running), k.agent, k.tenant)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, float64(o.OldestMs)/1000, k.agent, k.tenant)
	}
}
