package ingress

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/keys"
)

// simCluster is several limiters, as several ingress instances hold them, on a fake clock: each
// ticks every period at its own phase, and its reports reach the others after latency, as
// rateSharing would carry them over NATS. Requests arrive as a Poisson process from a seeded
// source, so that a run is the same every time.
type simCluster struct {
	t       *testing.T
	every   time.Duration
	latency time.Duration
	now     time.Time
	lims    []*limiter
	next    []time.Time // each instance's next tick
	queue   []simReport
	rnd     *rand.Rand
	// largest is the largest report sent, in bytes of JSON.
	largest int
	// stalled, when set, tells the times at which no instance ticks and no report is taken in,
	// as when the processes get no CPU; requests still arrive. After a stall each instance
	// ticks once, as a time.Ticker that missed ticks does.
	stalled func(now time.Time) bool
	// dead, when set, tells whether an instance has died by now: it ticks no more and sends
	// nothing, not even the empty report of an instance that stops.
	dead func(i int, now time.Time) bool
}

type simReport struct {
	due  time.Time
	from int
	rep  demandReport
}

func newSimCluster(t *testing.T, n int, rates rateTable) *simCluster {
	c := &simCluster{t: t, every: demandEvery, latency: 2 * time.Millisecond,
		now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2))}
	for i := range n {
		c.lims = append(c.lims, newLimiter(rates, c.every))
		// Phases spread over the period, as instances started at different times tick.
		c.next = append(c.next, c.now.Add(time.Duration(i)*c.every/time.Duration(n)+13*time.Millisecond))
	}
	for _, l := range c.lims {
		l.tick(c.now, n)
	}
	return c
}

// step moves the clock by d: reports due are delivered, and instances due tick and send.
func (c *simCluster) step(d time.Duration) {
	c.now = c.now.Add(d)
	if c.stalled != nil && c.stalled(c.now) {
		return
	}
	for i := range c.next {
		for c.now.Sub(c.next[i]) >= c.every {
			c.next[i] = c.next[i].Add(c.every)
		}
	}
	kept := c.queue[:0]
	for _, r := range c.queue {
		if r.due.After(c.now) {
			kept = append(kept, r)
			continue
		}
		for i, l := range c.lims {
			if i != r.from {
				require.NoError(c.t, l.received(r.rep))
			}
		}
	}
	c.queue = kept
	for i, l := range c.lims {
		if c.dead != nil && c.dead(i, c.now) {
			continue
		}
		for !c.next[i].After(c.now) {
			c.next[i] = c.next[i].Add(c.every)
			rep := l.tick(c.now, len(c.lims))
			if rep == nil {
				continue
			}
			rep.Instance = fmt.Sprint("sim-", i)
			// Through JSON, as on the wire.
			b, err := json.Marshal(rep)
			require.NoError(c.t, err)
			c.largest = max(c.largest, len(b))
			var got demandReport
			require.NoError(c.t, json.Unmarshal(b, &got))
			c.queue = append(c.queue, simReport{due: c.now.Add(c.latency), from: i, rep: got})
		}
	}
}

// simLoad is one stream of requests: rate a second with key, sent to instance at(t), t being
// the time since the run started.
type simLoad struct {
	key  keys.Key
	rate float64
	at   func(t time.Duration) int
}

// simCount counts one load's answers.
type simCount struct {
	sent, accepted int
	// acceptedBy counts the accepted requests by second of the run.
	acceptedBy []int
	retryAfter time.Duration // the longest wait a refusal gave
}

// run sends the loads for d in steps of 1 ms and counts their answers.
func (c *simCluster) run(d time.Duration, loads ...simLoad) []*simCount {
	counts := make([]*simCount, len(loads))
	for i := range counts {
		counts[i] = &simCount{acceptedBy: make([]int, int(d/time.Second)+1)}
	}
	const dt = time.Millisecond
	for t := time.Duration(0); t < d; t += dt {
		c.step(dt)
		for i, ld := range loads {
			for range c.poisson(ld.rate * dt.Seconds()) {
				counts[i].sent++
				ok, wait, _ := c.lims[ld.at(t)].allow(ld.key, c.now)
				if ok {
					counts[i].accepted++
					counts[i].acceptedBy[t/time.Second]++
				}
				counts[i].retryAfter = max(counts[i].retryAfter, wait)
			}
		}
	}
	return counts
}

// poisson draws a Poisson number with mean m (small).
func (c *simCluster) poisson(m float64) int {
	n, p := 0, c.rnd.Float64()
	for limit := math.Exp(-m); p > limit; n++ {
		p *= c.rnd.Float64()
	}
	return n
}

// rateFrom returns the accepted rate of a count from second from to the end.
func (sc *simCount) rateFrom(from int) float64 {
	n := 0
	for _, a := range sc.acceptedBy[from:] {
		n += a
	}
	return float64(n) / float64(len(sc.acceptedBy)-1-from)
}

// spread sends request after request to instance after instance.
func spread(n int) func(time.Duration) int {
	i := 0
	return func(time.Duration) int { i = (i + 1) % n; return i }
}

// on sends every request to one instance.
func on(i int) func(time.Duration) int { return func(time.Duration) int { return i } }

// moving sends every request to instance 0 for every, then to instance 1, and so on.
func moving(n int, every time.Duration) func(time.Duration) int {
	return func(t time.Duration) int { return int(t/every) % n }
}

var (
	acmeKey  = keys.Key{ID: "key-acme-1", Tenant: "acme"}
	acmeKey2 = keys.Key{ID: "key-acme-2", Tenant: "acme"}
	quietKey = keys.Key{ID: "key-quiet", Tenant: "quiet"}
)

// TestSharedRateError: three instances on a fake clock, a rate of 100/s and bursts of 100, and
// 1,000 requests a second for 20 s: spread over the three, all on one, all on one moving every
// 5 s. The accepted rate after the first second (the burst) stays within 10 % of the rate, for
// a key's rate and for a tenant's; a quiet key and a quiet tenant on another instance get every
// request through.
func TestSharedRateError(t *testing.T) {
	const dur = 21 * time.Second
	for _, scope := range []string{"key", "tenant"} {
		rates := rateTable{key: Rate{PerSecond: 100, Burst: 100}}
		flood := acmeKey
		if scope == "tenant" {
			// The tenant's two keys have no limit of their own; the tenant has 100/s.
			rates = rateTable{keyOf: map[string]Rate{"acme": {}}, tenant: Rate{PerSecond: 100, Burst: 100}}
		}
		for _, tc := range []struct {
			name string
			at   func(time.Duration) int
		}{
			{name: "even", at: spread(3)},
			{name: "skew", at: on(0)},
			{name: "moving", at: moving(3, 5*time.Second)},
		} {
			t.Run(scope+" "+tc.name, func(t *testing.T) {
				c := newSimCluster(t, 3, rates)
				loads := []simLoad{
					{key: flood, rate: 1000, at: tc.at},
					{key: quietKey, rate: 10, at: on(2)},
				}
				if scope == "tenant" {
					loads = append(loads, simLoad{key: acmeKey2, rate: 200, at: spread(3)})
				} else {
					// Another key of the tenant, quiet, on another instance.
					loads = append(loads, simLoad{key: acmeKey2, rate: 10, at: on(1)})
				}
				counts := c.run(dur, loads...)
				accepted := counts[0].rateFrom(1)
				if scope == "tenant" {
					accepted += counts[2].rateFrom(1)
				}
				t.Logf("%s rate 100/s, 1000/s offered (%s): accepted %.1f/s after the first second, error %+.1f %%; in the first second %d; largest report %d bytes",
					scope, tc.name, accepted, accepted-100, counts[0].acceptedBy[0], c.largest)
				assert.InDelta(t, 100, accepted, 10, "accepted rate")
				assert.Equal(t, counts[1].sent, counts[1].accepted, "the quiet tenant's requests")
				if scope == "key" {
					assert.Equal(t, counts[2].sent, counts[2].accepted, "the tenant's other, quiet key")
				}
				assert.LessOrEqual(t, counts[0].retryAfter, 3*time.Second/100, "a refusal's wait: a token at an even share at most")
			})
		}
	}
}

// TestSharedRateThroughStalls: the instances' reports come late when their processes get no
// CPU for a while. Three instances, a rate of 100/s, 1,000 requests a second spread over them
// for 20 s, and every instance stalled (no tick, no report taken in) for stall of each second,
// or of each cycle of stall and 500 ms for a stall of a second or more (longer than a report
// counts in time): the accepted rate stays within 10 % of the rate.
func TestSharedRateThroughStalls(t *testing.T) {
	for _, stall := range []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second} {
		t.Run(stall.String(), func(t *testing.T) {
			c := newSimCluster(t, 3, rateTable{key: Rate{PerSecond: 100, Burst: 100}})
			start := c.now
			cycle := max(time.Second, stall+500*time.Millisecond)
			c.stalled = func(now time.Time) bool { return now.Sub(start)%cycle >= cycle-stall }
			counts := c.run(21*time.Second, simLoad{key: acmeKey, rate: 1000, at: spread(3)})
			got := counts[0].rateFrom(1)
			t.Logf("rate 100/s, 1000/s offered, stalled %v of each %v: accepted %.1f/s", stall, cycle, got)
			assert.InDelta(t, 100, got, 10, "accepted rate")
		})
	}
}

// TestSharedRateAfterAnInstanceDies: of three instances sharing a rate of 100/s under 1,000
// requests a second, one dies at 5 s and its load goes to the other two. Its last report counts
// for demandForPeriods more: the two take its part of the rate from then on, and the accepted
// rate is back within 10 % of the rate in the second after that.
func TestSharedRateAfterAnInstanceDies(t *testing.T) {
	const dies = 5 * time.Second
	c := newSimCluster(t, 3, rateTable{key: Rate{PerSecond: 100, Burst: 100}})
	start := c.now
	c.dead = func(i int, now time.Time) bool { return i == 2 && now.Sub(start) >= dies }
	even, survivors := spread(3), spread(2)
	counts := c.run(11*time.Second, simLoad{key: acmeKey, rate: 1000, at: func(t time.Duration) int {
		if t >= dies {
			return survivors(t)
		}
		return even(t)
	}})
	by := counts[0].acceptedBy
	t.Logf("accepted each second: %v", by[:11])
	assert.InDelta(t, 100, by[4], 10, "before")
	assert.GreaterOrEqual(t, by[5], 60, "in the second it died: the survivors keep their parts and take its part after 1 s")
	for s := 6; s < 11; s++ {
		assert.InDelta(t, 100, by[s], 10, "second %d", s)
	}
}

// TestSharedRateLow: a rate of a few requests a second is shared too; its demand is measured
// over longer.
func TestSharedRateLow(t *testing.T) {
	c := newSimCluster(t, 3, rateTable{key: Rate{PerSecond: 2, Burst: 2}})
	counts := c.run(121*time.Second, simLoad{key: acmeKey, rate: 20, at: spread(3)})
	got := counts[0].rateFrom(1)
	t.Logf("rate 2/s, 20/s offered, spread: accepted %.2f/s", got)
	assert.InDelta(t, 2, got, 0.2)
	c = newSimCluster(t, 3, rateTable{key: Rate{PerSecond: 2, Burst: 2}})
	counts = c.run(121*time.Second, simLoad{key: acmeKey, rate: 20, at: on(1)})
	got = counts[0].rateFrom(1)
	t.Logf("rate 2/s, 20/s offered, on one instance: accepted %.2f/s", got)
	assert.InDelta(t, 2, got, 0.2)
}

// TestSharedRateOneInstance: alone, an instance gives a key its whole rate and burst, as a
// single bucket would.
func TestSharedRateOneInstance(t *testing.T) {
	c := newSimCluster(t, 1, rateTable{key: Rate{PerSecond: 0.2, Burst: 3}})
	for i := range 3 {
		ok, _, _ := c.lims[0].allow(acmeKey, c.now)
		require.True(t, ok, "request %d within the burst", i+1)
	}
	ok, wait, scope := c.lims[0].allow(acmeKey, c.now)
	require.False(t, ok)
	assert.Equal(t, scopeKey, scope)
	assert.InDelta(t, 5*time.Second, wait, float64(time.Millisecond), "a token at 0.2/s")
}

// TestSharedRateReportBounds: a tenant with many busy keys fills at most
// maxDemandKeysPerTenant entries of a report; the keys left out are held to an even share by
// every instance, so that the rate still holds, and another tenant's key is still reported.
func TestSharedRateReportBounds(t *testing.T) {
	c := newSimCluster(t, 3, rateTable{key: Rate{PerSecond: 10, Burst: 10}})
	var loads []simLoad
	for i := range 40 {
		loads = append(loads, simLoad{key: keys.Key{ID: fmt.Sprintf("many-%02d", i), Tenant: "many"}, rate: 20, at: spread(3)})
	}
	loads = append(loads, simLoad{key: quietKey, rate: 30, at: on(0)})
	counts := c.run(11*time.Second, loads...)

	rep := c.lims[0].tick(c.now, 3)
	require.NotNil(t, rep)
	perTenant := map[string]int{}
	for _, td := range rep.Tenants {
		perTenant[td.Tenant] = len(td.Keys)
		if td.Tenant == "many" {
			assert.True(t, td.More, "the report says keys of tenant many were left out")
		}
	}
	assert.Equal(t, maxDemandKeysPerTenant, perTenant["many"], "keys of tenant many in a report")
	assert.Equal(t, 1, perTenant["quiet"], "the other tenant's busy key is reported")
	t.Logf("largest report: %d bytes", c.largest)
	for i := range 40 {
		got := counts[i].rateFrom(1)
		assert.LessOrEqual(t, got, 11.0, "key many-%02d: accepted %.1f/s of a rate of 10/s", i, got)
		assert.GreaterOrEqual(t, got, 9.0, "key many-%02d: accepted %.1f/s of a rate of 10/s, spread evenly", i, got)
	}
	q := counts[40].rateFrom(1)
	assert.InDelta(t, 10, q, 1, "the other tenant's key, on one instance: accepted %.1f/s", q)
}

// TestSharedRateChangesAtRuntime: a tenant's rates set while it is busy hold within a few
// periods on every instance, and going back to the configured ones does too.
func TestSharedRateChangesAtRuntime(t *testing.T) {
	c := newSimCluster(t, 3, rateTable{tenant: Rate{PerSecond: 100, Burst: 100}})
	load := simLoad{key: acmeKey, rate: 1000, at: spread(3)}
	c.run(3*time.Second, load)
	for _, l := range c.lims {
		require.NoError(t, l.setTenant("acme", &TenantRates{Tenant: Rate{PerSecond: 40, Burst: 40}}))
	}
	counts := c.run(11*time.Second, load)
	got := counts[0].rateFrom(1)
	t.Logf("tenant rate set to 40/s at runtime: accepted %.1f/s", got)
	assert.InDelta(t, 40, got, 4)
	assert.Equal(t, TenantRates{Tenant: Rate{PerSecond: 40, Burst: 40}}, c.lims[0].tenantRates("acme"))

	for _, l := range c.lims {
		require.NoError(t, l.setTenant("acme", nil))
	}
	counts = c.run(11*time.Second, load)
	got = counts[0].rateFrom(1)
	t.Logf("tenant rate back to the configured 100/s: accepted %.1f/s", got)
	assert.InDelta(t, 100, got, 10)
	assert.Error(t, c.lims[0].setTenant("acme", &TenantRates{Key: Rate{Burst: -1}}))
}

// TestSharedRateIdle: keys and tenants below their rates are not reported, so that an idle
// deployment exchanges nothing.
func TestSharedRateIdle(t *testing.T) {
	c := newSimCluster(t, 3, rateTable{key: Rate{PerSecond: 100}, tenant: Rate{PerSecond: 1000}})
	c.run(5*time.Second, simLoad{key: acmeKey, rate: 5, at: spread(3)}, simLoad{key: quietKey, rate: 5, at: spread(3)})
	for i, l := range c.lims {
		assert.Nil(t, l.tick(c.now, 3), "instance %d reports", i)
	}
	assert.Zero(t, c.largest, "nothing was reported")
	assert.False(t, strings.Contains(fmt.Sprint(c.queue), "acme"))
}

// BenchmarkLimiterAllow is what the rate limits cost a call that they let through: a key's and
// its tenant's bucket, both set far above the load, from every CPU at once.
func BenchmarkLimiterAllow(b *testing.B) {
	l := newLimiter(rateTable{key: Rate{PerSecond: 1e9}, tenant: Rate{PerSecond: 1e9}}, demandEvery)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if ok, _, _ := l.allow(acmeKey, time.Now()); !ok {
				b.Fatal("refused")
			}
		}
	})
}
