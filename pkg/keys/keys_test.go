package keys_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natstest"
)

const adminKey = "admin-secret-0123456789"

// setup starts NATS with agentbus's resources and returns a store and an authenticator over them.
func setup(t *testing.T) (context.Context, *bus.Resources, *keys.Store, *keys.Authenticator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	res := natstest.Bus(t, bus.Config{})
	auth, err := keys.NewAuthenticator(ctx, res.Keys, adminKey, nil)
	require.NoError(t, err, "NewAuthenticator")
	t.Cleanup(func() {
		assert.NoError(t, auth.Close(), "closing authenticator")
	})
	return ctx, res, keys.NewStore(res.JS, res.Keys, res.Tenants), auth
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			require.NoError(t, err, "not within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// refused waits until the authenticator refuses secret with want (what names the key).
func refused(t *testing.T, auth *keys.Authenticator, secret string, want error, what string) {
	t.Helper()
	eventually(t, time.Second, func() error {
		if _, err := auth.Authenticate(secret); !errors.Is(err, want) {
			return errors.New(what + ": err = " + errString(err))
		}
		return nil
	})
}

// authenticates waits until the authenticator's watch has delivered the key.
func authenticates(t *testing.T, auth *keys.Authenticator, secret string) keys.Key {
	t.Helper()
	var k keys.Key
	eventually(t, time.Second, func() error {
		var err error
		k, err = auth.Authenticate(secret)
		return err
	})
	return k
}

func TestGenerate(t *testing.T) {
	seen := make(map[string]bool)
	for range 100 {
		s := keys.Generate()
		require.Equal(t, "abk_", keys.Prefix, "keys.Prefix")
		require.True(t, strings.HasPrefix(s, "abk_"), "Generate() = %q, want prefix abk_", s)
		// 256 random bits in unpadded base64url are 43 characters.
		body := strings.TrimPrefix(s, keys.Prefix)
		assert.Len(t, body, 43, "Generate() = %q: body %q is not 43 base64url characters", s, body)
		assert.False(t, strings.ContainsAny(body, "+/="), "Generate() = %q: body %q is not 43 base64url characters", s, body)
		require.False(t, seen[s], "Generate() returned %q twice", s)
		seen[s] = true
	}
}

func TestHash(t *testing.T) {
	// SHA-256("abc"), FIPS 180-2.
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	assert.Equal(t, want, keys.Hash("abc"), "Hash(abc)")
}

func TestRoleValid(t *testing.T) {
	tests := []struct {
		name string
		role keys.Role
		want bool
	}{
		{name: "system admin", role: keys.RoleSystemAdmin, want: true},
		{name: "tenant admin", role: keys.RoleTenantAdmin, want: true},
		{name: "user", role: keys.RoleUser, want: true},
		{name: "empty", role: "", want: false},
		{name: "unknown", role: "root", want: false},
		{name: "case differs", role: "User", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.role.Valid(), "Role(%q).Valid()", tt.role)
		})
	}
}

func TestCreateAuthenticates(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "ci", CreatedBy: "admin"})
	require.NoError(t, err, "Create")
	assert.True(t, strings.HasPrefix(secret, keys.Prefix), "secret %q lacks prefix %q", secret, keys.Prefix)
	assert.NotEmpty(t, rec.ID, "Create record = %+v", rec)
	assert.Equal(t, "acme", rec.Tenant, "Create record = %+v", rec)
	assert.Equal(t, keys.RoleUser, rec.Role, "Create record = %+v", rec)
	assert.Equal(t, "ci", rec.Name, "Create record = %+v", rec)
	assert.Equal(t, "admin", rec.CreatedBy, "Create record = %+v", rec)
	assert.False(t, rec.CreatedAt.IsZero(), "Create record = %+v", rec)
	assert.Nil(t, rec.RevokedAt, "Create record = %+v", rec)
	got := authenticates(t, auth, secret)
	assert.Equal(t, rec.ID, got.ID, "Authenticate = %+v, want %+v", got, rec)
	assert.Equal(t, "acme", got.Tenant, "Authenticate = %+v, want %+v", got, rec)
	assert.Equal(t, keys.RoleUser, got.Role, "Authenticate = %+v, want %+v", got, rec)
}

func TestAuthenticatorLoadsExistingKeys(t *testing.T) {
	ctx, res, store, _ := setup(t)
	secret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleTenantAdmin})
	require.NoError(t, err)
	// A second authenticator started after the key exists has it on return, without polling.
	auth2, err := keys.NewAuthenticator(ctx, res.Keys, "", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = auth2.Close() })
	got, err := auth2.Authenticate(secret)
	require.NoError(t, err, "Authenticate right after NewAuthenticator")
	assert.Equal(t, rec.ID, got.ID, "Authenticate = %+v, want %+v", got, rec)
	_, err = auth2.Authenticate(adminKey)
	assert.ErrorIs(t, err, keys.ErrUnknownKey, "admin key with no admin configured")
}

func TestRevoke(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	other, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)
	authenticates(t, auth, other)

	require.NoError(t, store.Revoke(ctx, secret), "Revoke")
	refused(t, auth, secret, keys.ErrRevoked, "revoked key still accepted")
	_, err = auth.Authenticate(other)
	assert.NoError(t, err, "revoking one key affected another")
	// Revoking again is a no-op, and keeps the first revocation time.
	before, err := store.Keys(ctx, "acme")
	require.NoError(t, err)
	assert.NoError(t, store.Revoke(ctx, secret), "second Revoke")
	after, err := store.Keys(ctx, "acme")
	require.NoError(t, err)
	revokedAt := func(ks []keys.Key) map[string]*time.Time {
		m := make(map[string]*time.Time)
		for _, k := range ks {
			m[k.ID] = k.RevokedAt.Std()
		}
		return m
	}
	b, a := revokedAt(before), revokedAt(after)
	for id, t0 := range b {
		t1 := a[id]
		if assert.Equal(t, t0 == nil, t1 == nil, "key %s: revokedAt %v changed to %v by a second Revoke", id, t0, t1) && t0 != nil {
			assert.True(t, t0.Equal(*t1), "key %s: revokedAt %v changed to %v by a second Revoke", id, t0, t1)
		}
	}
	assert.ErrorIs(t, store.Revoke(ctx, keys.Generate()), keys.ErrUnknownKey, "Revoke of an unknown key")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestAuthenticateUnknown(t *testing.T) {
	_, _, _, auth := setup(t)
	tests := []struct {
		name   string
		secret string
	}{
		{name: "empty", secret: ""},
		{name: "generated but never stored", secret: keys.Generate()},
		{name: "admin key with a suffix", secret: adminKey + "x"},
		{name: "admin key's hash", secret: keys.Hash(adminKey)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := auth.Authenticate(tt.secret)
			assert.ErrorIs(t, err, keys.ErrUnknownKey, "Authenticate(%q) = %+v", tt.secret, k)
		})
	}
}

func TestStoredHashDoesNotAuthenticate(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)
	// Someone who reads the bucket learns hashes; a hash must not work as a key.
	_, err = auth.Authenticate(keys.Hash(secret))
	assert.ErrorIs(t, err, keys.ErrUnknownKey, "Authenticate(hash)")
}

func TestAdminKey(t *testing.T) {
	_, _, _, auth := setup(t)
	k, err := auth.Authenticate(adminKey)
	require.NoError(t, err, "Authenticate(admin key)")
	assert.Equal(t, keys.RoleSystemAdmin, k.Role, "admin key role")
}

func TestSeed(t *testing.T) {
	ctx, _, store, auth := setup(t)
	const secret = "dev-key-0123456789abcdef"
	first, err := store.Seed(ctx, secret, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "dev"})
	require.NoError(t, err, "first Seed")
	second, err := store.Seed(ctx, secret, keys.NewKey{Tenant: "other", Role: keys.RoleUser, Name: "changed"})
	require.NoError(t, err, "second Seed")
	assert.Equal(t, first.ID, second.ID, "second Seed = %+v, want the first record %+v", second, first)
	assert.Equal(t, "default", second.Tenant, "second Seed = %+v, want the first record %+v", second, first)
	assert.Equal(t, keys.RoleTenantAdmin, second.Role, "second Seed = %+v, want the first record %+v", second, first)
	assert.Equal(t, "dev", second.Name, "second Seed = %+v, want the first record %+v", second, first)
	got := authenticates(t, auth, secret)
	assert.Equal(t, first.ID, got.ID, "Authenticate = %+v, want %+v", got, first)
	assert.Equal(t, "default", got.Tenant, "Authenticate = %+v, want %+v", got, first)
	assert.Equal(t, keys.RoleTenantAdmin, got.Role, "Authenticate = %+v, want %+v", got, first)
	all, err := store.Keys(ctx, "")
	require.NoError(t, err)
	assert.Len(t, all, 1, "Keys after seeding twice")
}

func TestSeedInvalid(t *testing.T) {
	ctx, _, store, _ := setup(t)
	tests := []struct {
		name    string
		secret  string
		nk      keys.NewKey
		wantErr error
	}{
		{name: "unknown role", secret: keys.Generate(), nk: keys.NewKey{Tenant: "acme", Role: "root"}},
		{name: "empty role", secret: keys.Generate(), nk: keys.NewKey{Tenant: "acme"}},
		{name: "invalid tenant", secret: keys.Generate(), nk: keys.NewKey{Tenant: "ac me", Role: keys.RoleUser}, wantErr: ident.ErrInvalidTenant},
		{name: "empty tenant for a user key", secret: keys.Generate(), nk: keys.NewKey{Role: keys.RoleTenantAdmin}, wantErr: ident.ErrInvalidTenant},
		{name: "short secret", secret: "short-secret-15", nk: keys.NewKey{Tenant: "acme", Role: keys.RoleUser}},
		{name: "empty secret", secret: "", nk: keys.NewKey{Tenant: "acme", Role: keys.RoleUser}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := store.Seed(ctx, tt.secret, tt.nk)
			require.Error(t, err, "Seed succeeded, want an error")
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr, "Seed err")
			}
		})
	}
	all, err := store.Keys(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, all, "failed Seeds stored records")
	// A system-admin key belongs to no tenant.
	_, err = store.Seed(ctx, keys.Generate(), keys.NewKey{Role: keys.RoleSystemAdmin})
	assert.NoError(t, err, "Seed of a tenantless system-admin key")
}

func TestKeysAtRestAreHashesOnly(t *testing.T) {
	ctx, res, store, _ := setup(t)
	var secrets []string
	for i, nk := range []keys.NewKey{
		{Tenant: "acme", Role: keys.RoleUser, Name: "one"},
		{Tenant: "acme", Role: keys.RoleTenantAdmin, Name: "two"},
		{Tenant: "other", Role: keys.RoleUser, Name: "three"},
	} {
		s, _, err := store.Create(ctx, nk)
		require.NoError(t, err, "Create %d", i)
		secrets = append(secrets, s)
	}
	const seeded = "seeded-dev-key-0123456789"
	_, err := store.Seed(ctx, seeded, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin})
	require.NoError(t, err)
	secrets = append(secrets, seeded)
	// A revoked record is rewritten; it must not bring the secret in either.
	require.NoError(t, store.Revoke(ctx, secrets[0]))

	lister, err := res.Keys.ListKeys(ctx)
	require.NoError(t, err)
	var entries int
	ids := make(map[string]string)
	records := make(map[string]map[string]any)
	for k := range lister.Keys() {
		entries++
		e, err := res.Keys.Get(ctx, k)
		require.NoError(t, err, "Get(%q)", k)
		// The bucket keeps history: check every revision, not only the latest.
		hist, err := res.Keys.History(ctx, k)
		require.NoError(t, err, "History(%q)", k)
		values := [][]byte{e.Value()}
		for _, h := range hist {
			values = append(values, h.Value())
		}
		for _, s := range secrets {
			body := strings.TrimPrefix(s, keys.Prefix)
			for _, needle := range []string{s, body} {
				assert.NotContains(t, k, needle, "entry key %q contains secret %q", k, needle)
				for _, v := range values {
					assert.NotContains(t, string(v), needle, "entry %q value %s contains secret %q", k, v, needle)
				}
			}
		}
		if id, ok := strings.CutPrefix(k, "id."); ok {
			// The id index holds the hash of the key with that id, nothing else.
			ids[id] = string(e.Value())
			continue
		}
		assert.Len(t, k, 64, "entry key %q is not a hex SHA-256", k)
		assert.Empty(t, strings.Trim(k, "0123456789abcdef"), "entry key %q is not a hex SHA-256", k)
		var rec map[string]any
		assert.NoError(t, json.Unmarshal(e.Value(), &rec), "entry %q is not a JSON record", k)
		records[k] = rec
	}
	assert.Equal(t, 2*len(secrets), entries, "bucket entries (a record and an index entry per key)")
	for id, h := range ids {
		rec, ok := records[h]
		if assert.True(t, ok, "index entry id.%s = %q, which is not the hash of a key's record", id, h) {
			assert.Equal(t, id, rec["id"], "index entry id.%s = %q, which is not the hash of that key's record", id, h)
		}
	}
	for _, s := range secrets {
		_, err := res.Keys.Get(ctx, keys.Hash(s))
		assert.NoError(t, err, "no entry under the hash of a secret")
	}
}

func TestTenants(t *testing.T) {
	ctx, _, store, _ := setup(t)
	created, err := store.CreateTenant(ctx, "acme")
	require.NoError(t, err, "CreateTenant")
	assert.Equal(t, "acme", created.ID, "CreateTenant = %+v", created)
	assert.False(t, created.CreatedAt.IsZero(), "CreateTenant = %+v", created)
	_, err = store.CreateTenant(ctx, "acme")
	assert.ErrorIs(t, err, keys.ErrTenantExists, "duplicate CreateTenant")
	assert.NoError(t, store.EnsureTenant(ctx, "acme"), "EnsureTenant of an existing tenant")
	assert.NoError(t, store.EnsureTenant(ctx, "fresh"), "EnsureTenant of a new tenant")
	got, err := store.GetTenant(ctx, "acme")
	require.NoError(t, err, "GetTenant")
	assert.Equal(t, "acme", got.ID, "GetTenant = %+v, want %+v", got, created)
	assert.True(t, got.CreatedAt.Equal(created.CreatedAt), "GetTenant = %+v, want %+v", got, created)
	_, err = store.GetTenant(ctx, "fresh")
	assert.NoError(t, err, "GetTenant of an ensured tenant")

	invalid := []struct {
		name string
		id   string
	}{
		{name: "empty", id: ""},
		{name: "space", id: "ac me"},
		{name: "dot", id: "ac.me"},
		{name: "wildcard", id: "*"},
		{name: "65 chars", id: strings.Repeat("a", 65)},
		{name: "unicode", id: "acmé"},
	}
	for _, tt := range invalid {
		t.Run("create "+tt.name, func(t *testing.T) {
			_, err := store.CreateTenant(ctx, tt.id)
			assert.ErrorIs(t, err, ident.ErrInvalidTenant, "CreateTenant(%q)", tt.id)
			assert.Error(t, store.EnsureTenant(ctx, tt.id), "EnsureTenant(%q) succeeded", tt.id)
		})
		t.Run("get "+tt.name, func(t *testing.T) {
			_, err := store.GetTenant(ctx, tt.id)
			assert.ErrorIs(t, err, keys.ErrUnknownTenant, "GetTenant(%q)", tt.id)
		})
	}
	_, err = store.GetTenant(ctx, "nobody")
	assert.ErrorIs(t, err, keys.ErrUnknownTenant, "GetTenant(unknown)")
}

func TestKeysByTenant(t *testing.T) {
	ctx, _, store, _ := setup(t)
	got, err := store.Keys(ctx, "acme")
	assert.NoError(t, err, "Keys on an empty bucket")
	assert.Empty(t, got, "Keys on an empty bucket")
	want := map[string][]string{}
	for _, nk := range []keys.NewKey{
		{Tenant: "acme", Role: keys.RoleUser},
		{Tenant: "acme", Role: keys.RoleTenantAdmin},
		{Tenant: "other", Role: keys.RoleUser},
		{Tenant: "acme-2", Role: keys.RoleUser},
		{Role: keys.RoleSystemAdmin},
	} {
		_, k, err := store.Create(ctx, nk)
		require.NoError(t, err)
		want[nk.Tenant] = append(want[nk.Tenant], k.ID)
	}
	tests := []struct {
		name   string
		tenant string
		want   []string
	}{
		{name: "two keys", tenant: "acme", want: want["acme"]},
		{name: "one key", tenant: "other", want: want["other"]},
		{name: "prefix of another tenant is not matched", tenant: "acme-2", want: want["acme-2"]},
		{name: "no keys", tenant: "nobody", want: nil},
		{name: "all", tenant: "", want: slices.Concat(want["acme"], want["other"], want["acme-2"], want[""])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := store.Keys(ctx, tt.tenant)
			require.NoError(t, err)
			var ids []string
			for _, k := range got {
				if tt.tenant != "" {
					assert.Equal(t, tt.tenant, k.Tenant, "Keys(%q) returned a key of another tenant", tt.tenant)
				}
				ids = append(ids, k.ID)
			}
			assert.ElementsMatch(t, tt.want, ids, "Keys(%q) ids", tt.tenant)
		})
	}
}

func TestDeletedKeyIsUnknown(t *testing.T) {
	ctx, res, store, auth := setup(t)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)
	require.NoError(t, res.Keys.Purge(ctx, keys.Hash(secret)))
	refused(t, auth, secret, keys.ErrUnknownKey, "purged key")
	got, err := store.Keys(ctx, "acme")
	assert.NoError(t, err, "Keys after purge")
	assert.Empty(t, got, "Keys after purge")
}

func TestAuthenticatorIgnoresForeignEntries(t *testing.T) {
	ctx, res, store, auth := setup(t)
	// An entry that is not a hash (say, bucket metadata) and a hash-named entry with a bad
	// record must neither break the watch nor authenticate anything.
	_, err := res.Keys.Put(ctx, "meta.version", []byte("1"))
	require.NoError(t, err)
	bad := keys.Generate()
	_, err = res.Keys.Put(ctx, keys.Hash(bad), []byte("not json"))
	require.NoError(t, err)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret) // the watch still runs after the foreign entries
	_, err = auth.Authenticate(bad)
	assert.ErrorIs(t, err, keys.ErrUnknownKey, "key with a bad record")
}

func TestGetByID(t *testing.T) {
	ctx, _, store, _ := setup(t)
	_, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "ci", CreatedBy: "admin"})
	require.NoError(t, err)
	got, err := store.Get(ctx, rec.ID)
	require.NoError(t, err, "Get")
	assert.Equal(t, rec.ID, got.ID, "Get = %+v, want %+v", got, rec)
	assert.Equal(t, "acme", got.Tenant, "Get = %+v, want %+v", got, rec)
	assert.Equal(t, "ci", got.Name, "Get = %+v, want %+v", got, rec)
	assert.Equal(t, "admin", got.CreatedBy, "Get = %+v, want %+v", got, rec)
	assert.True(t, got.CreatedAt.Equal(rec.CreatedAt.Time), "Get = %+v, want %+v", got, rec)
	for _, tt := range []struct {
		name string
		id   string
	}{
		{name: "empty", id: ""},
		{name: "unknown uuid", id: "5b0c6f5e-2d39-4d3e-9c8e-0f7b1f2a3c4d"},
		{name: "upper-case form of a known id", id: strings.ToUpper(rec.ID)},
		{name: "urn form of a known id", id: "urn:uuid:" + rec.ID},
		{name: "not a KV key", id: "a b*>"},
		{name: "the hash", id: keys.Hash("x")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, err := store.Get(ctx, tt.id)
			assert.ErrorIs(t, err, keys.ErrUnknownKey, "Get(%q) = %+v", tt.id, k)
			k, err = store.RevokeID(ctx, tt.id)
			assert.ErrorIs(t, err, keys.ErrUnknownKey, "RevokeID(%q) = %+v", tt.id, k)
			_, k, _, err = store.Rotate(ctx, tt.id, "admin")
			assert.ErrorIs(t, err, keys.ErrUnknownKey, "Rotate(%q) = %+v", tt.id, k)
		})
	}
}

// A key record stored by an earlier release, whose times were written as time.Time writes them
// (nanoseconds, an offset), still reads, and is answered in the one form of every time.
func TestRecordWithEarlierTimesReads(t *testing.T) {
	ctx, res, store, _ := setup(t)
	secret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "ci"})
	require.NoError(t, err)
	old, err := json.Marshal(map[string]any{"id": rec.ID, "tenant": "acme", "role": "user", "name": "ci",
		"createdAt": "2026-05-01T10:20:21.887541162Z", "revokedAt": "2026-05-01T12:20:22+02:00"})
	require.NoError(t, err)
	_, err = res.Keys.Put(ctx, keys.Hash(secret), old)
	require.NoError(t, err)

	got, err := store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.True(t, got.CreatedAt.Equal(time.Date(2026, 5, 1, 10, 20, 21, 887541162, time.UTC)), "createdAt %v", got.CreatedAt)
	require.NotNil(t, got.RevokedAt)
	assert.True(t, got.RevokedAt.Equal(time.Date(2026, 5, 1, 10, 20, 22, 0, time.UTC)), "revokedAt %v", got.RevokedAt)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"createdAt":"2026-05-01T10:20:21.887Z"`)
	assert.Contains(t, string(b), `"revokedAt":"2026-05-01T10:20:22.000Z"`)
	listed, err := store.Keys(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, got, listed[0])
}

func TestIndexPointingElsewhereIsUnknown(t *testing.T) {
	ctx, res, store, _ := setup(t)
	_, a, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	other, b, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	// A damaged index entry naming another key's hash must not reach that key.
	_, err = res.Keys.Put(ctx, "id."+a.ID, []byte(keys.Hash(other)))
	require.NoError(t, err)
	_, err = store.RevokeID(ctx, a.ID)
	assert.ErrorIs(t, err, keys.ErrUnknownKey, "RevokeID through a wrong index entry")
	k, err := store.Get(ctx, b.ID)
	assert.NoError(t, err, "the other key: want it untouched")
	assert.Nil(t, k.RevokedAt, "the other key = %+v; want it untouched", k)
}

func TestRevokeID(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)
	revoked, err := store.RevokeID(ctx, rec.ID)
	require.NoError(t, err, "RevokeID")
	assert.Equal(t, rec.ID, revoked.ID, "RevokeID = %+v, want the record with revokedAt", revoked)
	// revoked.RevokedAt is dereferenced below.
	require.NotNil(t, revoked.RevokedAt, "RevokeID = %+v, want the record with revokedAt", revoked)
	refused(t, auth, secret, keys.ErrRevoked, "revoked key")
	again, err := store.RevokeID(ctx, rec.ID)
	require.NoError(t, err, "second RevokeID")
	require.NotNil(t, again.RevokedAt, "second RevokeID = %+v, want the record with revokedAt", again)
	assert.True(t, again.RevokedAt.Equal(revoked.RevokedAt.Time), "second RevokeID moved revokedAt from %v to %v", revoked.RevokedAt, again.RevokedAt)
}

func TestRotate(t *testing.T) {
	ctx, _, store, auth := setup(t)
	oldSecret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleTenantAdmin, Name: "ci", CreatedBy: "admin"})
	require.NoError(t, err)
	authenticates(t, auth, oldSecret)
	secret, k, old, err := store.Rotate(ctx, rec.ID, rec.ID)
	require.NoError(t, err, "Rotate")
	assert.NotEqual(t, oldSecret, secret, "Rotate secret")
	assert.True(t, strings.HasPrefix(secret, keys.Prefix), "Rotate secret = %q", secret)
	assert.NotEqual(t, rec.ID, k.ID, "new record = %+v", k)
	assert.Equal(t, "acme", k.Tenant, "new record = %+v", k)
	assert.Equal(t, keys.RoleTenantAdmin, k.Role, "new record = %+v", k)
	assert.Equal(t, "ci", k.Name, "new record = %+v", k)
	assert.Equal(t, rec.ID, k.CreatedBy, "new record = %+v", k)
	assert.Nil(t, k.RevokedAt, "new record = %+v", k)
	assert.Equal(t, rec.ID, old.ID, "old record = %+v, want it revoked", old)
	assert.NotNil(t, old.RevokedAt, "old record = %+v, want it revoked", old)
	authenticates(t, auth, secret)
	refused(t, auth, oldSecret, keys.ErrRevoked, "rotated key")
	// The old key is revoked: rotating it again must not yield another working key.
	_, _, _, err = store.Rotate(ctx, rec.ID, rec.ID)
	assert.ErrorIs(t, err, keys.ErrRevoked, "Rotate of a revoked key")
	all, err := store.Keys(ctx, "acme")
	require.NoError(t, err)
	assert.Len(t, all, 2, "Keys after rotating: want the old and the new key")
}

func TestRotateConcurrently(t *testing.T) {
	ctx, _, store, _ := setup(t)
	_, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, _, _, err := store.Rotate(ctx, rec.ID, "admin")
			errs <- err
		}()
	}
	var won int
	for range n {
		if err := <-errs; err == nil {
			won++
		} else {
			assert.ErrorIs(t, err, keys.ErrRevoked, "Rotate")
		}
	}
	assert.Equal(t, 1, won, "concurrent rotations that succeeded")
	all, err := store.Keys(ctx, "acme")
	require.NoError(t, err)
	var live int
	for _, k := range all {
		if k.RevokedAt == nil {
			live++
		}
	}
	assert.Equal(t, 1, live, "live keys after concurrent rotations: %+v", all)
}

func TestSeedIndexesOldRecords(t *testing.T) {
	ctx, res, store, _ := setup(t)
	const secret = "dev-key-0123456789abcdef"
	first, err := store.Seed(ctx, secret, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "dev"})
	require.NoError(t, err)
	// A record stored before the id index existed has no index entry.
	require.NoError(t, res.Keys.Purge(ctx, "id."+first.ID))
	_, err = store.Get(ctx, first.ID)
	require.ErrorIs(t, err, keys.ErrUnknownKey, "Get without an index entry")
	_, err = store.Seed(ctx, secret, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "dev"})
	require.NoError(t, err)
	k, err := store.Get(ctx, first.ID)
	assert.NoError(t, err, "Get after seeding again")
	assert.Equal(t, first.ID, k.ID, "Get after seeding again = %+v, want %+v", k, first)
}

func TestDeleteTenant(t *testing.T) {
	ctx, _, store, auth := setup(t)
	for _, id := range []string{"acme", "other", "acme-2"} {
		_, err := store.CreateTenant(ctx, id)
		require.NoError(t, err)
	}
	tenants, err := store.ListTenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"acme", "acme-2", "other"}, tenantIDs(tenants), "ListTenants")
	var acme []string
	for range 3 {
		s, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
		require.NoError(t, err)
		acme = append(acme, s)
	}
	otherKey, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme-2", Role: keys.RoleUser})
	require.NoError(t, err)
	for _, s := range append(slices.Clone(acme), otherKey) {
		authenticates(t, auth, s)
	}

	require.NoError(t, store.DeleteTenant(ctx, "acme"), "DeleteTenant")
	_, err = store.GetTenant(ctx, "acme")
	assert.ErrorIs(t, err, keys.ErrUnknownTenant, "GetTenant after delete")
	tenants, err = store.ListTenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"acme-2", "other"}, tenantIDs(tenants), "ListTenants after delete")
	for _, s := range acme {
		refused(t, auth, s, keys.ErrUnknownKey, "key of a deleted tenant")
	}
	_, err = auth.Authenticate(otherKey)
	assert.NoError(t, err, "deleting acme affected acme-2's key")
	assert.ErrorIs(t, store.DeleteTenant(ctx, "acme"), keys.ErrUnknownTenant, "second DeleteTenant")
	for _, id := range []string{"nobody", "", "ac me"} {
		assert.ErrorIs(t, store.DeleteTenant(ctx, id), keys.ErrUnknownTenant, "DeleteTenant(%q)", id)
	}
	// The id is free again, and the old keys are gone.
	_, err = store.CreateTenant(ctx, "acme")
	require.NoError(t, err, "CreateTenant after delete")
	_, err = auth.Authenticate(acme[0])
	assert.ErrorIs(t, err, keys.ErrUnknownKey, "old key after the tenant came back")
}

func TestDeleteTenantFinishesAfterFailure(t *testing.T) {
	ctx, res, store, auth := setup(t)
	_, err := store.CreateTenant(ctx, "acme")
	require.NoError(t, err)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)
	// A deletion that stopped after marking the tenant: unknown to readers, still there to finish.
	_, err = res.Tenants.Put(ctx, "acme", []byte(`{"id":"acme","createdAt":"2024-01-01T00:00:00Z","deletedAt":"2024-01-02T00:00:00Z"}`))
	require.NoError(t, err)
	_, err = store.GetTenant(ctx, "acme")
	assert.ErrorIs(t, err, keys.ErrUnknownTenant, "GetTenant of a marked tenant")
	_, err = store.CreateTenant(ctx, "acme")
	assert.ErrorIs(t, err, keys.ErrTenantExists, "CreateTenant while deleting")
	require.NoError(t, store.DeleteTenant(ctx, "acme"), "DeleteTenant of a marked tenant")
	refused(t, auth, secret, keys.ErrUnknownKey, "key of a deleted tenant")
}

// TestRetireThenRemoveTenant: a retired tenant is unknown and its keys revoked, its id still
// taken until RemoveTenant, which leaves a tenant not retired alone.
func TestRetireThenRemoveTenant(t *testing.T) {
	ctx, _, store, auth := setup(t)
	for _, id := range []string{"acme", "kept"} {
		_, err := store.CreateTenant(ctx, id)
		require.NoError(t, err)
	}
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	authenticates(t, auth, secret)

	require.NoError(t, store.RetireTenant(ctx, "acme"))
	require.NoError(t, store.RetireTenant(ctx, "acme"), "retiring again")
	_, err = store.GetTenant(ctx, "acme")
	assert.ErrorIs(t, err, keys.ErrUnknownTenant, "a retired tenant")
	_, err = store.CreateTenant(ctx, "acme")
	assert.ErrorIs(t, err, keys.ErrTenantExists, "the id of a retired tenant")
	refused(t, auth, secret, keys.ErrRevoked, "key of a retired tenant")

	assert.Error(t, store.RemoveTenant(ctx, "kept"), "removing a tenant not retired")
	_, err = store.GetTenant(ctx, "kept")
	assert.NoError(t, err, "a tenant RemoveTenant refused")
	require.NoError(t, store.RemoveTenant(ctx, "acme"))
	require.NoError(t, store.RemoveTenant(ctx, "acme"), "removing again")
	_, err = store.CreateTenant(ctx, "acme")
	assert.NoError(t, err, "the id of a removed tenant")
	assert.ErrorIs(t, store.RetireTenant(ctx, "nobody"), keys.ErrUnknownTenant)
}

// TestAuthenticatorRevision: the authenticator's revision reaches the bucket's after a write,
// and then it authenticates as the bucket says.
func TestAuthenticatorRevision(t *testing.T) {
	ctx, res, store, auth := setup(t)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	rev, err := bus.NewestRevision(ctx, res.Keys)
	require.NoError(t, err)
	require.NotZero(t, rev)
	eventually(t, time.Second, func() error {
		if auth.Revision() < rev {
			return errors.New("the authenticator's revision is behind the bucket's")
		}
		return nil
	})
	_, err = auth.Authenticate(secret)
	require.NoError(t, err, "a key created at or before the authenticator's revision")

	require.NoError(t, store.Revoke(ctx, secret))
	rev, err = bus.NewestRevision(ctx, res.Keys)
	require.NoError(t, err)
	eventually(t, time.Second, func() error {
		if auth.Revision() < rev {
			return errors.New("the authenticator's revision is behind the bucket's")
		}
		return nil
	})
	_, err = auth.Authenticate(secret)
	assert.ErrorIs(t, err, keys.ErrRevoked, "a key revoked at or before the authenticator's revision")
}

func tenantIDs(ts []keys.Tenant) []string {
	var ids []string
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

// An authenticator whose connection closed first (an ingress losing NATS as it stops) still
// closes, and leaves no goroutine behind: TestMain's leak check would find one.
func TestAuthenticatorClosesAfterItsConnection(t *testing.T) {
	s := natstest.Server(t, t.TempDir())
	nc := natstest.Conn(t, s)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(t, err)
	auth, err := keys.NewAuthenticator(ctx, res.Keys, "", nil)
	require.NoError(t, err)
	nc.Close()
	assert.NoError(t, auth.Close())
}

// TestOnRevoked: the cache tells its OnRevoked funcs of each key it stops accepting, once:
// revoked, or removed with its tenant, but not a key created, a revoked key removed, nor after
// the func stopped.
func TestOnRevoked(t *testing.T) {
	ctx, _, store, auth := setup(t)
	ended := make(chan string, 16)
	stop := auth.OnRevoked(func(id string) { ended <- id })
	require.NoError(t, store.EnsureTenant(ctx, "acme"))
	s1, k1, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "one"})
	require.NoError(t, err)
	s2, k2, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "two"})
	require.NoError(t, err)
	authenticates(t, auth, s1)
	authenticates(t, auth, s2)
	next := func(what string) string {
		t.Helper()
		select {
		case id := <-ended:
			return id
		case <-time.After(5 * time.Second):
			require.FailNow(t, "no key ended", what)
			return ""
		}
	}

	_, err = store.RevokeID(ctx, k1.ID)
	require.NoError(t, err)
	assert.Equal(t, k1.ID, next("the revoked key"))
	require.NoError(t, store.DeleteTenant(ctx, "acme"))
	assert.Equal(t, k2.ID, next("the key of the deleted tenant"))
	refused(t, auth, s2, keys.ErrUnknownKey, "the deleted tenant's key")
	assert.Empty(t, ended, "a key ended twice, or a created one")

	stop()
	require.NoError(t, store.EnsureTenant(ctx, "beta"))
	s3, k3, err := store.Create(ctx, keys.NewKey{Tenant: "beta", Role: keys.RoleUser, Name: "three"})
	require.NoError(t, err)
	authenticates(t, auth, s3)
	_, err = store.RevokeID(ctx, k3.ID)
	require.NoError(t, err)
	refused(t, auth, s3, keys.ErrRevoked, "the revoked key")
	assert.Empty(t, ended, "a func told after it stopped")
}

// TestHoldDeletedIDs: a Store holding deleted ids refuses a tenant of a deleted tenant's id until
// the hold has passed since the deletion, as an ErrTenantExists that says when; a Store without
// a hold takes it at once.
func TestHoldDeletedIDs(t *testing.T) {
	ctx, _, store, _ := setup(t)
	const hold = time.Second
	held := store.HoldDeletedIDs(hold)
	_, err := held.CreateTenant(ctx, "acme")
	require.NoError(t, err, "a new id")
	require.NoError(t, held.DeleteTenant(ctx, "acme"))
	deleted := time.Now()

	_, err = held.CreateTenant(ctx, "acme")
	var he *keys.HeldIDError
	require.ErrorAs(t, err, &he, "the id of a tenant just deleted")
	assert.ErrorIs(t, err, keys.ErrTenantExists)
	assert.WithinDuration(t, deleted.Add(hold), he.FreeAt, 500*time.Millisecond, "when the id is free")
	assert.Equal(t, hold, he.Hold)
	_, err = held.CreateTenant(ctx, "beta")
	require.NoError(t, err, "another id")
	require.ErrorAs(t, held.EnsureTenant(ctx, "acme"), &he, "ensuring a tenant whose id is held")
	require.NoError(t, held.EnsureTenant(ctx, "beta"), "ensuring a tenant that exists")

	_, err = held.CreateTenant(ctx, "gamma")
	require.NoError(t, err)
	require.NoError(t, held.AbandonTenant(ctx, "gamma"))
	_, err = held.CreateTenant(ctx, "gamma")
	require.NoError(t, err, "the id of a tenant abandoned is not held")

	time.Sleep(time.Until(he.FreeAt))
	_, err = held.CreateTenant(ctx, "acme")
	require.NoError(t, err, "the id once its hold passed")
	require.NoError(t, store.DeleteTenant(ctx, "acme"))
	_, err = store.CreateTenant(ctx, "acme")
	require.NoError(t, err, "a Store without a hold")
}
