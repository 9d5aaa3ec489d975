package keys_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/keys"
)

// inForce counts the keys of a tenant the bucket itself holds that are not revoked, and the
// revoked ones.
func inForce(t *testing.T, ctx context.Context, store *keys.Store, tenant string) (live, revoked []string) {
	t.Helper()
	all, err := store.Keys(ctx, tenant)
	require.NoError(t, err)
	for _, k := range all {
		if k.RevokedAt == nil {
			live = append(live, k.ID)
		} else {
			revoked = append(revoked, k.ID)
		}
	}
	return live, revoked
}

// TestCreateIsBounded: a bounded store refuses a tenant's key past the bound, but not another
// tenant's, a system admin's or a rotation's; a revocation makes room.
func TestCreateIsBounded(t *testing.T) {
	ctx, _, store, auth := setup(t)
	bounded := store.WithCache(auth, 2, nil)
	var ids []string
	for range 2 {
		_, k, err := bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
		require.NoError(t, err)
		ids = append(ids, k.ID)
	}
	_, _, err := bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.ErrorIs(t, err, keys.ErrLimit, "a third key of acme")
	_, _, err = bounded.Create(ctx, keys.NewKey{Tenant: "other", Role: keys.RoleUser})
	assert.NoError(t, err, "a key of another tenant")
	for range 3 {
		_, _, err = bounded.Create(ctx, keys.NewKey{Role: keys.RoleSystemAdmin})
		assert.NoError(t, err, "system-admin keys are not bounded")
	}
	_, k, _, err := bounded.Rotate(ctx, ids[0], "test")
	require.NoError(t, err, "rotating at the bound")
	ids[0] = k.ID
	_, err = bounded.RevokeID(ctx, ids[1])
	require.NoError(t, err)
	_, _, err = bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	assert.NoError(t, err, "a key after a revocation")
	live, _ := inForce(t, ctx, store, "acme")
	assert.Len(t, live, 2, "acme's keys in force")
}

// TestConcurrentCreatesKeepTheBound: of many keys of a tenant created at once on stores of their
// own (as on several ingresses), no more than the bound stay in force (all may give way), every
// refusal is ErrLimit, and those that gave way left nothing: the tenant creates up to the bound
// after.
func TestConcurrentCreatesKeepTheBound(t *testing.T) {
	ctx, res, store, auth := setup(t)
	const bound, tries = 3, 12
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		made []string
	)
	for range tries {
		auth, err := keys.NewAuthenticator(ctx, res.Keys, "", nil)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, auth.Close()) })
		bounded := store.WithCache(auth, bound, nil)
		wg.Go(func() {
			_, k, err := bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
			if !assert.True(t, err == nil || errors.Is(err, keys.ErrLimit), "Create: %v", err) || err != nil {
				return
			}
			mu.Lock()
			made = append(made, k.ID)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, len(made), bound, "keys created")
	bounded := store.WithCache(auth, bound, nil)
	for len(made) < bound {
		_, k, err := bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
		if !assert.NoError(t, err, "a key after the race, with room left") {
			break
		}
		made = append(made, k.ID)
	}
	_, _, err := bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	assert.ErrorIs(t, err, keys.ErrLimit, "a key past the bound after the race")
	live, _ := inForce(t, ctx, store, "acme")
	assert.ElementsMatch(t, made, live, "acme's keys in force in the bucket")
}

// TestRevokedKeysAreTrimmed: a bounded store keeps a tenant's most recently revoked keys up to
// the bound; the older ones' records and index entries go, and their secrets become unknown.
// Another tenant's revoked keys stay.
func TestRevokedKeysAreTrimmed(t *testing.T) {
	ctx, res, store, auth := setup(t)
	bounded := store.WithCache(auth, 2, nil)
	_, otherKey, err := store.Create(ctx, keys.NewKey{Tenant: "other", Role: keys.RoleUser})
	require.NoError(t, err)
	_, err = bounded.RevokeID(ctx, otherKey.ID)
	require.NoError(t, err)
	var secrets, ids []string
	for range 5 {
		secret, k, err := bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond) // revocation times apart
		_, err = bounded.RevokeID(ctx, k.ID)
		require.NoError(t, err)
		secrets, ids = append(secrets, secret), append(ids, k.ID)
		_, revoked := inForce(t, ctx, store, "acme")
		assert.LessOrEqual(t, len(revoked), 2, "acme's revoked keys after %d revocations", len(ids))
	}
	_, revoked := inForce(t, ctx, store, "acme")
	assert.ElementsMatch(t, ids[3:], revoked, "acme's revoked keys kept: the last two")
	for i, id := range ids[:3] {
		_, err := store.Get(ctx, id)
		assert.ErrorIs(t, err, keys.ErrUnknownKey, "an older revoked key")
		_, err = res.Keys.Get(ctx, "id."+id)
		assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the index entry of an older revoked key")
		refused(t, auth, secrets[i], keys.ErrUnknownKey, "an older revoked key")
	}
	_, err = store.Get(ctx, otherKey.ID)
	assert.NoError(t, err, "another tenant's revoked key")
}

// TestCachedListing: a store with a cache lists what the bucket holds, a write made through
// another store included as soon as it is stored.
func TestCachedListing(t *testing.T) {
	ctx, _, store, auth := setup(t)
	cached := store.WithCache(auth, 0, nil)
	for _, nk := range []keys.NewKey{
		{Tenant: "acme", Role: keys.RoleUser},
		{Tenant: "acme", Role: keys.RoleTenantAdmin},
		{Tenant: "other", Role: keys.RoleUser},
		{Role: keys.RoleSystemAdmin},
	} {
		_, k, err := store.Create(ctx, nk) // through the store without the cache
		require.NoError(t, err)
		for _, tenant := range []string{"acme", "other", "nobody", ""} {
			want, err := store.Keys(ctx, tenant)
			require.NoError(t, err)
			got, err := cached.Keys(ctx, tenant)
			require.NoError(t, err)
			assert.Equal(t, want, got, "Keys(%q) after key %s of %q", tenant, k.ID, k.Tenant)
		}
	}
}

// TestRemovedTenantLeavesNoKeys: removing a tenant removes its keys' records, so that a tenant
// made again with its id has none.
func TestRemovedTenantLeavesNoKeys(t *testing.T) {
	ctx, _, store, auth := setup(t)
	_, err := store.CreateTenant(ctx, "acme")
	require.NoError(t, err)
	secret, k, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)
	require.NoError(t, store.DeleteTenant(ctx, "acme"))
	_, err = store.Get(ctx, k.ID)
	assert.ErrorIs(t, err, keys.ErrUnknownKey, "a key of a removed tenant")
	_, err = store.CreateTenant(ctx, "acme")
	require.NoError(t, err)
	all, err := store.Keys(ctx, "acme")
	require.NoError(t, err)
	assert.Empty(t, all, "keys of a tenant made again")
	refused(t, auth, secret, keys.ErrUnknownKey, "a key of a removed tenant")
}

// TestRemove: a removed key leaves neither record nor index entry, and its secret is unknown.
func TestRemove(t *testing.T) {
	ctx, res, store, auth := setup(t)
	secret, k, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)
	require.NoError(t, store.Remove(ctx, k.ID))
	_, err = store.Get(ctx, k.ID)
	assert.ErrorIs(t, err, keys.ErrUnknownKey, "a removed key")
	_, err = res.Keys.Get(ctx, "id."+k.ID)
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the index entry of a removed key")
	refused(t, auth, secret, keys.ErrUnknownKey, "a removed key")
	assert.ErrorIs(t, store.Remove(ctx, k.ID), keys.ErrUnknownKey, "removing again")
	assert.ErrorIs(t, store.Remove(ctx, "not-an-id"), keys.ErrUnknownKey)
}

// TestCompact: compaction takes the markers of removed keys out of the bucket's stream, and
// keeps the keys that are there, a key written again after its marker included; a cache that
// starts after it loads the bucket.
func TestCompact(t *testing.T) {
	ctx, res, store, auth := setup(t)
	bounded := store.WithCache(auth, 1, nil)
	// A fixed secret seeded, removed and seeded again (as the standalone's dev key may be).
	const fixed = "a-fixed-secret-0123456789"
	first, err := store.Seed(ctx, fixed, keys.NewKey{Tenant: "other", Role: keys.RoleUser})
	require.NoError(t, err)
	require.NoError(t, bounded.Remove(ctx, first.ID))
	again, err := store.Seed(ctx, fixed, keys.NewKey{Tenant: "other", Role: keys.RoleUser})
	require.NoError(t, err)
	var gone []keys.Key
	var kept string
	// Then keys revoked, the older ones removed: the stream's newest message is a marker.
	for i := range 3 {
		secret, k, err := bounded.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
		require.NoError(t, err)
		_, err = bounded.RevokeID(ctx, k.ID)
		require.NoError(t, err)
		if i < 2 {
			gone = append(gone, k)
		} else {
			kept = secret
		}
		time.Sleep(2 * time.Millisecond) // revocation times apart
	}
	assert.Equal(t, int64(3), bounded.Removed(), "keys removed")

	stream, err := res.JS.Stream(ctx, "KV_"+res.Keys.Bucket())
	require.NoError(t, err)
	holds := func(key string) bool {
		_, err := stream.GetLastMsgForSubject(ctx, "$KV."+res.Keys.Bucket()+"."+key)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	for _, k := range gone {
		require.True(t, holds("id."+k.ID), "the marker of a removed key's index entry, before")
	}
	require.NoError(t, bounded.Compact(ctx, time.Hour))
	for _, k := range gone {
		assert.True(t, holds("id."+k.ID), "a marker younger than the age compacted")
	}
	require.NoError(t, bounded.Compact(ctx, 0))
	for _, k := range append(gone, first) {
		assert.False(t, holds("id."+k.ID), "the marker of key %s's index entry", k.ID)
	}
	assert.True(t, holds(keys.Hash(fixed)), "the key seeded again after its marker")

	cache, err := keys.NewAuthenticator(ctx, res.Keys, "", nil)
	require.NoError(t, err, "a cache loading the compacted bucket")
	defer func() { assert.NoError(t, cache.Close()) }()
	_, err = cache.Authenticate(kept)
	assert.ErrorIs(t, err, keys.ErrRevoked, "the revoked key kept")
	k, err := cache.Authenticate(fixed)
	require.NoError(t, err, "the key seeded again")
	assert.Equal(t, again.ID, k.ID)
	for _, tenant := range []string{"acme", "other"} {
		want, err := store.Keys(ctx, tenant)
		require.NoError(t, err)
		got, err := store.WithCache(cache, 0, nil).Keys(ctx, tenant)
		require.NoError(t, err)
		assert.Equal(t, want, got, "the keys of %s", tenant)
	}
}
