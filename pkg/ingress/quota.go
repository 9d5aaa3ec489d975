package ingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
)

// StoreGuard refuses the requests that would store something while the JetStream account's
// storage is nearly full (docs/limits.md#a-nearly-full-store): large ones first, then all, so
// that reads, admin calls and the hosts' writes of requests already accepted go on. The zero
// value refuses nothing.
type StoreGuard struct {
	// LargePercent is the share of the max storage (1–100) from which a request that stores
	// more than LargeBytes is refused. Zero: never.
	LargePercent int
	// AllPercent is the share from which every request that stores is refused. Zero: never.
	AllPercent int
	// LargeBytes is what a large request stores at least: a file's content, or the request
	// as the bus carries it. Default 64 KiB.
	LargeBytes int64
	// MaxBytes is the max storage when the account has no limit of its own (JetStream account
	// info answers -1): the total of the servers' max_file_store, every replica counted. Zero:
	// the guard then has nothing to measure against and refuses nothing.
	MaxBytes int64
}

// DefaultLargeBytes is StoreGuard.LargeBytes's default.
const DefaultLargeBytes = 64 << 10

func (g StoreGuard) withDefaults() StoreGuard {
	if g.LargeBytes == 0 {
		g.LargeBytes = DefaultLargeBytes
	}
	return g
}

// Validate reports a guard that cannot work.
func (g StoreGuard) Validate() error {
	if g.LargePercent < 0 || g.LargePercent > 100 || g.AllPercent < 0 || g.AllPercent > 100 {
		return errors.New("ingress: store guard percentages must be 0 to 100")
	}
	if g.LargeBytes < 0 || g.MaxBytes < 0 {
		return errors.New("ingress: negative store guard size")
	}
	return nil
}

// storage is what the ingress knows of what tenants store: their usage as the counters have
// it, what it stored itself that those counters do not hold yet, and how full the store is.
type storage struct {
	quotas usage.Quotas
	guard  StoreGuard
	usage  *usage.Reader
	meter  *usage.Meter
	level  *usage.Level
	// instances reads whether an instance exists, for a tenant at its instance quota.
	instances jetstream.KeyValue
	refusals  *prometheus.CounterVec
	conn      *nats.Conn

	stop func()
	done sync.WaitGroup
}

// startStorage starts following the usage counters and the store's level, and the meter of what
// this instance stores and removes (files, request claims, dead letters and undelivered events).
func (s *Server) startStorage(ctx context.Context) (*storage, error) {
	st := &storage{quotas: s.cfg.Quotas, guard: s.cfg.StoreGuard.withDefaults(), instances: s.res.Instances, conn: s.cfg.Conn}
	var err error
	if st.meter, err = usage.NewMeter(s.cfg.Conn, s.log); err != nil {
		return nil, err
	}
	if st.usage, err = usage.Watch(ctx, s.js, s.res.Config, s.log); err != nil {
		return nil, err
	}
	// What this instance stored counts against its tenant until its reader has it.
	st.meter.SeenBy(st.usage)
	st.level = usage.NewLevel(s.js, st.guard.MaxBytes, s.res.Config.Replicas, s.log)
	if err := st.level.Read(ctx); err != nil {
		s.log.Warn("reading the store's level", "err", err)
	}
	if st.refusals, err = metrics.Register(s.metrics.reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbus_ingress_storage_refusals_total",
		Help: "Requests refused for storage: a tenant's byte or instance quota, or a nearly full store (the problem type's slug).",
	}, []string{"reason"})); err != nil {
		st.usage.Close()
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if _, err := metrics.Register(s.metrics.reg, &usageCollector{st: st}); err != nil {
		st.usage.Close()
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	s.claims.Meter(st.meter)
	s.dead.Meter(st.meter)
	s.subs.Meter(st.meter)
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.stop = cancel
	st.done.Go(func() { st.meter.Run(bg) })
	st.done.Go(func() { st.level.Run(bg) })
	return st, nil
}

// close stops following the counters and publishes the last counts, if NATS is there to take
// them.
func (st *storage) close() error {
	st.stop()
	st.done.Wait()
	st.usage.Close()
	if !st.conn.IsConnected() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return st.meter.Flush(ctx)
}

// quotaOf is tenant's quota now; none without Config.Quotas.
func (st *storage) quotaOf(tenant string) usage.Quota {
	if st.quotas == nil {
		return usage.Quota{}
	}
	return st.quotas(tenant)
}

// usageOf is tenant's usage as this instance knows it: the counters, and what it stored that
// they do not hold yet. Pending is read first: what it leaves out as applied is in the counters
// read after it.
func (st *storage) usageOf(tenant string) usage.Usage {
	u := st.meter.Pending(tenant)
	u.Add(st.usage.Of(tenant))
	for k := range u.Bytes {
		// A claim this instance deleted that another stored, whose count is not here yet.
		u.Bytes[k] = max(u.Bytes[k], 0)
	}
	return u.Floored()
}

// countFile counts a file this instance stored.
func (st *storage) countFile(tenant string, info *jetstream.ObjectInfo) {
	if st != nil {
		st.meter.Add(tenant, usage.Files, bus.ObjectBytes(info))
	}
}

// refusal is a request refused for storage, as the call's error: callProblem answers its
// problem.
type refusal struct{ p *problem.Problem }

func (e *refusal) Error() string { return e.p.Slug + ": " + e.p.Detail }

// admit decides whether a request of tenant to the workflow instance workflowID that stores
// size bytes (a file's content, or the request as the bus carries it) may go on: not while the
// store is nearly full (StoreGuard), while the tenant would pass its byte quota, or when it would
// create an instance past the tenant's instance quota. It costs no NATS round trip, but for a
// tenant at its instance quota, whose instance is looked up.
func (s *Server) admit(ctx context.Context, tenant, workflowID string, size int64) *problem.Problem {
	st := s.storage
	if st == nil { // a Server not made by New (tests of its parts)
		return nil
	}
	if p := st.checkLevel(size); p != nil {
		return st.refuse(p)
	}
	q := st.quotaOf(tenant)
	if q.Bytes <= 0 && q.Instances <= 0 {
		return nil
	}
	u := st.usageOf(tenant)
	if q.Bytes > 0 && u.Total()+size > q.Bytes {
		return st.refuse(problem.StorageQuotaExceeded.New(fmt.Sprintf(
			"the tenant stores %d bytes of its quota of %d, and this request would store %d more; stored data counts until it ages out (GET /api/v1/admin/tenants/%s/usage)",
			u.Total(), q.Bytes, size, tenant)))
	}
	if q.Instances > 0 && u.Instances >= q.Instances && !s.instanceExists(ctx, tenant, workflowID) {
		return st.refuse(problem.InstanceQuotaExceeded.New(fmt.Sprintf(
			"the tenant has %d workflow instances, its quota is %d: only its existing instances take messages",
			u.Instances, q.Instances)))
	}
	return nil
}

// checkLevel refuses a request that stores size bytes while the store is as full as the guard
// says.
func (st *storage) checkLevel(size int64) *problem.Problem {
	g := st.guard
	used, limit := st.level.Now()
	if limit <= 0 || (g.LargePercent == 0 && g.AllPercent == 0) {
		return nil
	}
	percent := float64(used) * 100 / float64(limit)
	switch {
	case g.AllPercent > 0 && percent >= float64(g.AllPercent):
		return problem.StoreNearlyFull.New(fmt.Sprintf(
			"the deployment's storage is %.0f%% full: no new messages are taken until space is freed", percent))
	case g.LargePercent > 0 && percent >= float64(g.LargePercent) && size > g.LargeBytes:
		return problem.StoreNearlyFull.New(fmt.Sprintf(
			"the deployment's storage is %.0f%% full: requests that store more than %d bytes are refused until space is freed", percent, g.LargeBytes))
	}
	return nil
}

// refuse counts a refusal and returns it.
func (st *storage) refuse(p *problem.Problem) *problem.Problem {
	st.refusals.WithLabelValues(p.Slug).Inc()
	return p
}

// instanceExists reports whether the tenant's instance has a record. When it cannot be read the
// request goes on: the quota is a bound on growth, not a check worth a refusal of an existing
// instance's message.
func (s *Server) instanceExists(ctx context.Context, tenant, workflowID string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := s.storage.instances.Get(ctx, subject.InstanceKey(tenant, workflowID))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		s.log.Warn("reading an instance for its tenant's quota", "tenant", tenant, "err", err)
		return true
	}
	return err == nil
}

// tenantUsage serves GET /api/v1/admin/tenants/{tenantId}/usage to the tenant's admins and system
// admins: the tenant's bytes stored by kind, its instances and its quota.
func (s *Server) tenantUsage(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	st := s.storage
	writeJSON(w, http.StatusOK, usage.NewReport(c.tenant, st.usageOf(c.tenant), st.quotaOf(c.tenant)))
}

// usageCollector exports the tenants' usage and the store's level as gauges, read when scraped.
// The metricTenants tenants storing the most bytes keep their name in the tenant label; the
// others are added up as metrics.Other.
type usageCollector struct{ st *storage }

var (
	storedBytesDesc = prometheus.NewDesc("agentbus_tenant_stored_bytes",
		"Bytes a tenant stores, by kind (history, files, payloads, kept, state, timers), within each kind's retention, as the usage counters have them.",
		[]string{"tenant", "kind"}, nil)
	instancesDesc = prometheus.NewDesc("agentbus_tenant_instances",
		"Workflow instances a tenant has.", []string{"tenant"}, nil)
	quotaBytesDesc = prometheus.NewDesc("agentbus_tenant_quota_bytes",
		"A named tenant's byte quota; 0 means none.", []string{"tenant"}, nil)
	quotaInstancesDesc = prometheus.NewDesc("agentbus_tenant_quota_instances",
		"A named tenant's instance quota; 0 means none.", []string{"tenant"}, nil)
	storeUsedDesc = prometheus.NewDesc("agentbus_store_used_bytes",
		"Bytes the JetStream account stores, every replica counted.", nil, nil)
	storeMaxDesc = prometheus.NewDesc("agentbus_store_max_bytes",
		"The JetStream account's max storage the store guard measures against; 0 when none is known.", nil, nil)
)

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{storedBytesDesc, instancesDesc, quotaBytesDesc, quotaInstancesDesc, storeUsedDesc, storeMaxDesc} {
		ch <- d
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st
	used, limit := st.level.Now()
	ch <- prometheus.MustNewConstMetric(storeUsedDesc, prometheus.GaugeValue, float64(used))
	ch <- prometheus.MustNewConstMetric(storeMaxDesc, prometheus.GaugeValue, float64(limit))

	type tenantUsage struct {
		tenant string
		u      usage.Usage
	}
	var all []tenantUsage
	for _, t := range st.usage.Tenants() {
		all = append(all, tenantUsage{t, st.usage.Of(t).Floored()})
	}
	slices.SortStableFunc(all, func(a, b tenantUsage) int { return cmp.Compare(b.u.Total(), a.u.Total()) })
	var other usage.Usage
	for i, tu := range all {
		if i >= metricTenants {
			other.Add(tu.u)
			continue
		}
		c.tenant(ch, tu.tenant, tu.u)
		q := st.quotaOf(tu.tenant)
		ch <- prometheus.MustNewConstMetric(quotaBytesDesc, prometheus.GaugeValue, float64(q.Bytes), tu.tenant)
		ch <- prometheus.MustNewConstMetric(quotaInstancesDesc, prometheus.GaugeValue, float64(q.Instances), tu.tenant)
	}
	if len(all) > metricTenants {
		c.tenant(ch, metrics.Other, other)
	}
}

// tenant sends one tenant label's usage.
func (c *usageCollector) tenant(ch chan<- prometheus.Metric, name string, u usage.Usage) {
	for _, k := range usage.Kinds() {
		ch <- prometheus.MustNewConstMetric(storedBytesDesc, prometheus.GaugeValue, float64(u.Bytes[k]), name, k.String())
	}
	ch <- prometheus.MustNewConstMetric(storedBytesDesc, prometheus.GaugeValue, float64(u.State), name, usage.StateName)
	ch <- prometheus.MustNewConstMetric(storedBytesDesc, prometheus.GaugeValue, float64(u.Timers), name, usage.TimersName)
	ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(u.Instances), name)
}

// storageSettings are the quotas and the store guard the settings give (FromSettings): every
// tenant gets the same quota.
func storageSettings(c config.Config) (usage.Quotas, StoreGuard) {
	var quotas usage.Quotas
	if q := (usage.Quota{Bytes: c.TenantMaxBytes, Instances: c.TenantMaxInstances}); q != (usage.Quota{}) {
		quotas = usage.Fixed(q)
	}
	return quotas, StoreGuard{LargePercent: c.StoreGuardLargePercent, AllPercent: c.StoreGuardAllPercent, MaxBytes: c.StoreMaxBytes}
}
