package ingress_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestTenantKeysAreBounded: a tenant has at most AGENTBUS_MAX_KEYS_PER_TENANT keys in force; one
// more is 409 key-limit, which neither another tenant nor the system admin meets. A revocation
// makes room, a rotation at the bound replaces a key, and of the tenant's revoked keys only the
// most recently revoked stay.
func TestTenantKeysAreBounded(t *testing.T) {
	t.Parallel()
	const bound = 3
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, MaxKeysPerTenant: bound})
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	const acmeKeys = "/api/v1/admin/tenants/acme/keys"
	var inForce []newKey
	for range bound {
		inForce = append(inForce, createKey(t, s, "acme", systemKey, "k", "user"))
	}
	status, h, b := adminReq(t, s, http.MethodPost, acmeKeys, systemKey, map[string]string{"name": "one more", "role": "user"})
	p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusConflict)
	assert.Equal(t, "urn:agentbus:problem:key-limit", p["type"], "one key past the bound: %v", p)

	// Another tenant, and the system admin's own keys, are not held by acme's.
	createKey(t, s, "other", systemKey, "k", "user")
	createKey(t, s, "", systemKey, "ops", "system-admin")

	// A rotation at the bound replaces a key; a revocation makes room for one.
	var rotated newKey
	adminOK(t, s, http.MethodPost, acmeKeys+"/"+inForce[0].ID+"/rotate", systemKey, nil, http.StatusCreated, &rotated)
	revoked := []string{inForce[0].ID}
	inForce[0] = rotated
	adminOK(t, s, http.MethodDelete, acmeKeys+"/"+inForce[1].ID, systemKey, nil, http.StatusNoContent, nil)
	revoked = append(revoked, inForce[1].ID)
	inForce[1] = createKey(t, s, "acme", systemKey, "k", "user")

	// Of five revoked keys the tenant keeps the three revoked last.
	for _, k := range inForce {
		adminOK(t, s, http.MethodDelete, acmeKeys+"/"+k.ID, systemKey, nil, http.StatusNoContent, nil)
		revoked = append(revoked, k.ID)
	}
	var list keyList
	adminOK(t, s, http.MethodGet, acmeKeys, systemKey, nil, http.StatusOK, &list)
	var listed []string
	for _, k := range list.Keys {
		assert.NotNil(t, k["revokedAt"], "listed key %v", k)
		listed = append(listed, k["id"].(string))
	}
	assert.ElementsMatch(t, revoked[len(revoked)-bound:], listed, "acme's keys after five revocations")
	status, h, b = adminReq(t, s, http.MethodGet, acmeKeys+"/"+revoked[0], systemKey, nil)
	p = problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
	require.Equal(t, "urn:agentbus:problem:unknown-key", p["type"], "a revoked key no longer kept: %v", p)
}

// TestRemovedKeysLeaveNoMarkers: the purge markers a removed key leaves in the keys bucket (its
// record's and its index entry's) are taken out by the ingress that removed it, one to two
// rounds of KeyCompactEvery later.
func TestRemovedKeysLeaveNoMarkers(t *testing.T) {
	t.Parallel()
	const every = time.Second
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, MaxKeysPerTenant: 1, KeyCompactEvery: every})
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	var first string
	for i := range 2 {
		k := createKey(t, s, "acme", systemKey, "k", "user")
		adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme/keys/"+k.ID, systemKey, nil, http.StatusNoContent, nil)
		if i == 0 {
			first = k.ID
		}
	}
	// The second revocation removed the first key: its index entry holds a marker.
	ctx := context.Background()
	stream, err := s.Res.JS.Stream(ctx, "KV_"+s.Res.Keys.Bucket())
	require.NoError(t, err)
	holds := func() bool {
		_, err := stream.GetLastMsgForSubject(ctx, "$KV."+s.Res.Keys.Bucket()+".id."+first)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	require.True(t, holds(), "the removed key's index marker")
	require.Eventually(t, func() bool { return !holds() }, 10*every, every/10, "the marker taken out")
	_, err = s.Res.Keys.Get(ctx, "compacted")
	assert.NoError(t, err, "the compaction's own entry")
}
