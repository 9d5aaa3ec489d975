package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// newKey is the answer of key creation and rotation.
type newKey struct {
	Key       string     `json:"key"`
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	Tenant    string     `json:"tenant"`
	CreatedBy string     `json:"createdBy"`
	CreatedAt time.Time  `json:"createdAt"`
	RevokedAt *time.Time `json:"revokedAt"`
	Replaces  string     `json:"replaces"`
}

type keyList struct {
	Keys []map[string]any `json:"keys"`
}

// tenantIDs lists the tenants' ids.
func tenantIDs(t *testing.T, s *stacktest.Stack) []string {
	t.Helper()
	var tenants struct {
		Tenants []struct {
			ID string `json:"id"`
		} `json:"tenants"`
	}
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants", systemKey, nil, http.StatusOK, &tenants)
	var ids []string
	for _, tn := range tenants.Tenants {
		ids = append(ids, tn.ID)
	}
	return ids
}

// TestAdminFlow walks the admin API as an operator does: a tenant, its tenant admin and user
// key, a key's revocation and rotation, and the tenant's deletion.
func TestAdminFlow(t *testing.T) {
	t.Parallel()
	// The deleted tenant's id is used again at once (TestDeletedTenantsDataIsErased holds it).
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, TenantIDHold: -1})
	var tenant struct {
		ID        string    `json:"id"`
		CreatedAt time.Time `json:"createdAt"`
	}
	h := adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, &tenant)
	require.Equal(t, "acme", tenant.ID, "created tenant = %+v", tenant)
	require.False(t, tenant.CreatedAt.IsZero(), "created tenant = %+v", tenant)
	assert.Equal(t, "/api/v1/admin/tenants/acme", h.Get("Location"), "created tenant's Location")
	assert.Equal(t, []string{"acme", "default", "other"}, tenantIDs(t, s), "tenants")

	// The system admin makes a tenant admin, which makes a user key.
	ta := createKey(t, s, "acme", systemKey, "ops", "tenant-admin")
	assert.Equal(t, "admin", ta.CreatedBy, "tenant admin createdBy: the AGENTBUS_ADMIN_KEY's id")
	waitKnown(t, s, ta.Key)
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/acme", ta.Key, nil, http.StatusOK, &tenant)
	user := createKey(t, s, "acme", ta.Key, "ci", "user")
	assert.Equal(t, ta.ID, user.CreatedBy, "user key createdBy: the tenant admin's id")
	waitKnown(t, s, user.Key)

	checkUserKeyScope(t, s, user)
	checkKeyListing(t, s, ta, user)
	checkKeyRevocation(t, s, ta, user)
	rotated := checkKeyRotation(t, s, ta)
	checkTenantDeletion(t, s, ta, rotated)
}

// checkUserKeyScope: the user key calls its tenant's webhook, and no admin endpoint.
func checkUserKeyScope(t *testing.T, s *stacktest.Stack, user newKey) {
	t.Helper()
	require.Equal(t, http.StatusOK, callEcho(t, s.URL, user.Key), "user key on the Echo webhook")
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/admin/tenants/acme/keys"},
		{http.MethodPost, "/api/v1/admin/tenants/acme/keys"},
		{http.MethodGet, "/api/v1/admin/tenants"},
		{http.MethodGet, "/api/v1/admin/tenants/acme"},
		{http.MethodDelete, "/api/v1/admin/tenants/acme/keys/" + user.ID},
	} {
		status, h, b := adminReq(t, s, r.method, r.path, user.Key, `{"name":"x","role":"user"}`)
		problemOf(t, status, h.Get("Content-Type"), b, http.StatusForbidden)
	}
}

// checkKeyListing: listing acme's keys shows the records of ta and user, and nothing secret.
func checkKeyListing(t *testing.T, s *stacktest.Stack, ta, user newKey) {
	t.Helper()
	status, _, raw := adminReq(t, s, http.MethodGet, "/api/v1/admin/tenants/acme/keys", ta.Key, nil)
	require.Equal(t, http.StatusOK, status, "listing keys: %s", raw)
	for _, secret := range []string{ta.Key, user.Key} {
		for _, needle := range []string{secret, strings.TrimPrefix(secret, keys.Prefix), keys.Hash(secret)} {
			assert.NotContains(t, string(raw), needle, "the key listing holds secret material")
		}
	}
	var list keyList
	require.NoError(t, json.Unmarshal(raw, &list), "%s", raw)
	require.Len(t, list.Keys, 2, "listed keys: %s", raw)
	for _, k := range list.Keys {
		for field := range k {
			assert.Contains(t, []string{"id", "tenant", "role", "name", "createdBy", "createdAt", "revokedAt"}, field, "key record has an unexpected field: %v", k)
		}
		assert.Equal(t, "acme", k["tenant"], "listed a key of another tenant")
	}
}

// checkKeyRevocation: the tenant admin ta revokes user; the ingress refuses it within a second,
// and revoking it again keeps the first time.
func checkKeyRevocation(t *testing.T, s *stacktest.Stack, ta, user newKey) {
	t.Helper()
	var got newKey
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme/keys/"+user.ID, ta.Key, nil, http.StatusNoContent, nil)
	echoBecomes(t, s, user.Key, http.StatusUnauthorized, time.Second)
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/acme/keys/"+user.ID, ta.Key, nil, http.StatusOK, &got)
	require.NotNil(t, got.RevokedAt, "revoked key record = %+v, want revokedAt", got)
	firstRevoked := *got.RevokedAt
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme/keys/"+user.ID, ta.Key, nil, http.StatusNoContent, nil)
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/acme/keys/"+user.ID, ta.Key, nil, http.StatusOK, &got)
	require.NotNil(t, got.RevokedAt, "key record after the second revoke = %+v", got)
	assert.True(t, got.RevokedAt.Equal(firstRevoked), "second revoke moved revokedAt from %v to %v", firstRevoked, got.RevokedAt)
}

// checkKeyRotation: rotating a key of acme gives a new secret with the same name and role; the
// old one stops working, and cannot be rotated again. It returns the new key.
func checkKeyRotation(t *testing.T, s *stacktest.Stack, ta newKey) newKey {
	t.Helper()
	old := createKey(t, s, "acme", ta.Key, "deploy", "user")
	waitKnown(t, s, old.Key)
	var rotated, got newKey
	h := adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants/acme/keys/"+old.ID+"/rotate", ta.Key, nil, http.StatusCreated, &rotated)
	assert.True(t, strings.HasPrefix(rotated.Key, keys.Prefix), "rotated = %+v", rotated)
	assert.NotEqual(t, old.Key, rotated.Key, "rotation kept the secret")
	assert.NotEqual(t, old.ID, rotated.ID, "rotation kept the id")
	assert.Equal(t, "deploy", rotated.Name, "rotated = %+v", rotated)
	assert.Equal(t, "user", rotated.Role, "rotated = %+v", rotated)
	assert.Equal(t, "acme", rotated.Tenant, "rotated = %+v", rotated)
	assert.Equal(t, ta.ID, rotated.CreatedBy, "rotated = %+v", rotated)
	assert.Equal(t, old.ID, rotated.Replaces, "rotated = %+v", rotated)
	assert.Equal(t, "no-store", h.Get("Cache-Control"), "rotation answer Cache-Control")
	echoBecomes(t, s, old.Key, http.StatusUnauthorized, time.Second)
	echoBecomes(t, s, rotated.Key, http.StatusOK, time.Second)
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/acme/keys/"+old.ID, ta.Key, nil, http.StatusOK, &got)
	assert.NotNil(t, got.RevokedAt, "rotated-out key = %+v, want revokedAt", got)
	status, hdr, b := adminReq(t, s, http.MethodPost, "/api/v1/admin/tenants/acme/keys/"+old.ID+"/rotate", ta.Key, nil)
	p := problemOf(t, status, hdr.Get("Content-Type"), b, http.StatusConflict)
	assert.Equal(t, "urn:agentbus:problem:key-revoked", p["type"], "rotating a revoked key: %v", p)
	return rotated
}

// checkTenantDeletion: deleting acme revokes its keys (ta and rotated) and makes it unknown; its
// id can be used again, and the old keys stay revoked.
func checkTenantDeletion(t *testing.T, s *stacktest.Stack, ta, rotated newKey) {
	t.Helper()
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme", systemKey, nil, http.StatusNoContent, nil)
	echoBecomes(t, s, rotated.Key, http.StatusUnauthorized, time.Second)
	waitUnknown(t, s, ta.Key, "the tenant admin's key still works a second after its tenant was deleted")
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/admin/tenants/acme"},
		{http.MethodDelete, "/api/v1/admin/tenants/acme"},
		{http.MethodGet, "/api/v1/admin/tenants/acme/keys"},
	} {
		status, h, b := adminReq(t, s, r.method, r.path, systemKey, nil)
		problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
	}
	assert.NotContains(t, tenantIDs(t, s), "acme", "deleted tenant still listed")
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	assert.False(t, s.Ingress.KeyKnown(ta.Key), "a key of the deleted tenant works again after the tenant id was reused")
	assert.False(t, s.Ingress.KeyKnown(rotated.Key), "a key of the deleted tenant works again after the tenant id was reused")
}

func TestAdminDeleteTenantFinishesInterruptedDeletion(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx := context.Background()
	// A deletion that stopped after marking the tenant, before revoking its keys.
	_, err := s.Res.Tenants.Put(ctx, "other", []byte(`{"id":"other","createdAt":"2024-01-01T00:00:00Z","deletedAt":"2024-01-02T00:00:00Z"}`))
	require.NoError(t, err)
	status, h, b := adminReq(t, s, http.MethodGet, "/api/v1/admin/tenants/other", systemKey, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/other", systemKey, nil, http.StatusNoContent, nil)
	waitUnknown(t, s, s.OtherKey, "the key of a deleted tenant still works after 1s")
	status, h, b = adminReq(t, s, http.MethodDelete, "/api/v1/admin/tenants/other", systemKey, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
}

func TestAdminSystemKeys(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	sys := createKey(t, s, "", systemKey, "automation", "system-admin")
	waitKnown(t, s, sys.Key)

	// A created system-admin key is as good as AGENTBUS_ADMIN_KEY.
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", sys.Key, map[string]string{"id": "made-by-key"}, http.StatusCreated, nil)
	ta := createKey(t, s, "made-by-key", sys.Key, "ops", "tenant-admin")
	assert.Equal(t, sys.ID, ta.CreatedBy, "createdBy")
	sys2 := createKey(t, s, "", sys.Key, "second", "system-admin")

	var list keyList
	adminOK(t, s, http.MethodGet, "/api/v1/admin/keys", systemKey, nil, http.StatusOK, &list)
	var ids []string
	for _, k := range list.Keys {
		ids = append(ids, k["id"].(string))
	}
	slices.Sort(ids)
	want := []string{sys.ID, sys2.ID}
	slices.Sort(want)
	assert.Equal(t, want, ids, "system keys, and only they")
	// A system key is not reachable through a tenant's path, nor a tenant's key through the
	// system path.
	for _, path := range []string{"/api/v1/admin/tenants/made-by-key/keys/" + sys2.ID, "/api/v1/admin/keys/" + ta.ID} {
		status, h, b := adminReq(t, s, http.MethodDelete, path, systemKey, nil)
		problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
	}
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/keys/"+sys.ID, sys2.Key, nil, http.StatusNoContent, nil)
	waitUnknown(t, s, sys.Key, "a revoked system key still works after 1s")
	status, h, b := adminReq(t, s, http.MethodGet, "/api/v1/admin/tenants", sys.Key, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusUnauthorized)
}

func TestAdminRefusals(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx := context.Background()
	var k refusalKeys
	k.user, _ = storeKey(t, s, "default", keys.RoleUser, "user")
	_, k.otherRec = storeKey(t, s, "other", keys.RoleUser, "theirs")
	_, k.mine = storeKey(t, s, "default", keys.RoleUser, "mine")
	_, k.revokedRec = revokedKey(t, s, "default", keys.RoleUser, "revoked")
	for _, cases := range [][]adminRefusal{adminCallerRefusals(s, k), adminInputRefusals(s, k)} {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				h, _ := checkAdminRefusal(t, s, tc)
				if tc.want == 405 {
					assert.NotEmpty(t, h.Get("Allow"), "405 without Allow")
				}
				if tc.want == 401 {
					assert.NotEmpty(t, h.Get("WWW-Authenticate"), "401 without WWW-Authenticate")
				}
			})
		}
	}

	// Nothing refused changed anything.
	ks, err := s.Keys.Keys(ctx, "")
	require.NoError(t, err)
	for _, key := range ks {
		if key.ID == k.mine.ID || key.ID == k.otherRec.ID {
			assert.Nil(t, key.RevokedAt, "a refused request revoked %+v", key)
		}
	}
	assert.Len(t, ks, 6, "keys after refused requests: the 6 the test made")
	_, err = s.Keys.GetTenant(ctx, "mine")
	assert.Error(t, err, "a refused request created a tenant")
}

// refusalKeys are the keys TestAdminRefusals makes besides the stack's: a user key of tenant
// "default" and the records of user keys of "default" and "other" and of a revoked one.
type refusalKeys struct {
	user                       string
	mine, otherRec, revokedRec keys.Key
}

// adminCallerRefusals are requests of callers the admin API refuses: no key, a key without the
// role, a key of another tenant.
func adminCallerRefusals(s *stacktest.Stack, k refusalKeys) []adminRefusal {
	user, mine, otherRec, revokedRec := k.user, k.mine, k.otherRec, k.revokedRec
	const otherKeys = "/api/v1/admin/tenants/other/keys"
	userKey := `{"name":"n","role":"user"}`
	return []adminRefusal{
		// Who may call.
		{name: "no key", method: get, path: tenants, want: 401, slug: "unauthorized"},
		{name: "unknown key", method: get, path: ownKeys, key: keys.Generate(), want: 401, slug: "unauthorized"},
		{name: "key in the query is not taken", method: get, path: ownKeys + "?apikey=" + s.Key, want: 401, slug: "unauthorized"},
		{name: "a key id is not a key", method: get, path: ownKeys, key: revokedRec.ID, want: 401, slug: "unauthorized"},
		{name: "user lists keys", method: get, path: ownKeys, key: user, want: 403, slug: "forbidden"},
		{name: "user creates a key", method: post, path: ownKeys, key: user, body: userKey, want: 403, slug: "forbidden"},
		{name: "user revokes a key", method: del, path: ownKeys + "/" + mine.ID, key: user, want: 403, slug: "forbidden"},
		{name: "user rotates a key", method: post, path: ownKeys + "/" + mine.ID + "/rotate", key: user, want: 403, slug: "forbidden"},
		{name: "user lists tenants", method: get, path: tenants, key: user, want: 403, slug: "forbidden"},
		{name: "tenant admin creates a tenant", method: post, path: tenants, key: s.Key, body: `{"id":"mine"}`, want: 403, slug: "forbidden"},
		{name: "tenant admin lists tenants", method: get, path: tenants, key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin deletes its tenant", method: del, path: tenants + "/default", key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin lists system keys", method: get, path: sysKeys, key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin creates a system key", method: post, path: sysKeys, key: s.Key, body: `{"name":"n","role":"system-admin"}`, want: 403, slug: "forbidden"},
		{name: "tenant admin creates a system-admin key in its tenant", method: post, path: ownKeys, key: s.Key, body: `{"name":"n","role":"system-admin"}`, want: 403, slug: "forbidden"},

		// Tenants (docs/security.md#isolation-matrix).
		{name: "tenant admin reads another tenant", method: get, path: tenants + "/other", key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin lists another tenant's keys", method: get, path: otherKeys, key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin creates a key in another tenant", method: post, path: otherKeys, key: s.Key, body: userKey, want: 403, slug: "forbidden"},
		{name: "tenant admin revokes another tenant's key", method: del, path: otherKeys + "/" + otherRec.ID, key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin rotates another tenant's key", method: post, path: otherKeys + "/" + otherRec.ID + "/rotate", key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin on an unknown tenant does not learn it is unknown", method: get, path: "/api/v1/admin/tenants/nobody/keys", key: s.Key, want: 403, slug: "forbidden"},
		{name: "another tenant's key through one's own path", method: del, path: ownKeys + "/" + otherRec.ID, key: s.Key, want: 404, slug: "unknown-key"},
		{name: "another tenant's key rotated through one's own path", method: post, path: ownKeys + "/" + otherRec.ID + "/rotate", key: s.Key, want: 404, slug: "unknown-key"},
		{name: "unknown tenant", method: get, path: "/api/v1/admin/tenants/nobody/keys", key: systemKey, want: 404, slug: "unknown-tenant"},
		{name: "unknown tenant create key", method: post, path: "/api/v1/admin/tenants/nobody/keys", key: systemKey, body: userKey, want: 404, slug: "unknown-tenant"},
		{name: "delete unknown tenant", method: del, path: tenants + "/nobody", key: systemKey, want: 404, slug: "unknown-tenant"},
		{name: "delete invalid tenant", method: del, path: tenants + "/ac.me", key: systemKey, want: 400, slug: "invalid-tenant"},
		{name: "invalid path tenant", method: get, path: "/api/v1/admin/tenants/ac%20me/keys", key: systemKey, want: 400, slug: "invalid-tenant"},
		{name: "invalid path tenant, tenant admin", method: get, path: "/api/v1/admin/tenants/ac.me/keys", key: s.Key, want: 400, slug: "invalid-tenant"},
		{name: "X-Tenant-Id differs from the path", method: get, path: ownKeys, key: s.Key, hdr: []string{"X-Tenant-Id", "other"}, want: 400, slug: "tenant-mismatch"},
		{name: "X-Tenant-Id on system keys", method: get, path: sysKeys, key: systemKey, hdr: []string{"X-Tenant-Id", "default"}, want: 400, slug: "tenant-mismatch"},
	}
}

// adminInputRefusals are requests the admin API refuses for their body, fields, method or path.
func adminInputRefusals(s *stacktest.Stack, k refusalKeys) []adminRefusal {
	mine, revokedRec := k.mine, k.revokedRec
	userKey := `{"name":"n","role":"user"}`
	return []adminRefusal{
		// Bodies and fields.
		{name: "bad JSON", method: post, path: ownKeys, key: s.Key, body: `{"name":`, want: 400, slug: "invalid-json"},
		{name: "empty body", method: post, path: ownKeys, key: s.Key, want: 400, slug: "invalid-json"},
		{name: "array body", method: post, path: ownKeys, key: s.Key, body: `[]`, want: 400, slug: "invalid-json"},
		{name: "two values", method: post, path: ownKeys, key: s.Key, body: userKey + userKey, want: 400, slug: "invalid-json"},
		{name: "unknown field", method: post, path: ownKeys, key: s.Key, body: `{"name":"n","rol":"user"}`, want: 400, slug: "invalid-json"},
		{name: "wrong field type", method: post, path: ownKeys, key: s.Key, body: `{"name":1,"role":"user"}`, want: 400, slug: "invalid-json"},
		{name: "body too large", method: post, path: ownKeys, key: s.Key, body: `{"name":"` + strings.Repeat("a", 70<<10) + `"}`, want: 413, slug: "body-too-large"},
		{name: "bad role", method: post, path: ownKeys, key: s.Key, body: `{"name":"n","role":"root"}`, want: 400, slug: "invalid-field"},
		{name: "role in another case", method: post, path: ownKeys, key: s.Key, body: `{"name":"n","role":"User"}`, want: 400, slug: "invalid-field"},
		{name: "no role", method: post, path: ownKeys, key: s.Key, body: `{"name":"n"}`, want: 400, slug: "invalid-field"},
		{name: "name too long", method: post, path: ownKeys, key: s.Key, body: `{"name":"` + strings.Repeat("a", 129) + `","role":"user"}`, want: 400, slug: "invalid-field"},
		{name: "name with a control character", method: post, path: ownKeys, key: s.Key, body: `{"name":"a\nb","role":"user"}`, want: 400, slug: "invalid-field"},
		{name: "system-admin key in a tenant", method: post, path: ownKeys, key: systemKey, body: `{"name":"n","role":"system-admin"}`, want: 400, slug: "invalid-field"},
		{name: "tenant key without a tenant", method: post, path: sysKeys, key: systemKey, body: userKey, want: 400, slug: "invalid-field"},
		{name: "bad tenant id", method: post, path: tenants, key: systemKey, body: `{"id":"ac me"}`, want: 400, slug: "invalid-tenant"},
		{name: "empty tenant id", method: post, path: tenants, key: systemKey, body: `{}`, want: 400, slug: "invalid-tenant"},
		{name: "long tenant id", method: post, path: tenants, key: systemKey, body: `{"id":"` + strings.Repeat("a", 65) + `"}`, want: 400, slug: "invalid-tenant"},
		{name: "duplicate tenant", method: post, path: tenants, key: systemKey, body: `{"id":"default"}`, want: 409, slug: "tenant-exists"},
		{name: "unknown key id", method: del, path: ownKeys + "/5b0c6f5e-2d39-4d3e-9c8e-0f7b1f2a3c4d", key: s.Key, want: 404, slug: "unknown-key"},
		{name: "malformed key id", method: del, path: ownKeys + "/not-an-id", key: s.Key, want: 404, slug: "unknown-key"},
		{name: "key id with a dot", method: get, path: ownKeys + "/a.b", key: s.Key, want: 400, slug: "invalid-path"},
		{name: "rotate unknown key", method: post, path: ownKeys + "/5b0c6f5e-2d39-4d3e-9c8e-0f7b1f2a3c4d/rotate", key: s.Key, want: 404, slug: "unknown-key"},
		{name: "rotate a revoked key", method: post, path: ownKeys + "/" + revokedRec.ID + "/rotate", key: s.Key, want: 409, slug: "key-revoked"},

		// Methods and paths.
		{name: "PUT tenants", method: http.MethodPut, path: tenants, key: systemKey, want: 405, slug: "method-not-allowed"},
		{name: "GET rotate", method: get, path: ownKeys + "/" + mine.ID + "/rotate", key: s.Key, want: 405, slug: "method-not-allowed"},
		{name: "POST a key id", method: post, path: ownKeys + "/" + mine.ID, key: s.Key, want: 405, slug: "method-not-allowed"},
		{name: "trailing slash", method: get, path: tenants + "/", key: systemKey, want: 404, slug: "not-found"},
	}
}

func TestAdminKeysAtRestAreHashesOnly(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx := context.Background()
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	ta := createKey(t, s, "acme", systemKey, "ops", "tenant-admin")
	waitKnown(t, s, ta.Key)
	user := createKey(t, s, "acme", ta.Key, "ci", "user")
	sys := createKey(t, s, "", systemKey, "automation", "system-admin")
	var rotated newKey
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants/acme/keys/"+user.ID+"/rotate", ta.Key, nil, http.StatusCreated, &rotated)
	revoked := createKey(t, s, "acme", ta.Key, "gone", "user")
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme/keys/"+revoked.ID, ta.Key, nil, http.StatusNoContent, nil)
	secrets := []string{s.Key, s.OtherKey, ta.Key, user.Key, sys.Key, rotated.Key, revoked.Key}

	lister, err := s.Res.Keys.ListKeys(ctx)
	require.NoError(t, err)
	var entries int
	for k := range lister.Keys() {
		entries++
		// The bucket keeps history: every revision counts, not only the latest.
		hist, err := s.Res.Keys.History(ctx, k)
		require.NoError(t, err, "History(%q)", k)
		for _, secret := range secrets {
			for _, needle := range []string{secret, strings.TrimPrefix(secret, keys.Prefix)} {
				assert.NotContains(t, k, needle, "entry key %q holds a secret", k)
				for _, e := range hist {
					assert.NotContains(t, string(e.Value()), needle, "entry %q revision %d holds a secret", k, e.Revision())
				}
			}
		}
	}
	// A record and an id index entry for each key.
	assert.Equal(t, 2*len(secrets), entries, "bucket entries: a record and an id index entry for each key")
	for _, secret := range secrets {
		_, err := s.Res.Keys.Get(ctx, keys.Hash(secret))
		assert.NoError(t, err, "no record under a key's hash")
	}
}

// TestAdminMethodsAllow checks the Allow header lists every method of a path.
func TestAdminMethodsAllow(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	for path, want := range map[string]string{
		"/api/v1/admin/tenants":                       "GET, POST",
		"/api/v1/admin/tenants/default":               "DELETE, GET",
		"/api/v1/admin/tenants/default/keys":          "GET, POST",
		"/api/v1/admin/keys/1":                        "DELETE, GET",
		"/api/v1/admin/tenants/default/keys/1/rotate": "POST",
	} {
		status, h, _ := adminReq(t, s, http.MethodPatch, path, systemKey, nil)
		assert.Equal(t, http.StatusMethodNotAllowed, status, "PATCH %s", path)
		assert.Equal(t, want, h.Get("Allow"), "PATCH %s", path)
	}
}
