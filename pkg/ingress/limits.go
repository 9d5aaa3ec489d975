package ingress

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
)

// Rate is a token bucket: PerSecond requests a second on average, and up to Burst at once, of
// every ingress instance together (ratelimit.go).
type Rate struct {
	// PerSecond is the refill rate. Zero or less means no limit.
	PerSecond float64
	// Burst is the bucket size. Zero means twice PerSecond, at least 1.
	Burst int
}

func (r Rate) withDefaults() Rate {
	if r.PerSecond > 0 && r.Burst <= 0 {
		r.Burst = max(1, int(math.Ceil(2*r.PerSecond)))
	}
	return r
}

// Defaults of the limits.
const (
	DefaultMaxWaitingPerTenant = 1000
	DefaultReadHeaderTimeout   = 10 * time.Second
)

// limit applies the key's rate limit and its tenant's; over either, the answer is a 429 problem.
func (s *Server) limit(k keys.Key) *problem.Problem {
	ok, wait, scope := s.limits.allow(k, time.Now())
	if ok {
		return nil
	}
	what := "with this API key"
	if scope == scopeTenant {
		what = "for this tenant (all its keys together)"
	}
	return rateLimited(wait, "too many requests "+what)
}

// rateLimited is the 429 of a rate limit: what met it, and when a token is back (wait, in whole
// seconds, rounded up and at least 1) as Retry-After.
func rateLimited(wait time.Duration, what string) *problem.Problem {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	p := problem.RateLimited.New(fmt.Sprintf("%s; retry in %d s", what, secs))
	p.RetryAfter = secs
	return p
}

// limitTenant applies tenant's bucket b to a call of a route that counts in it (counted); over
// it, the answer is a 429 problem.
func (s *Server) limitTenant(tenant string, b *tenantBucket) *problem.Problem {
	ok, wait := s.limits.allowTenant(tenant, b, time.Now())
	if ok {
		return nil
	}
	return rateLimited(wait, b.refused)
}

// counted marks a route whose calls count in a tenant's bucket b: identify takes a token of it
// (limitTenant) once it knows the tenant.
func counted(b *tenantBucket, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if st, ok := stateOf(r); ok {
			st.bucket = b
		}
		h(w, r)
	}
}

// waiting counts each tenant's synchronous requests waiting for a reply, so that one tenant
// cannot hold the ingress's memory and connections; tenants at zero leave the map.
type waiting struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func (c *waiting) enter(tenant string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[tenant] >= c.max {
		return false
	}
	c.n[tenant]++
	return true
}

func (c *waiting) leave(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	decrement(c.n, tenant, 1)
}

// waitSlot is a synchronous request's place among its tenant's waiting requests, in its
// requestState: holdWaiting fills it once the tenant is known, and syncCall gives it back when
// the handler returns.
type waitSlot struct {
	tenant string
	held   bool
}

// syncCall marks the routes whose answer may wait for a handler's reply (webhook, converse,
// send), so that holdWaiting, called by their handler once the tenant is known, counts them.
// startUserCall calls it for webhook and converse.
func (s *Server) syncCall(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, ok := stateOf(r)
		if !ok { // not routed through measure
			st = &requestState{}
			r = r.WithContext(context.WithValue(r.Context(), requestStateKey{}, st))
		}
		st.sync = true
		defer func() {
			if st.wait.held {
				s.leaveWaiting(st.wait.tenant)
			}
		}()
		h(w, r)
	}
}

// holdWaiting counts r among tenant's waiting requests until its handler returns, if r is a
// synchronous call (see syncCall). It is called after authentication and before anything is
// published: over the cap the answer is a 503 problem and nothing was enqueued.
func (s *Server) holdWaiting(r *http.Request, tenant string) *problem.Problem {
	st, ok := stateOf(r)
	if !ok || !st.sync || st.wait.held {
		return nil
	}
	if p := s.enterWaiting(tenant); p != nil {
		return p
	}
	st.wait.tenant, st.wait.held = tenant, true
	return nil
}

// enterWaiting takes a place among tenant's waiting requests, to be given back with
// leaveWaiting; over the cap the answer is a 503 problem.
func (s *Server) enterWaiting(tenant string) *problem.Problem {
	if !s.waiting.enter(tenant) {
		return problem.TooManyWaiting.New(fmt.Sprintf("the tenant already has %d requests waiting for a reply; retry shortly", s.waiting.max))
	}
	s.metrics.waiting.Inc()
	return nil
}

// leaveWaiting gives back a place enterWaiting took.
func (s *Server) leaveWaiting(tenant string) {
	s.waiting.leave(tenant)
	s.metrics.waiting.Dec()
}
