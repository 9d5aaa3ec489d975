package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/usage"
)

// The limits a system admin sets per tenant at runtime (docs/limits.md#per-tenant-limits),
// package tenantlimits. Every instance follows the bucket with a cache, and applies a change as
// the watch delivers it: the tenant's rates to the limiter, its quotas to the storage checks,
// its queued caps and its agents' rates to the calls. A write through the admin API is answered
// once every instance's cache holds it (confirm.go). The hosts follow the same bucket for the
// weights and the caps of running requests.
//
// A tenant's queued requests are counted without a NATS round trip per call: the hosts report
// what they hold every quarter of a second (inspect.LoadBoard), and this instance adds the calls
// it admitted since the hosts' last reports (admitMargin before the oldest of them), which the
// reports may not hold yet.

// tenantLimitsPath is the route of a tenant's limits.
const tenantLimitsPath = tenantsPath + "/{tenantId}/limits"

// systemTenantAccess: a system admin, acting for the path's tenant.
var systemTenantAccess = access{where: "the Authorization header", creds: fromHeader, role: keys.RoleSystemAdmin, tenant: pathTenant}

// maxQueuesShown bounds the tenants' queues the hosts view lists.
const maxQueuesShown = 200

// tenantLimitsState is what the ingress keeps for the tenants' limits.
type tenantLimitsState struct {
	store *tenantlimits.Store
	cache *tenantlimits.Cache
	// configured are the rates the configuration gives, and quotas its quotas: what a record
	// leaves out.
	configured rateTable
	quotas     usage.Quotas
	loads      *inspect.LoadBoard
	loadSub    *nats.Subscription
	admitted   admittedCalls
	refusals   prometheus.Counter
}

// startTenantLimits loads the tenants' limits and follows them, and the hosts' load reports;
// quotas are the configured quotas.
func (s *Server) startTenantLimits(ctx context.Context, quotas usage.Quotas) (*tenantLimitsState, error) {
	cfg := s.cfg
	tl := &tenantLimitsState{
		store:      tenantlimits.NewStore(s.res.TenantLimits),
		configured: cfg.rates(),
		quotas:     quotas,
		loads:      inspect.NewLoadBoard(),
		admitted:   admittedCalls{calls: map[inspect.Pair]*admittedCount{}},
	}
	var err error
	if tl.refusals, err = metrics.Register(s.metrics.reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentbus_ingress_queue_refusals_total",
		Help: "Calls refused with 429 too-many-queued: their tenant had as many requests of the agent queued as its limits allow, or held at least its share of the crowded partition of the agent that the call's instance goes to.",
	})); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if tl.loadSub, err = s.cfg.Conn.Subscribe(subject.HostLoad, func(m *nats.Msg) { tl.loads.Take(m.Data, time.Now()) }); err != nil {
		return nil, fmt.Errorf("subscribing to load reports: %w", err)
	}
	s.tenantLimits = tl
	if tl.cache, err = tenantlimits.Watch(ctx, s.res.TenantLimits, s.tenantLimitsChanged, s.log); err != nil {
		_ = tl.loadSub.Unsubscribe()
		return nil, err
	}
	return tl, nil
}

// close stops following the limits and the load reports.
func (tl *tenantLimitsState) close() error {
	err := tl.loadSub.Unsubscribe()
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
		err = nil
	}
	return errors.Join(err, tl.cache.Close())
}

// tenantLimitsChanged applies a tenant's rates as its record has them, or the configured ones.
func (s *Server) tenantLimitsChanged(c *tenantlimits.Cache, tenant string) {
	l := c.Limits(tenant)
	if l.Rate == nil && l.KeyRate == nil && l.WriteRate == nil && l.ListenRate == nil {
		s.ResetTenantRates(tenant)
		return
	}
	if err := s.SetTenantRates(tenant, s.tenantLimits.rates(tenant, l)); err != nil {
		s.log.Error("applying a tenant's rates", "tenant", tenant, "err", err)
	}
}

// rates returns the rates of a tenant with limits l: theirs, or the configured ones.
func (tl *tenantLimitsState) rates(tenant string, l tenantlimits.Limits) TenantRates {
	r := tl.configured.of(tenant)
	if l.KeyRate != nil {
		r.Key = Rate(*l.KeyRate).withDefaults()
	}
	if l.Rate != nil {
		r.Tenant = Rate(*l.Rate).withDefaults()
	}
	if l.WriteRate != nil {
		r.Write = Rate(*l.WriteRate).withDefaults()
	}
	if l.ListenRate != nil {
		r.Listen = Rate(*l.ListenRate).withDefaults()
	}
	return r
}

// quota returns a tenant's storage quota: its record's, or the configured one (quotas).
func (tl *tenantLimitsState) quota(quotas usage.Quotas, tenant string) usage.Quota {
	var q usage.Quota
	if quotas != nil {
		q = quotas(tenant)
	}
	if tl == nil || tl.cache == nil { // still loading
		return q
	}
	l := tl.cache.Limits(tenant)
	if l.MaxBytes != nil {
		q.Bytes = *l.MaxBytes
	}
	if l.MaxInstances != nil {
		q.Instances = *l.MaxInstances
	}
	return q
}

// admitCall decides whether a call of tenant to agent, for the workflow instance workflowID, may
// be queued: not past the rate of the tenant's calls to the agent, nor while a host reports the
// tenant crowding the agent's inbox partition the instance's requests go to
// (inspect.LoadEntry's Crowded), nor while the tenant has as many requests of the agent queued
// as its limits allow. A tenant without such limits pays a map lookup, and an atomic load while
// no partition is crowded.
func (s *Server) admitCall(tenant, agent, workflowID string) *problem.Problem {
	tl := s.tenantLimits
	if tl == nil { // a Server not made by New (tests of its parts)
		return nil
	}
	v := tl.cache.Limits(tenant).For(agent)
	now := time.Now()
	if v.Rate != nil && v.Rate.PerSecond > 0 {
		if ok, wait := s.limits.allowAgent(tenant, agent, Rate(*v.Rate).withDefaults(), now); !ok {
			return rateLimited(wait, "too many requests to agent "+subject.Quote(agent)+" for this tenant (all its keys together)")
		}
	}
	pair := inspect.Pair{Tenant: tenant, Agent: agent}
	if tl.loads.Crowding(pair, workflowID, now) {
		tl.refusals.Inc()
		return problem.TooManyQueued.New(fmt.Sprintf(
			"the partition of agent %s this instance's requests go to holds half the requests a workflow host takes of it at once, and this tenant holds at least its share of that half; retry once they have run",
			subject.Quote(agent)))
	}
	limit := s.cfg.TenantLimits.MaxQueued
	if v.MaxQueued != nil {
		limit = *v.MaxQueued
	}
	if limit <= 0 {
		return nil
	}
	if queued := tl.loads.Queued(pair, now) + tl.admitted.since(pair, tl.loads.Covered(now).Add(-admitMargin), now); queued >= limit {
		tl.refusals.Inc()
		return problem.TooManyQueued.New(fmt.Sprintf(
			"the tenant has %d requests of agent %s queued, as many as its limit of %d allows; retry once they have run",
			queued, subject.Quote(agent), limit))
	}
	tl.admitted.add(pair, now)
	return nil
}

// admittedCalls counts, per tenant and agent with a queued cap, the calls this instance admitted
// lately, in slices of admitSlice: those since the hosts' last reports, which may not hold them
// yet, count on top of the reports.
type admittedCalls struct {
	mu    sync.Mutex
	calls map[inspect.Pair]*admittedCount
	swept time.Time
}

// admitSlice is the resolution of the admitted calls' times, and admitSlices how many slices
// are kept: a second, longer than a host's reports take to come.
const (
	admitSlice  = 50 * time.Millisecond
	admitSlices = 20
)

// admitMargin is how long before a host's report a call admitted is taken not to be in it: the
// time from its admission to the host holding it.
const admitMargin = 50 * time.Millisecond

type admittedCount struct {
	slices [admitSlices]struct {
		slice int64 // the slice's number, in admitSlice since the Unix epoch
		n     int
	}
	last int64
}

func sliceOf(t time.Time) int64 { return t.UnixNano() / int64(admitSlice) }

// add counts an admitted call.
func (a *admittedCalls) add(p inspect.Pair, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.calls[p]
	if c == nil {
		c = &admittedCount{}
		a.calls[p] = c
	}
	n := sliceOf(now)
	sl := &c.slices[n%admitSlices]
	if sl.slice != n {
		sl.slice, sl.n = n, 0
	}
	sl.n++
	c.last = n
}

// since returns the calls admitted from the slice of t on (at most a second ago).
func (a *admittedCalls) since(p inspect.Pair, t, now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := sliceOf(now)
	if now.Sub(a.swept) > time.Second {
		a.swept = now
		for q, c := range a.calls {
			if c.last <= cur-admitSlices {
				delete(a.calls, q)
			}
		}
	}
	c := a.calls[p]
	if c == nil {
		return 0
	}
	from := max(sliceOf(t), cur-admitSlices+1)
	total := 0
	for _, sl := range c.slices {
		if sl.slice >= from && sl.slice <= cur {
			total += sl.n
		}
	}
	return total
}

// allowAgent takes a token of the bucket of the tenant's calls to agent, which holds across the
// instances as a tenant's does (its id is the tenant's and the agent's, which no tenant id is).
func (l *limiter) allowAgent(tenant, agent string, r Rate, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= limiterSweepEvery {
		l.sweep(now)
	}
	id := tenant + "/" + agent
	return l.take(l.share(l.tenants, id, id, false, r, now), now)
}

// tenantQueues returns the tenants' queues the hosts report (those of tenant only unless it is
// ""), with the caps that hold for them.
func (s *Server) tenantQueues(tenant string) []inspect.TenantQueue {
	tl := s.tenantLimits
	qs := tl.loads.Queues(tenant, maxQueuesShown, time.Now())
	for i, q := range qs {
		e := tl.cache.Limits(q.Tenant).Resolve(q.Agent, s.cfg.TenantLimits)
		qs[i].MaxQueued, qs[i].MaxConcurrent = e.MaxQueued, e.MaxConcurrent
	}
	return qs
}

// getTenantLimits serves GET /api/v1/admin/tenants/{tenantId}/limits to the tenant's admins and
// system admins: what was set for the tenant, and what holds.
func (s *Server) getTenantLimits(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	e, err := s.tenantLimits.store.Get(r.Context(), c.tenant)
	if err != nil && !errors.Is(err, tenantlimits.ErrNotFound) {
		s.storeFailed(w, "reading a tenant's limits", err)
		return
	}
	writeJSON(w, http.StatusOK, s.limitsRecord(c.tenant, e, err == nil))
}

// putTenantLimits serves PUT /api/v1/admin/tenants/{tenantId}/limits to system admins: the
// body replaces what was set for the tenant ({} goes back to the deployment's settings). It is
// answered 200 once every ingress instance applies it, 202 when one has not within the
// confirmation's time (it applies it once its watch catches up).
func (s *Server) putTenantLimits(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, systemTenantAccess)
	if !ok {
		return
	}
	var l tenantlimits.Limits
	if p := decodeAdminBody(w, r, &l); p != nil {
		problem.Write(w, *p)
		return
	}
	if err := l.Validate(); err != nil {
		problem.InvalidField.Write(w, err.Error())
		return
	}
	rev, err := s.tenantLimits.store.Put(r.Context(), c.tenant, l, c.key.ID)
	if err != nil {
		s.storeFailed(w, "writing a tenant's limits", err)
		return
	}
	status := http.StatusOK
	if !s.confirms.confirm(r.Context(), cacheState{Limits: rev}) {
		status = http.StatusAccepted
	}
	s.log.Info("tenant limits set", "tenant", c.tenant, "by", c.key.ID)
	e := tenantlimits.Entry{Limits: l, UpdatedAt: time.Now(), UpdatedBy: c.key.ID, Revision: rev}
	writeJSON(w, status, s.limitsRecord(c.tenant, e, !l.Empty()))
}

// limitsRecord is a tenant's limits as the API answers them: e as set (found: a record exists),
// and what holds with the configuration's values filled in.
func (s *Server) limitsRecord(tenant string, e tenantlimits.Entry, found bool) tenantlimits.Record {
	tl := s.tenantLimits
	l := e.Limits
	rates := tl.rates(tenant, l)
	q := tl.quotas
	var quota usage.Quota
	if q != nil {
		quota = q(tenant)
	}
	eff := tenantlimits.EffectiveLimits{
		Effective:    l.Resolve("", s.cfg.TenantLimits),
		KeyRate:      tenantlimits.Rate(rates.Key),
		WriteRate:    tenantlimits.Rate(rates.Write),
		ListenRate:   tenantlimits.Rate(rates.Listen),
		MaxBytes:     quota.Bytes,
		MaxInstances: quota.Instances,
	}
	eff.Rate = tenantlimits.Rate(rates.Tenant)
	if l.MaxBytes != nil {
		eff.MaxBytes = *l.MaxBytes
	}
	if l.MaxInstances != nil {
		eff.MaxInstances = *l.MaxInstances
	}
	for name := range l.Agents {
		if eff.Agents == nil {
			eff.Agents = map[string]tenantlimits.Effective{}
		}
		e := l.Resolve(name, s.cfg.TenantLimits)
		e.Rate = tenantlimits.Rate(Rate(e.Rate).withDefaults())
		eff.Agents[name] = e
	}
	rec := tenantlimits.Record{Tenant: tenant, Limits: l, Effective: eff}
	if found {
		at := timefmt.Of(e.UpdatedAt.UTC().Truncate(time.Millisecond))
		rec.UpdatedAt, rec.UpdatedBy = &at, e.UpdatedBy
	}
	return rec
}
