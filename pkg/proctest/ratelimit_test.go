package proctest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// Three ingress processes on one NATS hold a tenant's rate and a key's rate together: clients
// send 1,000 webhook calls a second for AGENTBUS_PROCESS_RATE_FOR (5 s by default; 20s for the
// figure docs/limits.md quotes) against a rate of 100 a second with bursts of 100, spread over
// the three, all to one of them, and moving from one to the next. The accepted rate after the
// first second (the burst) is within 10 % of the rate (20 % while the load moves); refusals
// are 429 rate-limited problems with Retry-After; a quiet tenant, and a quiet key of the busy
// key's tenant, sending 10 calls a second to the third ingress, get every call through.
func TestProcessesRateLimitAcrossIngresses(t *testing.T) {
	bins := needProcesses(t)
	runFor := 5 * time.Second
	if v := os.Getenv("AGENTBUS_PROCESS_RATE_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "AGENTBUS_PROCESS_RATE_FOR")
		runFor = d
	}
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	// Every tenant 100/s with bursts of 100, no limit per key; tenant keyed 100/s per key and no
	// tenant limit.
	sys := newSystem(t, bins, nats.URL,
		"AGENTBUS_TENANT_RATE_LIMIT=100", "AGENTBUS_TENANT_RATE_BURST=100",
		"AGENTBUS_RATE_LIMIT=0", "AGENTBUS_RATE_LIMIT_TENANTS=keyed=100:100",
		"AGENTBUS_TENANT_RATE_LIMIT_TENANTS=keyed=0,default=0")
	ingresses := []string{sys.ingress.URL, sys.addIngress("ingress-2").URL, sys.addIngress("ingress-3").URL}
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	ctx := proctest.Context(t, 10*time.Minute)

	keyOf := func(tenant string) string { return sys.tenantKey(ctx, tenant, "user") }
	quiet := keyOf("quiet")
	for _, tc := range []struct {
		name, tenant string
		keys         int // the busy load's keys, each sending its part
		via          func(i int, since time.Duration) int
		within       float64
		quietKey     bool // a quiet key of the same tenant, rather than a quiet tenant
	}{
		{name: "a tenant's rate, spread", tenant: "spread", keys: 2, via: roundRobin, within: 0.1},
		{name: "a key's rate, spread", tenant: "keyed", keys: 1, via: roundRobin, within: 0.1, quietKey: true},
		{name: "a tenant's rate, on one ingress", tenant: "skewed", keys: 2, via: func(int, time.Duration) int { return 0 }, within: 0.1},
		{name: "a tenant's rate, moving", tenant: "moving", keys: 2, via: movingEvery(runFor / 3), within: 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var busy []string
			for range tc.keys {
				busy = append(busy, keyOf(tc.tenant))
			}
			quietKey, quietTenant := quiet, "quiet"
			if tc.quietKey {
				quietKey, quietTenant = keyOf(tc.tenant), tc.tenant
			}
			var wg sync.WaitGroup
			var load, calm *rateLoad
			wg.Go(func() {
				load = sys.offerRate(ctx, ingresses, tc.tenant, busy, 1000, runFor, tc.via)
			})
			wg.Go(func() {
				calm = sys.offerRate(ctx, ingresses, quietTenant, []string{quietKey}, 10, runFor, func(int, time.Duration) int { return 2 })
			})
			wg.Wait()

			const rate = 100.0
			got := load.acceptedRate(time.Second, runFor)
			t.Logf("%s: rate %.0f/s, 1000/s offered for %v: %.1f/s accepted after the first second (error %+.1f %%), %d accepted in all (%.1f/s); answers %v; quiet %s: %d of %d accepted",
				tc.name, rate, runFor, got, 100*(got/rate-1), load.accepted(), float64(load.accepted())/runFor.Seconds(), load.statuses, map[bool]string{true: "key", false: "tenant"}[tc.quietKey], calm.accepted(), calm.sent)
			assert.InDelta(t, rate, got, rate*tc.within, "accepted rate")

			assert.Equal(t, load.sent, load.statuses[http.StatusOK]+load.statuses[http.StatusTooManyRequests], "answers other than 200 and 429: %v", load.statuses)
			assert.Equal(t, calm.sent, calm.accepted(), "the quiet calls on the third ingress: %v", calm.statuses)

			r := load.refusal
			require.Equal(t, http.StatusTooManyRequests, r.status, "a refusal")
			assert.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
			var p struct{ Type, Detail string }
			require.NoError(t, json.Unmarshal(r.body, &p), "%s", r.body)
			assert.Equal(t, "urn:agentbus:problem:rate-limited", p.Type)
			secs, err := strconv.Atoi(r.header.Get("Retry-After"))
			assert.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
			assert.GreaterOrEqual(t, secs, 1, "Retry-After")
		})
	}
}

func roundRobin(i int, _ time.Duration) int { return i % 3 }

// movingEvery sends every call to the first ingress for d, then to the second, and so on.
func movingEvery(d time.Duration) func(int, time.Duration) int {
	return func(_ int, since time.Duration) int { return int(since/d) % 3 }
}

// rateLoad is what an open load of webhook calls got.
type rateLoad struct {
	mu       sync.Mutex
	sent     int
	statuses map[int]int // 0: no answer
	// acceptedAt are the times the accepted calls were answered, since the load started.
	acceptedAt []time.Duration
	refusal    struct {
		status int
		header http.Header
		body   []byte
	}
}

func (l *rateLoad) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acceptedAt)
}

// acceptedRate is the calls a second accepted, answered from `from` to `to`.
func (l *rateLoad) acceptedRate(from, to time.Duration) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.acceptedAt {
		if at >= from && at < to {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

// offerRate sends rate webhook calls a second of Echo's echo for d, on a fixed schedule (an
// open loop), as tenant with its keys in turn, call i to the ingress via(i, time since the
// start) names, spread over 50 instances of Echo; and counts the answers.
func (s *system) offerRate(ctx context.Context, ingresses []string, tenant string, keys []string, rate float64, d time.Duration, via func(int, time.Duration) int) *rateLoad {
	l := &rateLoad{statuses: map[int]int{}}
	every := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		since := time.Duration(i) * every
		if since >= d {
			break
		}
		time.Sleep(time.Until(start.Add(since)))
		l.sent++
		u := ingresses[via(i, since)] + "/api/user/webhooks/" + url.PathEscape(fmt.Sprintf("%s:Echo:Supervisor Workflow:rate-%d", tenant, i%50)) +
			"/echo?" + url.Values{"apikey": {keys[i%len(keys)]}}.Encode()
		wg.Go(func() {
			status, h, b := s.post(ctx, u)
			answered := time.Since(start)
			l.mu.Lock()
			defer l.mu.Unlock()
			l.statuses[status]++
			switch status {
			case http.StatusOK:
				l.acceptedAt = append(l.acceptedAt, answered)
			case http.StatusTooManyRequests:
				if l.refusal.status == 0 {
					l.refusal.status, l.refusal.header, l.refusal.body = status, h, b
				}
			}
		})
	}
	wg.Wait()
	return l
}

// post sends an empty POST and returns the status (0 when there was no answer), headers and body.
func (s *system) post(ctx context.Context, u string) (int, http.Header, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return 0, nil, nil
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}
