package ingress_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stack"
)

// offered is what a load of requests got: the accepted ones by when they were sent,
// the other answers, and one refusal as it came.
type offered struct {
	mu    sync.Mutex
	start time.Time
	sent  int
	// accepted holds when each accepted request was sent, after the start, and answered when
	// its answer came.
	accepted, answered []time.Duration
	other              map[int]int
	refusal            struct {
		status int
		header http.Header
		body   []byte
	}
}

// acceptedRates is the accepted requests of loads a second of the time from `from` after their
// start to the last accepted answer: counting those sent from then (sent), and those answered
// from then (answered). On a loaded machine the ingresses may answer the requests sent in 5 s
// over 15 s, admitting them as they get to them, and a token bucket then lets through 15 s of
// its rate: the time until the last answer is the time in which they were admitted. The
// requests sent from `from` were admitted in that time, so sent is at most the rate and a burst
// more; but some sent before it were too, and answered counts them, so it is at least what
// the buckets let through then (both are the same on an idle machine).
func acceptedRates(loads []*offered, from time.Duration) (sent, answered float64) {
	var nSent, nAnswered int
	last := from
	for _, o := range loads {
		o.mu.Lock()
		for i, at := range o.accepted {
			if at >= from {
				nSent++
			}
			if o.answered[i] >= from {
				nAnswered++
				last = max(last, o.answered[i])
			}
		}
		o.mu.Unlock()
	}
	if last <= from {
		return 0, 0
	}
	return float64(nSent) / (last - from).Seconds(), float64(nAnswered) / (last - from).Seconds()
}

// offer sends GET /api/user/agents with key at rate a second for d, request i to bases[i %
// len(bases)], and counts the answers: 200 is accepted, 429 refused.
func offer(t *testing.T, bases []string, key string, rate float64, d time.Duration) *offered {
	t.Helper()
	o := &offered{start: time.Now(), other: map[int]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	every := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		due := o.start.Add(time.Duration(i) * every)
		if due.Sub(o.start) >= d {
			break
		}
		time.Sleep(time.Until(due))
		o.sent++
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, bases[i%len(bases)]+"/api/user/agents", nil)
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+key)
			sentAt := time.Since(o.start)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				o.mu.Lock()
				o.other[0]++
				o.mu.Unlock()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			o.mu.Lock()
			defer o.mu.Unlock()
			switch resp.StatusCode {
			case http.StatusOK:
				o.accepted = append(o.accepted, sentAt)
				o.answered = append(o.answered, time.Since(o.start))
			case http.StatusTooManyRequests:
				if o.refusal.status == 0 {
					o.refusal.status, o.refusal.header, o.refusal.body = resp.StatusCode, resp.Header, b
				}
			default:
				o.other[resp.StatusCode]++
			}
		})
	}
	wg.Wait()
	return o
}

// TestRateLimitAcrossInstances: three ingress instances on one NATS hold a key's rate and a
// tenant's rate together, where each alone would let through its own: 150 requests a second
// spread over the three, against a rate of 20 a second (bursts of 20), are accepted at about 20 a
// second, by the time the answers came.
// Refusals are 429 rate-limited with Retry-After; a quiet key of the same tenant and a quiet
// tenant, on another instance, get every request through.
func TestRateLimitAcrossInstances(t *testing.T) {
	cfg := ingress.Config{
		TenantRateLimits:       map[string]ingress.Rate{"keyed": {PerSecond: 20, Burst: 20}},
		TenantRateLimitTenants: map[string]ingress.Rate{"acme": {PerSecond: 20, Burst: 20}, "quiet": {PerSecond: 20, Burst: 20}},
	}
	s := startStack(t, stack.Config{Ingress: cfg}, "default", "keyed", "acme", "quiet")
	second, third := startIngress(t, s.Stack, cfg), startIngress(t, s.Stack, cfg)
	bases := []string{s.URL, second.URL, third.URL}
	require.Eventually(t, func() bool {
		return len(s.Ingress.PresentIngresses()) == 2 && len(second.PresentIngresses()) == 2 && len(third.PresentIngresses()) == 2
	}, 5*time.Second, 10*time.Millisecond, "the instances never heard of each other")
	keyedQuiet := createKey(t, s.Stack, "keyed", s.keys["keyed"], "quiet", "user").Key
	acmeSecond := createKey(t, s.Stack, "acme", s.keys["acme"], "second", "user").Key

	const (
		rate    = 20.0
		load    = 150.0
		burst   = 20.0
		runFor  = 6 * time.Second
		measure = time.Second // after the burst
	)
	for _, tc := range []struct {
		name   string
		keys   []string // the busy load's keys, each sending load/len(keys)
		quiet  string   // a key that sends little, on the third instance
		detail string
	}{
		{name: "a key's rate", keys: []string{s.keys["keyed"]}, quiet: keyedQuiet, detail: "too many requests with this API key"},
		{name: "a tenant's rate", keys: []string{s.keys["acme"], acmeSecond}, quiet: s.keys["quiet"], detail: "too many requests for this tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wg sync.WaitGroup
			loads := make([]*offered, len(tc.keys))
			for i, key := range tc.keys {
				wg.Go(func() { loads[i] = offer(t, bases, key, load/float64(len(tc.keys)), runFor) })
			}
			var quiet *offered
			wg.Go(func() { quiet = offer(t, bases[2:], tc.quiet, 5, runFor) })
			wg.Wait()

			for _, o := range loads {
				assert.Empty(t, o.other, "answers other than 200 and 429")
			}
			got, answered := acceptedRates(loads, measure)
			t.Logf("%s of %.0f/s, %.0f/s offered over three instances: %.1f/s accepted after the first second (%.1f/s answered then)", tc.name, rate, load, got, answered)
			// A token bucket lets through its rate and, over any time, at most a burst more: on
			// a busy machine the clients' requests come in bunches after pauses, and a pause
			// refills the buckets.
			window := (runFor - measure).Seconds()
			assert.GreaterOrEqual(t, answered, rate*0.8, "accepted rate, of the requests answered after the first second")
			assert.LessOrEqual(t, got, rate*1.25+burst/window, "accepted rate, of the requests sent after the first second") // 3 instances each alone: 60/s

			r := loads[0].refusal
			wantRateLimited(t, r.status, r.header, r.body, 1)
			assert.Contains(t, decode(t, r.body)["detail"], tc.detail)
			assert.Equal(t, quiet.sent, len(quiet.accepted), "the quiet key's requests, on the third instance: %v", quiet.other)
		})
	}

	t.Run("rates set at runtime", func(t *testing.T) {
		for _, in := range []*ingress.Server{s.Ingress, second.Server, third.Server} {
			require.NoError(t, in.SetTenantRates("quiet", ingress.TenantRates{Tenant: ingress.Rate{PerSecond: 0.01, Burst: 1}}))
		}
		// Each instance's share of a burst of 1 is one request.
		status, _, b := do(t, http.MethodGet, third.URL+"/api/user/agents", s.keys["quiet"], nil)
		require.Equal(t, http.StatusOK, status, "%s", b)
		status, h, b := do(t, http.MethodGet, third.URL+"/api/user/agents", s.keys["quiet"], nil)
		wantRateLimited(t, status, h, b, 300)
		for _, in := range []*ingress.Server{s.Ingress, second.Server, third.Server} {
			in.ResetTenantRates("quiet")
			assert.Equal(t, ingress.Rate{PerSecond: 20, Burst: 20}, in.TenantRates("quiet").Tenant)
		}
	})
}
