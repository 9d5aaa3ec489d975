// Package keys stores tenants and API keys and authenticates callers.
//
// A key is stored only as the hex SHA-256 of its secret (the KV key) with its record (id, tenant,
// role, name, creator, creation and revocation times); the secret itself is shown once, when it
// is created, and never kept. Authentication reads a map kept current by watching the bucket, so
// revocation reaches every ingress instance as soon as the watch delivers it.
//
// It does not do HTTP; ingress maps its errors to 401/403.
package keys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/ident"
)

// Prefix starts every key agentbus generates, so that leaked keys are recognisable (secret
// scanners) and so that keys are told apart from other tokens.
const Prefix = "abk_"

// Role says what a key may do.
type Role string

// Roles, from the most to the least powerful.
const (
	RoleSystemAdmin Role = "system-admin"
	RoleTenantAdmin Role = "tenant-admin"
	RoleUser        Role = "user"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	return r == RoleSystemAdmin || r == RoleTenantAdmin || r == RoleUser
}

// Errors callers test for.
var (
	ErrUnknownKey    = errors.New("unknown API key")
	ErrRevoked       = errors.New("API key revoked")
	ErrUnknownTenant = errors.New("unknown tenant")
	ErrTenantExists  = errors.New("tenant exists")
)

// Key is the stored record of an API key. It never holds the secret.
type Key struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Role      Role       `json:"role"`
	Name      string     `json:"name"`
	CreatedBy string     `json:"createdBy,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// Tenant is a tenant record.
type Tenant struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
}

// Generate returns a new high-entropy key secret: the prefix and 256 random bits.
func Generate() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("reading random bytes: %v", err)) // crypto/rand does not fail on supported platforms
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Hash is the stored form of a secret: hex SHA-256.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Store reads and writes tenants and keys.
type Store struct {
	keys    jetstream.KeyValue
	tenants jetstream.KeyValue
}

// NewStore returns a Store over the keys and tenants buckets.
func NewStore(keysKV, tenantsKV jetstream.KeyValue) *Store {
	return &Store{keys: keysKV, tenants: tenantsKV}
}

// CreateTenant adds a tenant; ErrTenantExists if it is there.
func (s *Store) CreateTenant(ctx context.Context, id string) (Tenant, error) {
	if !ident.ValidTenant(id) {
		return Tenant{}, ident.ErrInvalidTenant
	}
	t := Tenant{ID: id, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(t)
	if _, err := s.tenants.Create(ctx, id, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Tenant{}, ErrTenantExists
		}
		return Tenant{}, fmt.Errorf("creating tenant: %w", err)
	}
	return t, nil
}

// EnsureTenant creates the tenant unless it exists.
func (s *Store) EnsureTenant(ctx context.Context, id string) error {
	if _, err := s.CreateTenant(ctx, id); err != nil && !errors.Is(err, ErrTenantExists) {
		return err
	}
	return nil
}

// GetTenant reads a tenant; ErrUnknownTenant if there is none.
func (s *Store) GetTenant(ctx context.Context, id string) (Tenant, error) {
	if !ident.ValidTenant(id) {
		return Tenant{}, ErrUnknownTenant
	}
	e, err := s.tenants.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Tenant{}, ErrUnknownTenant
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("reading tenant: %w", err)
	}
	var t Tenant
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return Tenant{}, fmt.Errorf("decoding tenant: %w", err)
	}
	return t, nil
}

// NewKey describes a key to create.
type NewKey struct {
	Tenant    string
	Role      Role
	Name      string
	CreatedBy string
}

// Create generates a key, stores its hash and returns the secret (shown once) and the record.
func (s *Store) Create(ctx context.Context, nk NewKey) (string, Key, error) {
	secret := Generate()
	k, err := s.Seed(ctx, secret, nk)
	return secret, k, err
}

// Seed stores a key with a chosen secret (for example the standalone's dev key). Seeding the same
// secret again keeps the existing record.
func (s *Store) Seed(ctx context.Context, secret string, nk NewKey) (Key, error) {
	if !nk.Role.Valid() {
		return Key{}, fmt.Errorf("role %q is not valid", nk.Role)
	}
	if nk.Role != RoleSystemAdmin && !ident.ValidTenant(nk.Tenant) {
		return Key{}, ident.ErrInvalidTenant
	}
	if len(secret) < 16 {
		return Key{}, errors.New("key secret must be at least 16 characters")
	}
	k := Key{ID: uuid.NewString(), Tenant: nk.Tenant, Role: nk.Role, Name: nk.Name, CreatedBy: nk.CreatedBy, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(k)
	h := Hash(secret)
	if _, err := s.keys.Create(ctx, h, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return s.byHash(ctx, h)
		}
		return Key{}, fmt.Errorf("storing key: %w", err)
	}
	return k, nil
}

func (s *Store) byHash(ctx context.Context, h string) (Key, error) {
	e, err := s.keys.Get(ctx, h)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Key{}, ErrUnknownKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("reading key: %w", err)
	}
	return decodeKey(e.Value())
}

// Revoke marks the key with the given secret revoked.
func (s *Store) Revoke(ctx context.Context, secret string) error {
	h := Hash(secret)
	for {
		e, err := s.keys.Get(ctx, h)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return ErrUnknownKey
		}
		if err != nil {
			return fmt.Errorf("reading key: %w", err)
		}
		k, err := decodeKey(e.Value())
		if err != nil {
			return err
		}
		if k.RevokedAt != nil {
			return nil
		}
		now := time.Now().UTC()
		k.RevokedAt = &now
		b, _ := json.Marshal(k)
		if _, err := s.keys.Update(ctx, h, b, e.Revision()); err == nil {
			return nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("revoking key: %w", err)
		}
	}
}

// Keys returns every stored key record of a tenant ("" for all).
func (s *Store) Keys(ctx context.Context, tenant string) ([]Key, error) {
	lister, err := s.keys.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	var out []Key
	for h := range lister.Keys() {
		if !looksLikeHash(h) {
			continue // not a key record
		}
		k, err := s.byHash(ctx, h)
		if errors.Is(err, ErrUnknownKey) {
			continue
		}
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &syntax) || errors.As(err, &typeErr) {
			continue // a damaged record authenticates nothing; listing goes on
		}
		if err != nil {
			return nil, err
		}
		if tenant == "" || k.Tenant == tenant {
			out = append(out, k)
		}
	}
	return out, nil
}

func decodeKey(b []byte) (Key, error) {
	var k Key
	if err := json.Unmarshal(b, &k); err != nil {
		return Key{}, fmt.Errorf("decoding key record: %w", err)
	}
	return k, nil
}

// looksLikeHash reports whether s is a stored hash rather than some other KV key.
func looksLikeHash(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// constantTimeEqual compares two secrets without leaking where they differ.
func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
