package ingress

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/keys"
)

// Rate limits hold across every ingress instance together (docs/limits.md#across-ingress-instances).
// A call pays no NATS round trip for them: each instance keeps a token bucket per key and per
// tenant in memory, and sets its rate to the instance's share of the rate of all instances.
// Every demandEvery each instance tells the others (ratesharing.go) the demand it sees, the
// requests a second that arrive, of the keys and tenants that are busy on it: refused lately,
// asking for at least half an even share, or busy on another instance. Its share of a rate R
// is then, with d its own demand, D every instance's and n the instances present:
//
//   - D ≤ R: d + (R−D)/n, its demand and an even part of what is left, so that each instance
//     has room for a burst;
//   - D > R: R·d/D, at least minShare of an even share, so that a new burst on an instance
//     whose demand the others have not heard of yet is not starved;
//   - before it can have heard of the others (youngPeriods after its first request here, when
//     no instance spoke of it): R/n, since all of them may be starting at once.
//
// The shares of the instances add up to R, up to the age of the reports (at most one period
// behind) and the floor. Demand is an exponentially weighted rate of the requests with a time
// constant of demandEvery, longer for low rates (demandTokens), so that a rate of a few
// requests a minute is shared by a demand measured over a few of its requests.
//
// A report is bounded: at most maxDemandKeysPerTenant keys of one tenant and maxDemandEntries
// entries in all, so that one tenant's many busy keys cannot make the exchange expensive for
// the others. What a report leaves out, its sender and every receiver limit to an even share,
// which cannot let the instances together exceed the rate.

const (
	// demandEvery is how often the instances exchange their demand: a load that moves from one
	// instance to another is followed within about a period.
	demandEvery = 100 * time.Millisecond
	// demandForPeriods: a report counts until this instance has ticked this many times since it
	// arrived (1 s), so that late or lost reports do not drop their sender's demand. Counted in
	// this instance's own ticks, not in time, so that a stall of this process (no CPU for a
	// while, as when a machine is overloaded) does not age the others' reports: if it did, an
	// instance would come out of a stall longer than the horizon computing its share as if
	// alone, up to the whole rate (TestSharedRateThroughStalls). An instance that stops says so
	// at once; one that dies counts for this many ticks of the others after its last report.
	demandForPeriods = 10
	// youngPeriods: for this many periods after a key's or tenant's first request here, it takes
	// an even share unless another instance spoke of it: the others report a busy key within a
	// period of its first request there, and this instance takes the report in within another.
	youngPeriods = 2.5
	// idlePeriods: a key or tenant whose last request here was longer ago than this many time
	// constants of its demand is idle: its share is no longer computed nor reported.
	idlePeriods = 5
	// demandTokens: the time constant of a demand is at least the time this many tokens take at
	// the rate, so that a low rate's demand is measured over enough of its requests; and at most
	// maxDemandTau, so that a share idle for a few of them leaves memory.
	demandTokens = 10
	maxDemandTau = time.Minute
	// minShare is the least part of an even share an instance with demand gets when the
	// instances together ask for more than the rate.
	minShare = 0.1
	// busyShare: an instance reports a key or tenant that asks for at least this part of an
	// even share (or was refused, or is busy elsewhere). Those it does not report ask for less
	// than half the rate together, which needs no sharing.
	busyShare = 0.5
	// maxDemandEntries bounds the keys and tenants of one report, and maxDemandKeysPerTenant
	// the keys of one tenant in it.
	maxDemandEntries       = 512
	maxDemandKeysPerTenant = 16
)

// limiterSweepEvery is how often buckets that have refilled are dropped. A full bucket is what
// a new key gets, so dropping one loses nothing; keys idle for longer than the refill time cost
// no memory.
const limiterSweepEvery = time.Minute

// TenantRates are the rate limits of one tenant's calls, each across every ingress instance
// together.
type TenantRates struct {
	// Key is each of the tenant's keys' rate; the zero Rate means no limit per key.
	Key Rate
	// Tenant is the rate of all the tenant's keys together; the zero Rate means none.
	Tenant Rate
	// Write is the rate of the tenant's configuration writes (Config.TenantWriteRate), and
	// Listen that of the listen streams it opens (Config.TenantListenRate), all its keys
	// together; the zero Rate means none.
	Write, Listen Rate
}

func (r TenantRates) withDefaults() TenantRates {
	return TenantRates{Key: r.Key.withDefaults(), Tenant: r.Tenant.withDefaults(),
		Write: r.Write.withDefaults(), Listen: r.Listen.withDefaults()}
}

// valid reports whether r can be a rate: a burst of 0 or more and a rate that is a number.
func (r Rate) valid() bool {
	return r.Burst >= 0 && !math.IsNaN(r.PerSecond) && !math.IsInf(r.PerSecond, 1)
}

// limited reports whether r limits anything.
func (r Rate) limited() bool { return r.PerSecond > 0 }

// rateTable is the rates as configured, and as set at runtime per tenant.
type rateTable struct {
	key      Rate            // every key's, unless its tenant has its own
	keyOf    map[string]Rate // a tenant's keys'
	tenant   Rate            // every tenant's, all its keys together
	tenantOf map[string]Rate
	write    Rate // every tenant's configuration writes
	listen   Rate // every tenant's listen streams opened
	// set are the tenants' rates set at runtime (Server.SetTenantRates); they replace the
	// configured ones.
	set map[string]TenantRates
}

// of returns the rates of tenant's keys. A key of no tenant (the system-admin key) has no
// tenant rate.
func (t *rateTable) of(tenant string) TenantRates {
	if r, ok := t.set[tenant]; ok {
		return r
	}
	r := TenantRates{Key: t.key, Tenant: t.tenant, Write: t.write, Listen: t.listen}
	if kr, ok := t.keyOf[tenant]; ok {
		r.Key = kr
	}
	if tr, ok := t.tenantOf[tenant]; ok {
		r.Tenant = tr
	}
	if tenant == "" {
		r.Tenant, r.Write, r.Listen = Rate{}, Rate{}, Rate{}
	}
	return r
}

// any reports whether any rate limits calls (the key and tenant rates; the tenant's other buckets
// are allowTenant's).
func (t *rateTable) any() bool {
	if t.key.limited() || t.tenant.limited() {
		return true
	}
	for _, m := range []map[string]Rate{t.keyOf, t.tenantOf} {
		for _, r := range m {
			if r.limited() {
				return true
			}
		}
	}
	for _, r := range t.set {
		if r.Key.limited() || r.Tenant.limited() {
			return true
		}
	}
	return false
}

// limitScope says which limit refused a request.
type limitScope int

const (
	scopeKey limitScope = iota + 1
	scopeTenant
)

// limiter holds this instance's token bucket of each key and tenant with recent requests, and
// the demand the other instances reported. It runs no goroutine: the exchange (ratesharing.go)
// calls tick and received, and allow sweeps the buckets now and then.
type limiter struct {
	every time.Duration
	// limited is false while no rate limits anything: allow then takes no lock.
	limited atomic.Bool

	mu      sync.Mutex
	rates   rateTable
	keys    map[string]*share // by key id
	tenants map[string]*share // by tenant id
	// active are the shares with requests within idlePeriods time constants; tick computes and
	// reports them.
	active []*share
	// peers are the other instances' last reports, by instance.
	peers map[string]*peerDemand
	// ticks counts this instance's ticks: a report is as old as the ticks since it arrived.
	ticks uint64
	// n counts the instances: this one and the others present.
	n         int
	lastSweep time.Time
	// reported: the last report held demand, so the next is sent even when empty, to clear it.
	reported bool
}

// share is the token bucket of one key or tenant on this instance, and the demand it sees.
type share struct {
	id, tenant string
	isKey      bool
	// global is the rate of all instances together; rate and burst are this instance's share.
	global      Rate
	rate, burst float64
	tokens      float64
	filled      time.Time // when tokens was last brought up to date
	// demand is the exponentially weighted rate of requests here, as of demandAt, with time
	// constant tau seconds.
	demand   float64
	demandAt time.Time
	tau      float64
	first    time.Time // first request since the share was made
	last     time.Time // last request
	refused  time.Time // last refusal
	computed time.Time // when rate was last computed
	// omitted: busy, but left out of the last report; limited to an even share.
	omitted bool
	active  bool
}

// peerDemand is the last report of another instance, as received.
type peerDemand struct {
	tick    uint64 // the limiter's ticks when it arrived
	full    bool   // it left keys or tenants out: those may have demand there
	keys    map[string]float64
	tenants map[string]float64
	more    map[string]bool // tenants some of whose keys it left out
}

// rates is the rate table the configuration gives, with the rates' defaults filled in.
func (c *Config) rates() rateTable {
	return rateTable{key: c.RateLimit, keyOf: c.TenantRateLimits, tenant: c.TenantRateLimit,
		tenantOf: c.TenantRateLimitTenants, write: c.TenantWriteRate, listen: c.TenantListenRate}.withDefaults()
}

// withDefaults is t's configured rates with their defaults filled in; the rates set at runtime
// are left out.
func (t rateTable) withDefaults() rateTable {
	return rateTable{key: t.key.withDefaults(), keyOf: withDefaults(t.keyOf), tenant: t.tenant.withDefaults(),
		tenantOf: withDefaults(t.tenantOf), write: t.write.withDefaults(), listen: t.listen.withDefaults()}
}

func newLimiter(t rateTable, every time.Duration) *limiter {
	l := &limiter{every: every, keys: map[string]*share{}, tenants: map[string]*share{},
		peers: map[string]*peerDemand{}, n: 1}
	l.rates = t.withDefaults()
	l.rates.set = map[string]TenantRates{}
	l.limited.Store(l.rates.any())
	return l
}

func withDefaults(m map[string]Rate) map[string]Rate {
	out := make(map[string]Rate, len(m))
	for k, r := range m {
		out[k] = r.withDefaults()
	}
	return out
}

// setTenant sets tenant's rates, or, with nil, goes back to the configured ones. The buckets
// take the new rate at their next request.
func (l *limiter) setTenant(tenant string, r *TenantRates) error {
	if r != nil && (!r.Key.valid() || !r.Tenant.valid() || !r.Write.valid() || !r.Listen.valid()) {
		return fmt.Errorf("invalid rates of tenant %q", tenant)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r == nil {
		delete(l.rates.set, tenant)
	} else {
		l.rates.set[tenant] = r.withDefaults()
	}
	l.limited.Store(l.rates.any())
	return nil
}

// tenantRates returns tenant's rates as they are now.
func (l *limiter) tenantRates(tenant string) TenantRates {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rates.of(tenant)
}

// allow takes a token from the key's bucket and from its tenant's. When either has none it
// returns which, and how long until it will have one; a refused request takes no token.
func (l *limiter) allow(k keys.Key, now time.Time) (bool, time.Duration, limitScope) {
	if !l.limited.Load() {
		return true, 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= limiterSweepEvery {
		l.sweep(now)
	}
	r := l.rates.of(k.Tenant)
	var ks *share
	if r.Key.limited() {
		ks = l.share(l.keys, k.ID, k.Tenant, true, r.Key, now)
		if ok, wait := l.take(ks, now); !ok {
			return false, wait, scopeKey
		}
	}
	if r.Tenant.limited() {
		// A tenant's demand is what its keys' limits let through.
		ts := l.share(l.tenants, k.Tenant, k.Tenant, false, r.Tenant, now)
		if ok, wait := l.take(ts, now); !ok {
			if ks != nil {
				ks.giveBack()
			}
			return false, wait, scopeTenant
		}
	}
	return true, 0, 0
}

// tenantBucket is one of a tenant's buckets besides its request rate: a kind of call that costs
// the deployment more than most and has a rate of its own, all the tenant's keys together.
type tenantBucket struct {
	// share is the suffix of the id of its share among the tenants' (allowTenant): a tenant id
	// holds neither a slash nor a control character, and an agent's share (allowAgent) is the
	// tenant's id, a slash and the agent's name.
	share string
	rate  func(TenantRates) Rate
	// refused is the detail of the 429 past it.
	refused string
}

// The tenant's buckets: its configuration writes, and the listen streams it opens.
var (
	writesBucket = &tenantBucket{share: "\x1fwrites", rate: func(r TenantRates) Rate { return r.Write },
		refused: "too many configuration changes for this tenant (keys, remote agents, subscriptions)"}
	listensBucket = &tenantBucket{share: "\x1flistens", rate: func(r TenantRates) Rate { return r.Listen },
		refused: "too many listen streams opened for this tenant"}
)

// allowTenant takes a token of tenant's bucket b. When there is none it returns how long until
// there will be; a refused call takes no token.
func (l *limiter) allowTenant(tenant string, b *tenantBucket, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := b.rate(l.rates.of(tenant))
	if !r.limited() {
		return true, 0
	}
	if now.Sub(l.lastSweep) >= limiterSweepEvery {
		l.sweep(now)
	}
	id := tenant + b.share
	return l.take(l.share(l.tenants, id, id, false, r, now), now)
}

// chargeTenant counts n more of the tenant's tokens of b against it, after a request that took
// one (allowTenant) turned out to cost more: its tokens may go below zero, and its next requests
// of b wait until they are back. Nothing when b does not limit the tenant or n is below 1.
func (l *limiter) chargeTenant(tenant string, b *tenantBucket, n int, now time.Time) {
	if n < 1 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := b.rate(l.rates.of(tenant))
	if !r.limited() {
		return
	}
	id := tenant + b.share
	s := l.share(l.tenants, id, id, false, r, now)
	s.fill(now)
	s.tokens -= float64(n)
	s.decay(now)
	s.demand += float64(n-1) / s.tau // share counted one arrival
}

// share returns the share of id in m, made if missing, with a request counted: brought to
// global, and computed anew when it was idle.
func (l *limiter) share(m map[string]*share, id, tenant string, isKey bool, global Rate, now time.Time) *share {
	s, ok := m[id]
	if !ok {
		s = &share{id: id, tenant: tenant, isKey: isKey, first: now, filled: now, demandAt: now}
		m[id] = s
	}
	anew := !ok || !s.active || s.global != global
	if s.global != global {
		s.global = global
		s.tau = min(max(l.every.Seconds(), demandTokens/global.PerSecond), maxDemandTau.Seconds())
	}
	s.arrive(now)
	if anew {
		if !s.active {
			s.active = true
			l.active = append(l.active, s)
		}
		l.reshare(s, now)
		if !ok {
			s.tokens = s.burst
		}
	}
	return s
}

// take takes a token of s. A refusal computes its share anew (at most every quarter period):
// its own demand may have grown since the last report.
func (l *limiter) take(s *share, now time.Time) (bool, time.Duration) {
	s.fill(now)
	if s.tokens >= 1 {
		s.tokens--
		return true, 0
	}
	s.refused = now
	if now.Sub(s.computed) >= l.every/4 {
		l.reshare(s, now)
	}
	wait := time.Duration((1 - s.tokens) / s.rate * float64(time.Second))
	// A token at an even share: the shares move within a period, and a client told to wait
	// longer than that would wait for nothing.
	return false, min(wait, time.Duration(float64(l.n)/s.global.PerSecond*float64(time.Second)))
}

// arrive counts a request in the demand of s.
func (s *share) arrive(now time.Time) {
	s.decay(now)
	s.demand += 1 / s.tau
	s.last = now
}

// decay brings the demand of s to now.
func (s *share) decay(now time.Time) {
	if dt := now.Sub(s.demandAt).Seconds(); dt > 0 && s.tau > 0 {
		s.demand *= math.Exp(-dt / s.tau)
		s.demandAt = now
	}
}

// demandNow returns the demand of s at now.
func (s *share) demandNow(now time.Time) float64 {
	s.decay(now)
	return s.demand
}

// fill brings the tokens of s to now.
func (s *share) fill(now time.Time) {
	if dt := now.Sub(s.filled).Seconds(); dt > 0 {
		s.tokens = min(s.burst, s.tokens+s.rate*dt)
		s.filled = now
	}
}

// giveBack returns a token taken by a request another limit refused.
func (s *share) giveBack() { s.tokens = min(s.burst, s.tokens+1) }

// reshare sets the rate and burst of s to this instance's share (see the top of the file).
func (l *limiter) reshare(s *share, now time.Time) {
	global, burst := s.global.PerSecond, float64(s.global.Burst)
	n := float64(l.n)
	even := global / n
	d := s.demandNow(now)
	others, heard, unsure := l.othersDemand(s)
	var r float64
	switch total := d + others; {
	case !heard && now.Sub(s.first) < time.Duration(youngPeriods*float64(l.every)):
		r = even
	case total <= global:
		r = d + (global-total)/n
	default:
		r = max(global*d/total, minShare*even)
	}
	if unsure || s.omitted {
		r = min(r, even)
	}
	r = min(max(r, minShare*even), global)
	s.fill(now)
	s.rate, s.burst = r, max(1, burst*r/global)
	s.tokens = min(s.tokens, s.burst)
	s.computed = now
}

// othersDemand returns the demand the other instances reported for s, whether any reported it,
// and whether one may have left it out of its report.
func (l *limiter) othersDemand(s *share) (sum float64, heard, unsure bool) {
	for _, p := range l.peers {
		if !l.fresh(p) {
			continue
		}
		m := p.tenants
		if s.isKey {
			m = p.keys
		}
		if d, ok := m[s.id]; ok {
			sum += d
			heard = true
		} else if p.full || (s.isKey && p.more[s.tenant]) {
			unsure = true
		}
	}
	return sum, heard, unsure
}

// busy reports whether s is to be reported: it has demand, and was refused lately, asks for at
// least busyShare of an even share, or another instance reported it.
func (l *limiter) busy(s *share, d float64, now time.Time) bool {
	if now.Sub(s.last) > time.Duration(idlePeriods*s.tau*float64(time.Second)) {
		return false
	}
	if now.Sub(s.refused) <= 2*l.every || d >= busyShare*s.global.PerSecond/float64(l.n) {
		return true
	}
	_, heard, _ := l.othersDemand(s)
	return heard
}

// sweep drops the idle shares whose buckets have refilled. l.mu is held.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for _, m := range []map[string]*share{l.keys, l.tenants} {
		for id, s := range m {
			if s.active {
				continue
			}
			if s.fill(now); s.tokens >= s.burst {
				delete(m, id)
			}
		}
	}
}

// demandReport is what an instance tells the others every demandEvery, on
// subject.IngressDemand: the demand it sees of its busy keys and tenants.
type demandReport struct {
	V        int    `json:"v"`
	Instance string `json:"instance"`
	// Full: keys or tenants were left out (maxDemandEntries).
	Full    bool           `json:"full,omitempty"`
	Tenants []tenantDemand `json:"tenants"`
}

// tenantDemand is the demand of one tenant and of its keys, in requests a second.
type tenantDemand struct {
	Tenant string `json:"t"`
	// Demand is the tenant's, all its keys together; zero when it is not reported.
	Demand demandValue            `json:"d,omitempty"`
	Keys   map[string]demandValue `json:"k,omitempty"`
	// More: some of the tenant's keys were left out (maxDemandKeysPerTenant).
	More bool `json:"more,omitempty"`
}

// demandValue is a demand, sent with four significant digits.
type demandValue float64

func (v demandValue) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, "%.4g", float64(v)), nil
}

// demandVersion is the version of the demand reports; an instance ignores reports of another.
const demandVersion = 1

// tick computes anew the shares of the keys and tenants with recent requests, n being the
// instances present (this one included), and returns the report to send the others: nil when
// there is nothing to send.
func (l *limiter) tick(now time.Time, present int) *demandReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ticks++
	for id, p := range l.peers {
		if !l.fresh(p) {
			delete(l.peers, id)
		}
	}
	l.n = max(present, 1+len(l.peers))

	// The busy shares, by tenant.
	groups := map[string]*demandGroup{}
	active := l.active[:0]
	for _, s := range l.active {
		d := s.demandNow(now)
		if now.Sub(s.last) > time.Duration(idlePeriods*s.tau*float64(time.Second)) {
			s.active, s.omitted = false, false
			continue
		}
		active = append(active, s)
		s.omitted = false
		if !l.busy(s, d, now) {
			continue
		}
		g := groups[s.tenant]
		if g == nil {
			g = &demandGroup{tenant: s.tenant}
			groups[s.tenant] = g
		}
		g.add(s, d)
	}
	clear(l.active[len(active):])
	l.active = active

	rep := l.report(groups)
	for _, s := range l.active {
		l.reshare(s, now)
	}
	if len(rep.Tenants) == 0 {
		if !l.reported {
			return nil
		}
		l.reported = false
		return rep
	}
	l.reported = true
	return rep
}

// demandGroup is the busy shares of one tenant.
type demandGroup struct {
	tenant   string
	t        *share
	td       float64
	keys     []busyEntry
	pressure float64 // the largest demand of its shares, as a part of their rates
}

type busyEntry struct {
	s *share
	d float64
}

func (g *demandGroup) add(s *share, d float64) {
	g.pressure = max(g.pressure, d/s.global.PerSecond)
	if s.isKey {
		g.keys = append(g.keys, busyEntry{s, d})
	} else {
		g.t, g.td = s, d
	}
}

// report builds the report of the busy shares, the most pressed tenants and keys first, within
// maxDemandEntries and maxDemandKeysPerTenant; the shares left out are marked omitted.
func (l *limiter) report(groups map[string]*demandGroup) *demandReport {
	rep := &demandReport{V: demandVersion, Tenants: []tenantDemand{}}
	order := make([]*demandGroup, 0, len(groups))
	for _, g := range groups {
		order = append(order, g)
	}
	slices.SortFunc(order, func(a, b *demandGroup) int {
		return cmp.Or(cmp.Compare(b.pressure, a.pressure), cmp.Compare(a.tenant, b.tenant))
	})
	entries := 0
	for _, g := range order {
		slices.SortFunc(g.keys, func(a, b busyEntry) int {
			return cmp.Or(cmp.Compare(b.d/b.s.global.PerSecond, a.d/a.s.global.PerSecond), cmp.Compare(a.s.id, b.s.id))
		})
		kept := g.keys[:min(len(g.keys), maxDemandKeysPerTenant)]
		need := len(kept)
		if g.t != nil {
			need++
		}
		if entries+need > maxDemandEntries {
			rep.Full = true
			if g.t != nil {
				g.t.omitted = true
			}
			for _, k := range g.keys {
				k.s.omitted = true
			}
			continue
		}
		entries += need
		td := tenantDemand{Tenant: g.tenant}
		if g.t != nil {
			td.Demand = demandValue(g.td)
		}
		if len(kept) > 0 {
			td.Keys = make(map[string]demandValue, len(kept))
			for _, k := range kept {
				td.Keys[k.s.id] = demandValue(k.d)
			}
		}
		for _, k := range g.keys[len(kept):] {
			k.s.omitted = true
			td.More = true
		}
		rep.Tenants = append(rep.Tenants, td)
	}
	return rep
}

// errBadReport: a report that does not hold what a report holds.
var errBadReport = errors.New("malformed demand report")

// fresh reports whether a report still counts (demandForPeriods).
func (l *limiter) fresh(p *peerDemand) bool { return l.ticks-p.tick <= demandForPeriods }

// received takes in another instance's report.
func (l *limiter) received(rep demandReport) error {
	if rep.V != demandVersion || rep.Instance == "" || len(rep.Tenants) > maxDemandEntries {
		return errBadReport
	}
	p := &peerDemand{full: rep.Full, keys: map[string]float64{}, tenants: map[string]float64{}, more: map[string]bool{}}
	entries := 0
	for _, td := range rep.Tenants {
		if entries += len(td.Keys); entries > maxDemandEntries {
			return errBadReport
		}
		if d := float64(td.Demand); d > 0 && !math.IsInf(d, 0) {
			p.tenants[td.Tenant] = d
		}
		for id, v := range td.Keys {
			if d := float64(v); d > 0 && !math.IsInf(d, 0) {
				p.keys[id] = d
			}
		}
		if td.More {
			p.more[td.Tenant] = true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p.tick = l.ticks
	l.peers[rep.Instance] = p
	return nil
}
