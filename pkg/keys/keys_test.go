package keys_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

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
	if err != nil {
		t.Fatalf("NewAuthenticator: %v", err)
	}
	t.Cleanup(func() {
		if err := auth.Close(); err != nil {
			t.Errorf("closing authenticator: %v", err)
		}
	})
	return ctx, res, keys.NewStore(res.Keys, res.Tenants), auth
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
			t.Fatalf("not within %v: %v", within, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
		if !strings.HasPrefix(s, "abk_") || keys.Prefix != "abk_" {
			t.Fatalf("Generate() = %q, want prefix abk_", s)
		}
		// 256 random bits in unpadded base64url are 43 characters.
		if body := strings.TrimPrefix(s, keys.Prefix); len(body) != 43 || strings.ContainsAny(body, "+/=") {
			t.Errorf("Generate() = %q: body %q is not 43 base64url characters", s, body)
		}
		if seen[s] {
			t.Fatalf("Generate() returned %q twice", s)
		}
		seen[s] = true
	}
}

func TestHash(t *testing.T) {
	// SHA-256("abc"), FIPS 180-2.
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := keys.Hash("abc"); got != want {
		t.Errorf("Hash(abc) = %q, want %q", got, want)
	}
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
			if got := tt.role.Valid(); got != tt.want {
				t.Errorf("Role(%q).Valid() = %v, want %v", tt.role, got, tt.want)
			}
		})
	}
}

func TestCreateAuthenticates(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "ci", CreatedBy: "admin"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !strings.HasPrefix(secret, keys.Prefix) {
		t.Errorf("secret %q lacks prefix %q", secret, keys.Prefix)
	}
	if rec.ID == "" || rec.Tenant != "acme" || rec.Role != keys.RoleUser || rec.Name != "ci" || rec.CreatedBy != "admin" || rec.CreatedAt.IsZero() || rec.RevokedAt != nil {
		t.Errorf("Create record = %+v", rec)
	}
	got := authenticates(t, auth, secret)
	if got.ID != rec.ID || got.Tenant != "acme" || got.Role != keys.RoleUser {
		t.Errorf("Authenticate = %+v, want %+v", got, rec)
	}
}

func TestAuthenticatorLoadsExistingKeys(t *testing.T) {
	ctx, res, store, _ := setup(t)
	secret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleTenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	// A second authenticator started after the key exists has it on return, without polling.
	auth2, err := keys.NewAuthenticator(ctx, res.Keys, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = auth2.Close() })
	got, err := auth2.Authenticate(secret)
	if err != nil {
		t.Fatalf("Authenticate right after NewAuthenticator: %v", err)
	}
	if got.ID != rec.ID {
		t.Errorf("Authenticate = %+v, want %+v", got, rec)
	}
	if _, err := auth2.Authenticate(adminKey); !errors.Is(err, keys.ErrUnknownKey) {
		t.Errorf("admin key with no admin configured: err = %v, want ErrUnknownKey", err)
	}
}

func TestRevoke(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	authenticates(t, auth, secret)
	authenticates(t, auth, other)

	if err := store.Revoke(ctx, secret); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	eventually(t, time.Second, func() error {
		if _, err := auth.Authenticate(secret); !errors.Is(err, keys.ErrRevoked) {
			return errors.New("revoked key still accepted: err = " + errString(err))
		}
		return nil
	})
	if _, err := auth.Authenticate(other); err != nil {
		t.Errorf("revoking one key affected another: %v", err)
	}
	// Revoking again is a no-op, and keeps the first revocation time.
	before, err := store.Keys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Revoke(ctx, secret); err != nil {
		t.Errorf("second Revoke: %v", err)
	}
	after, err := store.Keys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	revokedAt := func(ks []keys.Key) map[string]*time.Time {
		m := make(map[string]*time.Time)
		for _, k := range ks {
			m[k.ID] = k.RevokedAt
		}
		return m
	}
	b, a := revokedAt(before), revokedAt(after)
	for id, t0 := range b {
		t1 := a[id]
		if (t0 == nil) != (t1 == nil) || (t0 != nil && !t0.Equal(*t1)) {
			t.Errorf("key %s: revokedAt %v changed to %v by a second Revoke", id, t0, t1)
		}
	}
	if err := store.Revoke(ctx, keys.Generate()); !errors.Is(err, keys.ErrUnknownKey) {
		t.Errorf("Revoke of an unknown key: err = %v, want ErrUnknownKey", err)
	}
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
			if k, err := auth.Authenticate(tt.secret); !errors.Is(err, keys.ErrUnknownKey) {
				t.Errorf("Authenticate(%q) = %+v, %v; want ErrUnknownKey", tt.secret, k, err)
			}
		})
	}
}

func TestStoredHashDoesNotAuthenticate(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	authenticates(t, auth, secret)
	// Someone who reads the bucket learns hashes; a hash must not work as a key.
	if _, err := auth.Authenticate(keys.Hash(secret)); !errors.Is(err, keys.ErrUnknownKey) {
		t.Errorf("Authenticate(hash) err = %v, want ErrUnknownKey", err)
	}
}

func TestAdminKey(t *testing.T) {
	_, _, _, auth := setup(t)
	k, err := auth.Authenticate(adminKey)
	if err != nil {
		t.Fatalf("Authenticate(admin key): %v", err)
	}
	if k.Role != keys.RoleSystemAdmin {
		t.Errorf("admin key role = %q, want %q", k.Role, keys.RoleSystemAdmin)
	}
}

func TestSeed(t *testing.T) {
	ctx, _, store, auth := setup(t)
	const secret = "dev-key-0123456789abcdef"
	first, err := store.Seed(ctx, secret, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "dev"})
	if err != nil {
		t.Fatalf("first Seed: %v", err)
	}
	second, err := store.Seed(ctx, secret, keys.NewKey{Tenant: "other", Role: keys.RoleUser, Name: "changed"})
	if err != nil {
		t.Fatalf("second Seed: %v", err)
	}
	if second.ID != first.ID || second.Tenant != "default" || second.Role != keys.RoleTenantAdmin || second.Name != "dev" {
		t.Errorf("second Seed = %+v, want the first record %+v", second, first)
	}
	got := authenticates(t, auth, secret)
	if got.ID != first.ID || got.Tenant != "default" || got.Role != keys.RoleTenantAdmin {
		t.Errorf("Authenticate = %+v, want %+v", got, first)
	}
	all, err := store.Keys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Errorf("Keys after seeding twice = %d records, want 1: %+v", len(all), all)
	}
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
			if err == nil {
				t.Fatal("Seed succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Seed err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	all, err := store.Keys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("failed Seeds stored %d records: %+v", len(all), all)
	}
	// A system-admin key belongs to no tenant.
	if _, err := store.Seed(ctx, keys.Generate(), keys.NewKey{Role: keys.RoleSystemAdmin}); err != nil {
		t.Errorf("Seed of a tenantless system-admin key: %v", err)
	}
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
		if err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
		secrets = append(secrets, s)
	}
	const seeded = "seeded-dev-key-0123456789"
	if _, err := store.Seed(ctx, seeded, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin}); err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, seeded)
	// A revoked record is rewritten; it must not bring the secret in either.
	if err := store.Revoke(ctx, secrets[0]); err != nil {
		t.Fatal(err)
	}

	lister, err := res.Keys.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var entries int
	ids := make(map[string]string)
	records := make(map[string]map[string]any)
	for k := range lister.Keys() {
		entries++
		e, err := res.Keys.Get(ctx, k)
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		// The bucket keeps history: check every revision, not only the latest.
		hist, err := res.Keys.History(ctx, k)
		if err != nil {
			t.Fatalf("History(%q): %v", k, err)
		}
		values := [][]byte{e.Value()}
		for _, h := range hist {
			values = append(values, h.Value())
		}
		for _, s := range secrets {
			body := strings.TrimPrefix(s, keys.Prefix)
			for _, needle := range []string{s, body} {
				if strings.Contains(k, needle) {
					t.Errorf("entry key %q contains secret %q", k, needle)
				}
				for _, v := range values {
					if strings.Contains(string(v), needle) {
						t.Errorf("entry %q value %s contains secret %q", k, v, needle)
					}
				}
			}
		}
		if id, ok := strings.CutPrefix(k, "id."); ok {
			// The id index holds the hash of the key with that id, nothing else.
			ids[id] = string(e.Value())
			continue
		}
		if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
			t.Errorf("entry key %q is not a hex SHA-256", k)
		}
		var rec map[string]any
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Errorf("entry %q is not a JSON record: %v", k, err)
		}
		records[k] = rec
	}
	if entries != 2*len(secrets) {
		t.Errorf("bucket holds %d entries, want %d (a record and an index entry per key)", entries, 2*len(secrets))
	}
	for id, h := range ids {
		if rec, ok := records[h]; !ok || rec["id"] != id {
			t.Errorf("index entry id.%s = %q, which is not the hash of that key's record", id, h)
		}
	}
	for _, s := range secrets {
		if _, err := res.Keys.Get(ctx, keys.Hash(s)); err != nil {
			t.Errorf("no entry under the hash of a secret: %v", err)
		}
	}
}

func TestTenants(t *testing.T) {
	ctx, _, store, _ := setup(t)
	created, err := store.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatalf("CreateTenant: %v", err)
	}
	if created.ID != "acme" || created.CreatedAt.IsZero() {
		t.Errorf("CreateTenant = %+v", created)
	}
	if _, err := store.CreateTenant(ctx, "acme"); !errors.Is(err, keys.ErrTenantExists) {
		t.Errorf("duplicate CreateTenant err = %v, want ErrTenantExists", err)
	}
	if err := store.EnsureTenant(ctx, "acme"); err != nil {
		t.Errorf("EnsureTenant of an existing tenant: %v", err)
	}
	if err := store.EnsureTenant(ctx, "fresh"); err != nil {
		t.Errorf("EnsureTenant of a new tenant: %v", err)
	}
	got, err := store.GetTenant(ctx, "acme")
	if err != nil {
		t.Fatalf("GetTenant: %v", err)
	}
	if got.ID != "acme" || !got.CreatedAt.Equal(created.CreatedAt) {
		t.Errorf("GetTenant = %+v, want %+v", got, created)
	}
	if _, err := store.GetTenant(ctx, "fresh"); err != nil {
		t.Errorf("GetTenant of an ensured tenant: %v", err)
	}

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
			if _, err := store.CreateTenant(ctx, tt.id); !errors.Is(err, ident.ErrInvalidTenant) {
				t.Errorf("CreateTenant(%q) err = %v, want ErrInvalidTenant", tt.id, err)
			}
			if err := store.EnsureTenant(ctx, tt.id); err == nil {
				t.Errorf("EnsureTenant(%q) succeeded", tt.id)
			}
		})
		t.Run("get "+tt.name, func(t *testing.T) {
			if _, err := store.GetTenant(ctx, tt.id); !errors.Is(err, keys.ErrUnknownTenant) {
				t.Errorf("GetTenant(%q) err = %v, want ErrUnknownTenant", tt.id, err)
			}
		})
	}
	if _, err := store.GetTenant(ctx, "nobody"); !errors.Is(err, keys.ErrUnknownTenant) {
		t.Errorf("GetTenant(unknown) err = %v, want ErrUnknownTenant", err)
	}
}

func TestKeysByTenant(t *testing.T) {
	ctx, _, store, _ := setup(t)
	if got, err := store.Keys(ctx, "acme"); err != nil || len(got) != 0 {
		t.Errorf("Keys on an empty bucket = %+v, %v; want none, nil", got, err)
	}
	want := map[string][]string{}
	for _, nk := range []keys.NewKey{
		{Tenant: "acme", Role: keys.RoleUser},
		{Tenant: "acme", Role: keys.RoleTenantAdmin},
		{Tenant: "other", Role: keys.RoleUser},
		{Tenant: "acme-2", Role: keys.RoleUser},
		{Role: keys.RoleSystemAdmin},
	} {
		_, k, err := store.Create(ctx, nk)
		if err != nil {
			t.Fatal(err)
		}
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
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, k := range got {
				if tt.tenant != "" && k.Tenant != tt.tenant {
					t.Errorf("Keys(%q) returned a key of tenant %q", tt.tenant, k.Tenant)
				}
				ids = append(ids, k.ID)
			}
			slices.Sort(ids)
			w := slices.Clone(tt.want)
			slices.Sort(w)
			if !slices.Equal(ids, w) {
				t.Errorf("Keys(%q) ids = %v, want %v", tt.tenant, ids, w)
			}
		})
	}
}

func TestDeletedKeyIsUnknown(t *testing.T) {
	ctx, res, store, auth := setup(t)
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	authenticates(t, auth, secret)
	if err := res.Keys.Purge(ctx, keys.Hash(secret)); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, func() error {
		if _, err := auth.Authenticate(secret); !errors.Is(err, keys.ErrUnknownKey) {
			return errors.New("purged key: err = " + errString(err))
		}
		return nil
	})
	if got, err := store.Keys(ctx, "acme"); err != nil || len(got) != 0 {
		t.Errorf("Keys after purge = %+v, %v; want none", got, err)
	}
}

func TestAuthenticatorIgnoresForeignEntries(t *testing.T) {
	ctx, res, store, auth := setup(t)
	// An entry that is not a hash (say, bucket metadata) and a hash-named entry with a bad
	// record must neither break the watch nor authenticate anything.
	if _, err := res.Keys.Put(ctx, "meta.version", []byte("1")); err != nil {
		t.Fatal(err)
	}
	bad := keys.Generate()
	if _, err := res.Keys.Put(ctx, keys.Hash(bad), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	authenticates(t, auth, secret) // the watch still runs after the foreign entries
	if _, err := auth.Authenticate(bad); !errors.Is(err, keys.ErrUnknownKey) {
		t.Errorf("key with a bad record: err = %v, want ErrUnknownKey", err)
	}
}

func TestGetByID(t *testing.T) {
	ctx, _, store, _ := setup(t)
	_, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "ci", CreatedBy: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.Get(ctx, rec.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.ID != rec.ID || got.Tenant != "acme" || got.Name != "ci" || got.CreatedBy != "admin" || !got.CreatedAt.Equal(rec.CreatedAt) {
		t.Errorf("Get = %+v, want %+v", got, rec)
	}
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
			if k, err := store.Get(ctx, tt.id); !errors.Is(err, keys.ErrUnknownKey) {
				t.Errorf("Get(%q) = %+v, %v; want ErrUnknownKey", tt.id, k, err)
			}
			if k, err := store.RevokeID(ctx, tt.id); !errors.Is(err, keys.ErrUnknownKey) {
				t.Errorf("RevokeID(%q) = %+v, %v; want ErrUnknownKey", tt.id, k, err)
			}
			if _, k, _, err := store.Rotate(ctx, tt.id, "admin"); !errors.Is(err, keys.ErrUnknownKey) {
				t.Errorf("Rotate(%q) = %+v, %v; want ErrUnknownKey", tt.id, k, err)
			}
		})
	}
}

func TestIndexPointingElsewhereIsUnknown(t *testing.T) {
	ctx, res, store, _ := setup(t)
	_, a, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	other, b, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	// A damaged index entry naming another key's hash must not reach that key.
	if _, err := res.Keys.Put(ctx, "id."+a.ID, []byte(keys.Hash(other))); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RevokeID(ctx, a.ID); !errors.Is(err, keys.ErrUnknownKey) {
		t.Errorf("RevokeID through a wrong index entry: err = %v, want ErrUnknownKey", err)
	}
	if k, err := store.Get(ctx, b.ID); err != nil || k.RevokedAt != nil {
		t.Errorf("the other key = %+v, %v; want it untouched", k, err)
	}
}

func TestRevokeID(t *testing.T) {
	ctx, _, store, auth := setup(t)
	secret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	authenticates(t, auth, secret)
	revoked, err := store.RevokeID(ctx, rec.ID)
	if err != nil {
		t.Fatalf("RevokeID: %v", err)
	}
	if revoked.ID != rec.ID || revoked.RevokedAt == nil {
		t.Errorf("RevokeID = %+v, want the record with revokedAt", revoked)
	}
	eventually(t, time.Second, func() error {
		if _, err := auth.Authenticate(secret); !errors.Is(err, keys.ErrRevoked) {
			return errors.New("revoked key: err = " + errString(err))
		}
		return nil
	})
	again, err := store.RevokeID(ctx, rec.ID)
	if err != nil {
		t.Fatalf("second RevokeID: %v", err)
	}
	if !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Errorf("second RevokeID moved revokedAt from %v to %v", revoked.RevokedAt, again.RevokedAt)
	}
}

func TestRotate(t *testing.T) {
	ctx, _, store, auth := setup(t)
	oldSecret, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleTenantAdmin, Name: "ci", CreatedBy: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	authenticates(t, auth, oldSecret)
	secret, k, old, err := store.Rotate(ctx, rec.ID, rec.ID)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if secret == oldSecret || !strings.HasPrefix(secret, keys.Prefix) {
		t.Errorf("Rotate secret = %q", secret)
	}
	if k.ID == rec.ID || k.Tenant != "acme" || k.Role != keys.RoleTenantAdmin || k.Name != "ci" || k.CreatedBy != rec.ID || k.RevokedAt != nil {
		t.Errorf("new record = %+v", k)
	}
	if old.ID != rec.ID || old.RevokedAt == nil {
		t.Errorf("old record = %+v, want it revoked", old)
	}
	authenticates(t, auth, secret)
	eventually(t, time.Second, func() error {
		if _, err := auth.Authenticate(oldSecret); !errors.Is(err, keys.ErrRevoked) {
			return errors.New("rotated key: err = " + errString(err))
		}
		return nil
	})
	// The old key is revoked: rotating it again must not yield another working key.
	if _, _, _, err := store.Rotate(ctx, rec.ID, rec.ID); !errors.Is(err, keys.ErrRevoked) {
		t.Errorf("Rotate of a revoked key: err = %v, want ErrRevoked", err)
	}
	all, err := store.Keys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("Keys after rotating = %+v, want the old and the new key", all)
	}
}

func TestRotateConcurrently(t *testing.T) {
	ctx, _, store, _ := setup(t)
	_, rec, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
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
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, keys.ErrRevoked):
			t.Errorf("Rotate: %v", err)
		}
	}
	if won != 1 {
		t.Errorf("%d concurrent rotations succeeded, want 1", won)
	}
	all, err := store.Keys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var live int
	for _, k := range all {
		if k.RevokedAt == nil {
			live++
		}
	}
	if live != 1 {
		t.Errorf("%d live keys after concurrent rotations, want 1: %+v", live, all)
	}
}

func TestSeedIndexesOldRecords(t *testing.T) {
	ctx, res, store, _ := setup(t)
	const secret = "dev-key-0123456789abcdef"
	first, err := store.Seed(ctx, secret, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	// A record stored before the id index existed has no index entry.
	if err := res.Keys.Purge(ctx, "id."+first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, first.ID); !errors.Is(err, keys.ErrUnknownKey) {
		t.Fatalf("Get without an index entry: err = %v, want ErrUnknownKey", err)
	}
	if _, err := store.Seed(ctx, secret, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "dev"}); err != nil {
		t.Fatal(err)
	}
	if k, err := store.Get(ctx, first.ID); err != nil || k.ID != first.ID {
		t.Errorf("Get after seeding again = %+v, %v; want %+v", k, err, first)
	}
}

func TestDeleteTenant(t *testing.T) {
	ctx, _, store, auth := setup(t)
	for _, id := range []string{"acme", "other", "acme-2"} {
		if _, err := store.CreateTenant(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	tenants, err := store.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids := tenantIDs(tenants); !slices.Equal(ids, []string{"acme", "acme-2", "other"}) {
		t.Errorf("ListTenants = %v, want acme, acme-2, other", ids)
	}
	var acme []string
	for range 3 {
		s, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
		if err != nil {
			t.Fatal(err)
		}
		acme = append(acme, s)
	}
	otherKey, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme-2", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(slices.Clone(acme), otherKey) {
		authenticates(t, auth, s)
	}

	if err := store.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatalf("DeleteTenant: %v", err)
	}
	if _, err := store.GetTenant(ctx, "acme"); !errors.Is(err, keys.ErrUnknownTenant) {
		t.Errorf("GetTenant after delete: err = %v, want ErrUnknownTenant", err)
	}
	tenants, err = store.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids := tenantIDs(tenants); !slices.Equal(ids, []string{"acme-2", "other"}) {
		t.Errorf("ListTenants after delete = %v, want acme-2, other", ids)
	}
	for _, s := range acme {
		eventually(t, time.Second, func() error {
			if _, err := auth.Authenticate(s); !errors.Is(err, keys.ErrRevoked) {
				return errors.New("key of a deleted tenant: err = " + errString(err))
			}
			return nil
		})
	}
	if _, err := auth.Authenticate(otherKey); err != nil {
		t.Errorf("deleting acme affected acme-2's key: %v", err)
	}
	if err := store.DeleteTenant(ctx, "acme"); !errors.Is(err, keys.ErrUnknownTenant) {
		t.Errorf("second DeleteTenant: err = %v, want ErrUnknownTenant", err)
	}
	for _, id := range []string{"nobody", "", "ac me"} {
		if err := store.DeleteTenant(ctx, id); !errors.Is(err, keys.ErrUnknownTenant) {
			t.Errorf("DeleteTenant(%q): err = %v, want ErrUnknownTenant", id, err)
		}
	}
	// The id is free again, and the old keys stay revoked.
	if _, err := store.CreateTenant(ctx, "acme"); err != nil {
		t.Fatalf("CreateTenant after delete: %v", err)
	}
	if _, err := auth.Authenticate(acme[0]); !errors.Is(err, keys.ErrRevoked) {
		t.Errorf("old key after the tenant came back: err = %v, want ErrRevoked", err)
	}
}

func TestDeleteTenantFinishesAfterFailure(t *testing.T) {
	ctx, res, store, auth := setup(t)
	if _, err := store.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	// A deletion that stopped after marking the tenant: unknown to readers, still there to finish.
	if _, err := res.Tenants.Put(ctx, "acme", []byte(`{"id":"acme","createdAt":"2024-01-01T00:00:00Z","deletedAt":"2024-01-02T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GetTenant(ctx, "acme"); !errors.Is(err, keys.ErrUnknownTenant) {
		t.Errorf("GetTenant of a marked tenant: err = %v, want ErrUnknownTenant", err)
	}
	if _, err := store.CreateTenant(ctx, "acme"); !errors.Is(err, keys.ErrTenantExists) {
		t.Errorf("CreateTenant while deleting: err = %v, want ErrTenantExists", err)
	}
	if err := store.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatalf("DeleteTenant of a marked tenant: %v", err)
	}
	eventually(t, time.Second, func() error {
		if _, err := auth.Authenticate(secret); !errors.Is(err, keys.ErrRevoked) {
			return errors.New("key of a deleted tenant: err = " + errString(err))
		}
		return nil
	})
}

func tenantIDs(ts []keys.Tenant) []string {
	var ids []string
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}
