package ingress

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbus/agentbus/pkg/problem"
)

// bodyBudget bounds the request-body bytes an ingress instance holds at once for each tenant,
// and for the requests whose tenant is not known when their body is read (send and signal
// without a valid key in a header or the query: one shared budget, owner ""). A body holds its
// bytes from its reading until its handler returns; one tenant's bodies, or bodies sent without
// a key, cannot take the memory the others' need. Owners at zero leave the map.
type bodyBudget struct {
	max   int64
	mu    sync.Mutex
	held  map[string]int64
	gauge prometheus.Gauge // every owner's bytes together
}

// take adds n bytes to owner's, unless that passes the budget.
func (b *bodyBudget) take(owner string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[owner]+n > b.max {
		return false
	}
	b.held[owner] += n
	b.gauge.Add(float64(n))
	return true
}

// give takes n bytes off owner's.
func (b *bodyBudget) give(owner string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gauge.Sub(float64(n))
	decrement(b.held, owner, n)
}

// bodyHold is what a request's body holds of its owner's budget, in its requestState: readBody
// fills it, and heldBodies gives it back when the handler returns.
type bodyHold struct {
	owner string
	n     int64
}

// errBodyBudget ends the reading of a body whose owner's budget is used up.
var errBodyBudget = errors.New("the body budget is used up")

// readAll reads r to its end into a buffer that grows by doubling, from 512 bytes up to most
// (the announced length and one byte for the end, or the limit and one), taking each growth of
// its capacity from take first: what the budget counts is the memory the body holds. Once the
// buffer holds most-1 bytes, a one-byte read looks for the end before it grows by that byte, a
// copy of the whole body (an announced length of a power of two fills it exactly).
func readAll(r io.Reader, most int64, take func(int64) bool) ([]byte, error) {
	var b []byte
	for {
		if len(b) == cap(b) {
			var past []byte
			if len(b) > 0 && int64(len(b)) == most-1 {
				var one [1]byte
				n, err := io.ReadFull(r, one[:])
				if err == io.EOF {
					return b, nil
				}
				if err != nil {
					return nil, err
				}
				past = one[:n]
			}
			c := min(max(2*int64(cap(b)), 512), most)
			if c <= int64(cap(b)) {
				c = int64(cap(b)) + 512
			}
			if !take(c - int64(cap(b))) {
				return nil, errBodyBudget
			}
			grown := make([]byte, len(b), c)
			copy(grown, b)
			b = append(grown, past...)
			continue
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// heldBodies gives back, once h returns, the bytes its request's body took of the budget.
func (s *Server) heldBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if st, ok := stateOf(r); ok && st.body.n > 0 {
				s.bodies.give(st.body.owner, st.body.n)
				st.body.n = 0
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// bodyOwner is whose budget r's body is read from: the tenant, once authenticated, or the
// tenant of a valid key in the Authorization header or the apikey query parameter (send and
// signal read their body before they check the key, which may be in it); else "", the budget
// of bodies of no known tenant.
func (s *Server) bodyOwner(r *http.Request, st *requestState) string {
	if st.tenant != "" {
		return st.tenant
	}
	if tenant := s.credTenant(r.Header.Get("Authorization")); tenant != "" {
		return tenant
	}
	if r.URL.RawQuery == "" { // the usual case: no query to parse
		return ""
	}
	return s.credTenant(r.URL.Query().Get("apikey"))
}

// credTenant is the tenant of a valid key in cred (a bearer credential or a bare key), or "".
func (s *Server) credTenant(cred string) string {
	if cred = bearer(cred); cred == "" {
		return ""
	}
	if k, err := s.auth.Authenticate(cred); err == nil {
		return k.Tenant
	}
	return ""
}

// readBody reads a request body of at most limit bytes from its owner's budget (bodyBudget); a
// larger or unreadable one, or one over the budget, gets the problem the caller is answered
// with. The memory taken stays taken until the handler returns.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *problem.Problem) {
	owner, take := "", func(int64) bool { return true }
	if st, ok := stateOf(r); ok {
		if st.body.n == 0 {
			st.body.owner = s.bodyOwner(r, st)
		}
		owner = st.body.owner
		take = func(n int64) bool {
			if !s.bodies.take(st.body.owner, n) {
				return false
			}
			st.body.n += n
			return true
		}
	}
	most := limit + 1
	if r.ContentLength >= 0 && r.ContentLength < limit {
		most = r.ContentLength + 1
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, limit), most, take)
	if err != nil {
		if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
			return nil, problem.BodyTooLarge.New(fmt.Sprintf("the body is larger than %d bytes", limit))
		}
		if errors.Is(err, errBodyBudget) {
			// The rest of the body is not read: the connection cannot serve another request.
			w.Header().Set("Connection", "close")
			whose := "of this tenant"
			if owner == "" {
				whose = "without a known API key"
			}
			return nil, problem.TooManyBodyBytes.New(fmt.Sprintf("the request bodies being received %s already hold up to %d bytes on this instance; retry shortly", whose, s.bodies.max))
		}
		return nil, problem.UnreadableBody.New("the request body could not be read")
	}
	return body, nil
}
