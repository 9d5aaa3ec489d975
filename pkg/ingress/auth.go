package ingress

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
)

// caller is who is calling and for which tenant. Every route works it out first, with
// identify and the route's access, and uses no other tenant than caller.tenant.
type caller struct {
	key keys.Key
	// tenant is the tenant the call acts for; "" when a system key calls an endpoint of the
	// whole deployment (tenants, system keys, the agent list).
	tenant string
	// revocations counts the keys revoked before the key was authenticated (revocations.seen):
	// a call's answer is withheld when its key was revoked since (revocations.revokedSince).
	revocations uint64
}

// isSystem reports whether the caller holds a system-admin key.
func (c caller) isSystem() bool { return c.key.Role == keys.RoleSystemAdmin }

// tenantRule says where a route's tenant comes from.
type tenantRule int

const (
	// keyTenant: the key's own tenant. A system key names one in the tenantId query parameter
	// or X-Tenant-Id; a tenantId or X-Tenant-Id that differs from the call's tenant is refused.
	// The user endpoints: webhook, converse, MCP.
	keyTenant tenantRule = iota
	// pathTenant: the path's {tenantId}, or X-Tenant-Id; it must be the key's, and exist when a
	// system key names it. The admin endpoints of one tenant: send, history, keys, dead letters.
	pathTenant
	// anyTenant: the endpoint serves the whole deployment; the call's tenant is its key's ("" for
	// a system key). The agent list, tenants and system keys.
	anyTenant
)

// access says how a route identifies its caller.
type access struct {
	// where names the places keys are taken from, for the detail of a 401.
	where string
	// creds are the credentials the request carries there, in order of precedence.
	creds func(r *http.Request, q url.Values) []string
	// role is the least role the route admits ("" for any): system admins pass every role,
	// tenant admins pass RoleTenantAdmin.
	role   keys.Role
	tenant tenantRule
}

// Places keys are taken from.
var (
	fromHeader = func(r *http.Request, _ url.Values) []string { return []string{r.Header.Get("Authorization")} }
	fromQuery  = func(_ *http.Request, q url.Values) []string { return []string{q.Get("apikey")} }
	// fromHeaderOrQuery serves EventSource and webhook-style callers that cannot set headers.
	fromHeaderOrQuery = func(r *http.Request, q url.Values) []string {
		return []string{r.Header.Get("Authorization"), q.Get("apikey")}
	}
)

// headerOrQueryKey is where user endpoints look for a key: an EventSource or a webhook caller
// cannot always set headers.
const headerOrQueryKey = "the Authorization header or the apikey query parameter"

// The access of each kind of route.
var (
	webhookAccess  = access{where: "the apikey query parameter", creds: fromQuery, tenant: keyTenant}
	converseAccess = access{where: headerOrQueryKey, creds: fromHeaderOrQuery, tenant: keyTenant}
	mcpAccess      = access{where: "the Authorization header", creds: fromHeader, tenant: keyTenant}
	agentsAccess   = access{where: headerOrQueryKey, creds: fromHeaderOrQuery, tenant: anyTenant}
	// readAccess: every role may read its tenant's history.
	readAccess = access{where: headerOrQueryKey, creds: fromHeaderOrQuery, tenant: pathTenant}
	// sendAccess also takes the key in the body's authorization field (identify's extra).
	sendAccess   = access{where: "the Authorization header or the authorization field", creds: fromHeader, role: keys.RoleTenantAdmin, tenant: pathTenant}
	adminAccess  = access{where: "the Authorization header", creds: fromHeader, role: keys.RoleTenantAdmin, tenant: pathTenant}
	systemAccess = access{where: "the Authorization header", creds: fromHeader, role: keys.RoleSystemAdmin, tenant: anyTenant}
)

// identify works out who is calling r and for which tenant, by the route's access a: the key
// (401), its role (403), then the tenant. q is the request's query; extra are credentials the
// route found elsewhere (send's body), after a's in precedence. The tenant is noted for the
// metrics once it is known to exist, and a tenant's key on a route whose calls count in one of
// the tenant's buckets (counted: configuration writes, listen streams) takes a token of it.
func (s *Server) identify(r *http.Request, q url.Values, a access, extra ...string) (caller, *problem.Problem) {
	revocations := s.revoked.seen() // before the key is checked: a revocation after it is seen
	key, p := s.authenticate(a.where, append(a.creds(r, q), extra...)...)
	if p != nil {
		return caller{}, p
	}
	if !hasRole(key, a.role) {
		detail := "this endpoint needs an admin key"
		if a.role == keys.RoleSystemAdmin {
			detail = "this endpoint needs a system-admin key"
		}
		return caller{}, problem.Forbidden.New(detail)
	}
	c := caller{key: key, revocations: revocations}
	switch a.tenant {
	case keyTenant:
		c.tenant, p = s.keyTenant(r, q, key)
	case pathTenant:
		c.tenant, p = s.pathTenant(r, q, key)
	default:
		c.tenant = key.Tenant
	}
	if p != nil {
		return caller{}, p
	}
	if st := noteTenant(r, c.tenant); st != nil && st.bucket != nil && !c.isSystem() {
		if p := s.limitTenant(c.tenant, st.bucket); p != nil {
			return caller{}, p
		}
	}
	return c, nil
}

// hasRole reports whether key's role is at least role.
func hasRole(key keys.Key, role keys.Role) bool {
	switch role {
	case keys.RoleSystemAdmin:
		return key.Role == keys.RoleSystemAdmin
	case keys.RoleTenantAdmin:
		return key.Role == keys.RoleSystemAdmin || key.Role == keys.RoleTenantAdmin
	default:
		return true
	}
}

// keyTenant is the tenant of a user call: the key's, or the one a system key names.
func (s *Server) keyTenant(r *http.Request, q url.Values, key keys.Key) (string, *problem.Problem) {
	tenant := key.Tenant
	tenantID, tenantGiven := q["tenantId"]
	header := r.Header.Get("X-Tenant-Id")
	switch {
	case key.Role == keys.RoleSystemAdmin:
		// A system key serves every tenant; the call must say which.
		tenant = q.Get("tenantId")
		if !tenantGiven {
			tenant = header
		}
		if !ident.ValidTenant(tenant) {
			return "", problem.InvalidTenant.New("a system key needs a valid tenantId query parameter")
		}
		if p := s.tenantExists(r, tenant); p != nil {
			return "", p
		}
	case tenantGiven && tenantID[0] != tenant:
		return "", problem.Forbidden.New("tenantId does not match the API key's tenant")
	}
	if header != "" && header != tenant {
		return "", problem.Forbidden.New("X-Tenant-Id does not match the call's tenant")
	}
	return tenant, nil
}

// pathTenant is the tenant of an admin call: the path's, or X-Tenant-Id; it must be the key's
// (system keys may name any existing tenant).
func (s *Server) pathTenant(r *http.Request, q url.Values, key keys.Key) (string, *problem.Problem) {
	path, header := r.PathValue("tenantId"), r.Header.Get("X-Tenant-Id")
	tenant := path
	switch {
	case path != "" && header != "" && path != header:
		return "", problem.TenantMismatch.New("the path tenant and X-Tenant-Id differ")
	case tenant == "":
		tenant = header
	}
	if tenant == "" {
		return "", problem.MissingTenant.New("the tenant is required in the path or X-Tenant-Id")
	}
	if given, ok := q["tenantId"]; ok && given[0] != tenant {
		return "", problem.Forbidden.New("the tenantId query parameter names another tenant")
	}
	if !ident.ValidTenant(tenant) {
		return "", problem.InvalidTenant.New(ident.ErrInvalidTenant.Error())
	}
	if key.Role != keys.RoleSystemAdmin && key.Tenant != tenant {
		return "", problem.Forbidden.New("the API key belongs to another tenant")
	}
	if key.Role == keys.RoleSystemAdmin {
		// A tenant's own key needs no read: deleting a tenant revokes its keys
		// (keys.Store.DeleteTenant).
		return tenant, s.tenantExists(r, tenant)
	}
	return tenant, nil
}

// tenantExists checks that a tenant a system key names exists.
func (s *Server) tenantExists(r *http.Request, tenant string) *problem.Problem {
	_, err := s.keys.GetTenant(r.Context(), tenant)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, keys.ErrUnknownTenant):
		return problem.UnknownTenant.New("no such tenant")
	default:
		s.log.Error("reading tenant", "err", err)
		return problem.BusUnavailable.New("try again")
	}
}

// authenticate checks the credentials a request carries (where names them for the client). Every
// credential given must be valid, else 401; when several are, the first wins, so callers list the
// Authorization header first. The key's rate limit is applied here, so every authenticated
// endpoint has it and an unknown key still gets 401 rather than 429.
func (s *Server) authenticate(where string, creds ...string) (keys.Key, *problem.Problem) {
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
			return keys.Key{}, problem.Unauthorized.New(authDetail(err, where))
		}
		if !have {
			key, have = k, true
		}
	}
	if !have {
		return keys.Key{}, problem.Unauthorized.New(authDetail(keys.ErrUnknownKey, where))
	}
	if p := s.limit(key); p != nil {
		return keys.Key{}, p
	}
	return key, nil
}

// authDetail is the detail of a 401: why the key was refused, and where keys are taken.
func authDetail(err error, where string) string {
	if errors.Is(err, keys.ErrRevoked) {
		return "the API key has been revoked"
	}
	return "a valid API key is required in " + where
}

// bearer strips an optional "Bearer " scheme.
func bearer(cred string) string {
	cred = strings.TrimSpace(cred)
	if len(cred) > 7 && strings.EqualFold(cred[:7], "bearer ") {
		return strings.TrimSpace(cred[7:])
	}
	return cred
}

// userCall is what every user endpoint (webhook, converse, MCP) establishes first.
type userCall struct {
	caller
	requestID string
	// keep: the caller chose the requestId (Idempotency-Key), so the result is kept for retries.
	keep  bool
	query url.Values
}

// startUserCall reads the request id (Idempotency-Key, else a new UUID, also sent back as
// X-Request-Id; the edge checked it, pathValues), the query and the caller (identify, by a).
// A synchronous call is then counted among the tenant's waiting requests (holdWaiting).
// On failure it has written the problem and returns false.
func (s *Server) startUserCall(w http.ResponseWriter, r *http.Request, a access) (userCall, bool) {
	c := userCall{requestID: r.Header.Get("Idempotency-Key")}
	c.keep = c.requestID != ""
	if !c.keep {
		c.requestID = uuid.NewString()
	}
	w.Header().Set("X-Request-Id", c.requestID)
	p := s.startUser(r, &c, a)
	if p != nil {
		p.RequestID = c.requestID
		problem.Write(w, *p)
		return c, false
	}
	return c, true
}

// startUser is startUserCall's checks, in order.
func (s *Server) startUser(r *http.Request, c *userCall, a access) *problem.Problem {
	var p *problem.Problem
	if c.query, p = readQuery(r); p != nil {
		return p
	}
	if c.caller, p = s.identify(r, c.query, a); p != nil {
		return p
	}
	return s.holdWaiting(r, c.tenant)
}
