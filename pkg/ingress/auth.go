package ingress

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/ident"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
)

// authenticate checks the credentials a request carries (where names them for the client). Every
// credential given must be valid, else 401; when several are, the first wins, so callers list the
// Authorization header first. The key's rate limit is applied here, so every authenticated
// endpoint has it and an unknown key still gets 401 rather than 429.
func (s *Server) authenticate(where string, creds ...string) (keys.Key, *problem.Problem) {
	unauthorized := func(err error) *problem.Problem {
		return &problem.Problem{Status: http.StatusUnauthorized, Slug: "unauthorized", Detail: authDetail(err, where)}
	}
	var (
		key  keys.Key
		have bool
	)
	for _, cred := range creds {
		if cred = bearer(cred); cred == "" {
			continue
		}
		k, err := s.auth.Authenticate(cred)
		if err != nil {
			return keys.Key{}, unauthorized(err)
		}
		if !have {
			key, have = k, true
		}
	}
	if !have {
		return keys.Key{}, unauthorized(keys.ErrUnknownKey)
	}
	if p := s.limit(key); p != nil {
		return keys.Key{}, p
	}
	return key, nil
}

// bearer strips an optional "Bearer " scheme.
func bearer(cred string) string {
	cred = strings.TrimSpace(cred)
	if len(cred) > 7 && strings.EqualFold(cred[:7], "bearer ") {
		return strings.TrimSpace(cred[7:])
	}
	return cred
}

// headerOrQueryKey is where user endpoints look for a key: an EventSource or a webhook caller
// cannot always set headers.
const headerOrQueryKey = "the Authorization header or the apikey query parameter"

// userCall is what every user endpoint (webhook, converse) establishes first.
type userCall struct {
	requestID string
	// keep: the caller chose the requestId (Idempotency-Key), so the result is kept for retries.
	keep   bool
	query  url.Values
	key    keys.Key
	tenant string
}

// startUserCall reads the request id (Idempotency-Key, else a new UUID, also sent back as
// X-Request-Id), the query, the key (from where, via creds) and the tenant: the key's, or for a
// system key the tenantId query parameter; a tenantId that differs from the key's is refused.
// A synchronous call is then counted among the tenant's waiting requests (holdWaiting).
// On failure it has written the problem and returns false.
func (s *Server) startUserCall(w http.ResponseWriter, r *http.Request, creds func(url.Values) (string, []string)) (userCall, bool) {
	c := userCall{requestID: r.Header.Get("Idempotency-Key")}
	c.keep = c.requestID != ""
	if !c.keep {
		c.requestID = uuid.NewString()
	}
	w.Header().Set("X-Request-Id", c.requestID)
	fail := func(p problem.Problem) (userCall, bool) {
		p.RequestID = c.requestID
		problem.Write(w, p)
		return c, false
	}
	var p *problem.Problem
	if c.query, p = readQuery(r); p != nil {
		return fail(*p)
	}
	where, given := creds(c.query)
	key, p := s.authenticate(where, given...)
	if p != nil {
		return fail(*p)
	}
	c.key, c.tenant = key, key.Tenant
	tenantID, tenantGiven := c.query["tenantId"]
	header := r.Header.Get("X-Tenant-Id")
	switch {
	case key.Role == keys.RoleSystemAdmin:
		// A system key serves every tenant; the call must say which.
		c.tenant = c.query.Get("tenantId")
		if !tenantGiven {
			c.tenant = header
		}
		if !ident.ValidTenant(c.tenant) {
			return fail(problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-tenant", Detail: "a system key needs a valid tenantId query parameter"})
		}
		if _, err := s.keys.GetTenant(r.Context(), c.tenant); err != nil {
			if errors.Is(err, keys.ErrUnknownTenant) {
				return fail(problem.Problem{Status: http.StatusNotFound, Slug: "unknown-tenant", Detail: "no such tenant"})
			}
			s.log.Error("reading tenant", "err", err)
			return fail(problem.Problem{Status: http.StatusServiceUnavailable, Slug: "bus-unavailable", Detail: "try again", RetryAfter: 1})
		}
	case tenantGiven && tenantID[0] != c.tenant:
		return fail(problem.Problem{Status: http.StatusForbidden, Slug: "forbidden", Detail: "tenantId does not match the API key's tenant"})
	}
	if header != "" && header != c.tenant {
		return fail(problem.Problem{Status: http.StatusForbidden, Slug: "forbidden", Detail: "X-Tenant-Id does not match the call's tenant"})
	}
	if len(c.requestID) > maxIdempotencyKey {
		return fail(problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-idempotency-key",
			Detail: fmt.Sprintf("Idempotency-Key is longer than %d characters", maxIdempotencyKey)})
	}
	if !utf8.ValidString(c.requestID) {
		return fail(problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-idempotency-key", Detail: "Idempotency-Key is not valid UTF-8"})
	}
	noteTenant(r, c.tenant)
	if p := s.holdWaiting(r, c.tenant); p != nil {
		return fail(*p)
	}
	return c, true
}
