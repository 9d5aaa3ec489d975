// Package keys stores tenants and API keys and authenticates callers.
//
// A key is stored only as the hex SHA-256 of its secret (the KV key) with its record (id, tenant,
// role, name, creator, creation and revocation times); the secret itself is shown once, when it
// is created, and never kept. A second entry, id.{keyId}, holds the hash, so that a key can be
// found, revoked and rotated by its id without reading the whole bucket. Authentication reads a
// map kept current by watching the bucket (Authenticator); its Revision tells an ingress that
// wrote a key when the map holds the write.
//
// A Store given that map (WithCache) lists a tenant's keys from it, and bounds what each tenant
// keeps: its keys in force (Create answers ErrLimit beyond), and its revoked keys, of which it
// keeps the most recently revoked (a revocation removes the older ones' records). The map is in
// every ingress's memory, so one tenant's keys cost every ingress; the bound keeps them a tenant's
// own small share.
//
// It does not do HTTP; ingress maps its errors to 401/403.
package keys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/capped"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
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
	// ErrLimit is Create's answer to a tenant that has as many keys in force as it may have.
	ErrLimit = errors.New("the tenant has as many API keys as it may have")
)

// DefaultMaxPerTenant is the bound WithCache is usually given: the keys in force a tenant may
// have, and the revoked ones it keeps.
const DefaultMaxPerTenant = 100

// cacheWait bounds how long a Store waits for its cache to hold the bucket's newest write.
const cacheWait = 5 * time.Second

// Key is the stored record of an API key. It never holds the secret.
type Key struct {
	ID        string        `json:"id"`
	Tenant    string        `json:"tenant"`
	Role      Role          `json:"role"`
	Name      string        `json:"name"`
	CreatedBy string        `json:"createdBy,omitempty"`
	CreatedAt timefmt.Time  `json:"createdAt"`
	RevokedAt *timefmt.Time `json:"revokedAt,omitempty"`
}

// Tenant is a tenant record.
type Tenant struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	// DeletedAt is set while DeleteTenant revokes the tenant's keys; such a tenant is unknown to
	// every reader, and its record goes once the keys are revoked.
	DeletedAt *time.Time `json:"deletedAt,omitempty"`
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
	var h [hashLen]byte
	return string(appendHash(h[:0], secret))
}

// hashLen is the length of a Hash.
const hashLen = 2 * sha256.Size

// appendHash appends Hash(secret) to dst.
func appendHash(dst []byte, secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return hex.AppendEncode(dst, sum[:])
}

// Store reads and writes tenants and keys.
type Store struct {
	js      jetstream.JetStream
	keys    jetstream.KeyValue
	tenants jetstream.KeyValue

	// cache, when set (WithCache), follows the keys bucket; max bounds each tenant's keys.
	cache *Authenticator
	max   int
	log   *slog.Logger
	// removed counts the keys this Store (and its copies) removed, for Removed.
	removed *atomic.Int64
	// holdIDs is how long a deleted tenant's id stays taken (HoldDeletedIDs).
	holdIDs time.Duration
}

// HoldDeletedIDs returns a copy of s whose CreateTenant refuses, for d after a tenant's record
// was removed, to make a tenant of its id (a *HeldIDError): for that long the deployment may
// still tell requests and figures apart by the tenant's id alone (the inbox's de-duplication of
// caller-chosen request ids, the per-agent statistics), and a new tenant of the id would meet the
// old one's.
func (s *Store) HoldDeletedIDs(d time.Duration) *Store {
	c := *s
	c.holdIDs = d
	return &c
}

// HeldIDError is CreateTenant's refusal of the id of a tenant deleted less than the hold ago
// (HoldDeletedIDs). It is an ErrTenantExists.
type HeldIDError struct {
	// FreeAt is when the id may be used again, Hold after the deletion.
	FreeAt time.Time
	Hold   time.Duration
}

func (e *HeldIDError) Error() string {
	return "a tenant of this id was deleted less than " + e.Hold.String() + " ago; the id is free again at " + timefmt.Format(e.FreeAt)
}

// Unwrap makes a HeldIDError an ErrTenantExists.
func (e *HeldIDError) Unwrap() error { return ErrTenantExists }

// NewStore returns a Store over the keys and tenants buckets of js. It lists keys by reading
// every key record of the bucket, and bounds no tenant's keys; see WithCache.
func NewStore(js jetstream.JetStream, keysKV, tenantsKV jetstream.KeyValue) *Store {
	return &Store{js: js, keys: keysKV, tenants: tenantsKV}
}

// WithCache returns a copy of s that reads a tenant's keys from cache, an Authenticator of the
// same bucket, once it holds the bucket's newest write (read from the stream's leader), rather
// than every key record of the bucket. With max > 0 it also bounds what each tenant keeps: at
// most max keys in force, Create answering ErrLimit beyond, and of its revoked keys the max most
// recently revoked: a revocation by RevokeID or Rotate removes the records of older ones, which
// are then unknown keys rather than revoked ones. Keys of no tenant (system admins') are not
// bounded. log receives the failures of those removals, which the next revocation tries again.
func (s *Store) WithCache(cache *Authenticator, max int, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := *s
	c.cache, c.max, c.log = cache, max, log
	if c.removed == nil {
		c.removed = new(atomic.Int64)
	}
	return &c
}

// Removed is how many keys s and the copies of it WithCache made removed so far (0 without a
// cache): an owner runs Compact when it moved.
func (s *Store) Removed() int64 {
	if s.removed == nil {
		return 0
	}
	return s.removed.Load()
}

// compactedKey is the key of Compact's own entry in the keys bucket. It is not a hash, so the
// Authenticator and Keys pass it by.
const compactedKey = "compacted"

// Compact removes from the keys bucket's stream the purge markers that removed keys left
// there (their records' and their index entries'), once they are older than olderThan: every
// Authenticator following the bucket applied them long before, and one that starts later has
// nothing to apply, the records they removed being gone. It writes an entry of its own first, so
// that the stream's newest message stays one that is there: a cache loading the bucket waits for
// the newest message's revision (bus.NewestRevision). Each marker goes with what came before it
// on its key, up to its own revision: a key written again since keeps the new entry. It holds
// the markers it reads in memory, not the records.
func (s *Store) Compact(ctx context.Context, olderThan time.Duration) error {
	if _, err := s.keys.Put(ctx, compactedKey, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("compacting keys: %w", err)
	}
	bucket := s.keys.Bucket()
	stream, err := s.js.Stream(ctx, subject.KVStream(bucket))
	if err != nil {
		return fmt.Errorf("compacting keys: %w", err)
	}
	markers := make(map[string]jetstream.KeyValueEntry)
	err = bus.Scan(ctx, s.js, s.keys, nil, func(e jetstream.KeyValueEntry) error {
		if e.Operation() == jetstream.KeyValuePut {
			delete(markers, e.Key()) // a key's later entries come after its earlier ones
		} else {
			markers[e.Key()] = e
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("compacting keys: %w", err)
	}
	before := time.Now().Add(-olderThan)
	for key, e := range markers {
		if e.Created().After(before) {
			continue
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject.KVKeyPrefix(bucket)+key), jetstream.WithPurgeSequence(e.Revision()+1)); err != nil {
			return fmt.Errorf("compacting keys: %w", err)
		}
	}
	return nil
}

// CreateTenant adds a tenant; ErrTenantExists if it is there, or still being deleted, or (a
// *HeldIDError) was deleted within the hold of HoldDeletedIDs.
func (s *Store) CreateTenant(ctx context.Context, id string) (Tenant, error) {
	if !ident.ValidTenant(id) {
		return Tenant{}, ident.ErrInvalidTenant
	}
	if err := s.idHeld(ctx, id); err != nil {
		return Tenant{}, err
	}
	t := Tenant{ID: id, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(t)
	if _, err := s.tenants.Create(ctx, id, b); err != nil {
		if bus.IsConflict(err) {
			return Tenant{}, ErrTenantExists
		}
		return Tenant{}, fmt.Errorf("creating tenant: %w", err)
	}
	return t, nil
}

// idHeld answers a *HeldIDError when the id's record was removed less than s.holdIDs ago: the
// bucket's last entry of the id is then the removal's marker, and its time the removal's.
func (s *Store) idHeld(ctx context.Context, id string) error {
	if s.holdIDs <= 0 {
		return nil
	}
	removal, err := bus.Removal(ctx, s.js, s.tenants.Bucket(), id)
	if removal == nil || err != nil {
		return err
	}
	if free := removal.Time.Add(s.holdIDs); time.Now().Before(free) {
		return &HeldIDError{FreeAt: free, Hold: s.holdIDs}
	}
	return nil
}

// AbandonTenant removes a tenant just made whose making could not be finished, leaving no trace
// of it: its id is not held (HoldDeletedIDs), as no request of it was ever taken.
func (s *Store) AbandonTenant(ctx context.Context, id string) error {
	if err := s.DeleteTenant(ctx, id); err != nil {
		return err
	}
	if _, err := bus.DropTombstone(ctx, s.js, s.tenants.Bucket(), id, 0); err != nil {
		return fmt.Errorf("abandoning tenant %s: %w", id, err)
	}
	return nil
}

// EnsureTenant creates the tenant unless it exists; a tenant of the id deleted within the hold
// (HoldDeletedIDs) is an error.
func (s *Store) EnsureTenant(ctx context.Context, id string) error {
	_, err := s.CreateTenant(ctx, id)
	if held := (*HeldIDError)(nil); errors.As(err, &held) {
		return fmt.Errorf("ensuring tenant %s: %w", id, err) // it does not exist, and cannot yet
	}
	if err != nil && !errors.Is(err, ErrTenantExists) {
		return err
	}
	return nil
}

// GetTenant reads a tenant; ErrUnknownTenant if there is none.
func (s *Store) GetTenant(ctx context.Context, id string) (Tenant, error) {
	if !ident.ValidTenant(id) {
		return Tenant{}, ErrUnknownTenant
	}
	t, _, err := s.tenant(ctx, id)
	if err != nil {
		return Tenant{}, err
	}
	if t.DeletedAt != nil {
		return Tenant{}, ErrUnknownTenant
	}
	return t, nil
}

// tenant reads a tenant record, deleted or not, with its revision.
func (s *Store) tenant(ctx context.Context, id string) (Tenant, uint64, error) {
	e, err := s.tenants.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Tenant{}, 0, ErrUnknownTenant
	}
	if err != nil {
		return Tenant{}, 0, fmt.Errorf("reading tenant: %w", err)
	}
	var t Tenant
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return Tenant{}, 0, fmt.Errorf("decoding tenant: %w", err)
	}
	return t, e.Revision(), nil
}

// ListTenants returns every tenant, ordered by id.
func (s *Store) ListTenants(ctx context.Context) ([]Tenant, error) {
	entries, err := bus.Entries(ctx, s.js, s.tenants)
	if err != nil {
		return nil, fmt.Errorf("listing tenants: %w", err)
	}
	out := make([]Tenant, 0, len(entries))
	for _, e := range entries {
		var t Tenant
		if err := json.Unmarshal(e.Value(), &t); err != nil {
			return nil, fmt.Errorf("decoding tenant: %w", err)
		}
		if t.DeletedAt == nil {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b Tenant) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteTenant removes a tenant and revokes all its keys; ErrUnknownTenant if there is none. It
// is RetireTenant, then RemoveTenant.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	if err := s.RetireTenant(ctx, id); err != nil {
		return err
	}
	return s.RemoveTenant(ctx, id)
}

// RetireTenant marks a tenant deleted and revokes all its keys; ErrUnknownTenant if there is
// none, or it was removed (RemoveTenant).
//
// The tenant is first marked deleted, so that it is unknown from then on (no key is created for
// it any more), then its keys are revoked. A tenant marked stays unknown to readers; calling
// RetireTenant again, after a failure part way or to confirm the revocations, goes on from what
// it finds.
//
// A write that meets another's (a compare-and-set conflict: another deletion of the tenant, or a
// revocation of one of its keys, at the same time) pauses a little (bus.ConflictBackoff), reads
// the record again and goes on from what it finds, for as long as ctx and bus.ConflictPatience
// allow; then RetireTenant answers an error wrapping bus.ErrConflictsPersisted.
func (s *Store) RetireTenant(ctx context.Context, id string) error {
	if !ident.ValidTenant(id) {
		return ErrUnknownTenant
	}
	err := bus.RetryConflicts(ctx, func() error {
		t, rev, err := s.tenant(ctx, id)
		if err != nil || t.DeletedAt != nil {
			return err
		}
		now := time.Now().UTC()
		t.DeletedAt = &now
		b, _ := json.Marshal(t)
		if _, err := s.tenants.Update(ctx, id, b, rev); err != nil {
			return fmt.Errorf("marking tenant deleted: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	stored, err := s.list(ctx, id)
	if err != nil {
		return err
	}
	for _, e := range stored {
		if _, err := s.revoke(ctx, e.hash, "", false); err != nil && !errors.Is(err, ErrUnknownKey) {
			return err
		}
	}
	return nil
}

// RemoveTenant removes the record of a tenant RetireTenant retired, and the records of its keys,
// so that its id may be used again. A tenant not retired is left alone (an error); one removed
// already is not an error.
func (s *Store) RemoveTenant(ctx context.Context, id string) error {
	if !ident.ValidTenant(id) {
		return ErrUnknownTenant
	}
	t, _, err := s.tenant(ctx, id)
	if errors.Is(err, ErrUnknownTenant) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.DeletedAt == nil {
		return fmt.Errorf("removing tenant %s: it is not retired", id)
	}
	// Its keys, all revoked by RetireTenant, go first, so that a tenant made again with its id
	// starts with none, and a removal that fails part way is taken up again.
	stored, err := s.list(ctx, id)
	if err != nil {
		return err
	}
	for _, e := range stored {
		if err := s.remove(ctx, e); err != nil {
			return err
		}
	}
	if err := s.tenants.Delete(ctx, id); err != nil {
		return fmt.Errorf("deleting tenant: %w", err)
	}
	return nil
}

// NewKey describes a key to create.
type NewKey struct {
	Tenant    string
	Role      Role
	Name      string
	CreatedBy string
}

// Create generates a key, stores its hash and returns the secret (shown once) and the record.
// A Store bounding each tenant's keys (WithCache) answers ErrLimit to a tenant that has as many
// keys in force as it may have.
func (s *Store) Create(ctx context.Context, nk NewKey) (string, Key, error) {
	bounded := s.bounds(nk.Tenant)
	count := func(ctx context.Context) (int, error) { return s.inForce(ctx, nk.Tenant) }
	if bounded {
		if err := capped.Room(ctx, s.max, count, ErrLimit); err != nil {
			return "", Key{}, err
		}
	}
	secret, k, err := s.create(ctx, nk)
	if err != nil || !bounded {
		return secret, k, err
	}
	// The cache, once it holds this key, holds every key stored before it.
	undo := func(ctx context.Context) error { return s.remove(ctx, storedKey{hash: Hash(secret), key: k}) }
	if err := capped.Keep(ctx, s.max, count, undo, ErrLimit); err != nil {
		return "", Key{}, err
	}
	return secret, k, nil
}

// create generates and stores a key, bounded or not.
func (s *Store) create(ctx context.Context, nk NewKey) (string, Key, error) {
	secret := Generate()
	k, err := s.Seed(ctx, secret, nk)
	return secret, k, err
}

// bounds reports whether s bounds the keys of tenant: it has a cache and a bound (WithCache), and
// tenant is one (system admins' keys are not bounded).
func (s *Store) bounds(tenant string) bool { return s.cache != nil && s.max > 0 && tenant != "" }

// inForce counts a tenant's keys that are not revoked.
func (s *Store) inForce(ctx context.Context, tenant string) (int, error) {
	stored, err := s.list(ctx, tenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range stored {
		if e.key.RevokedAt == nil {
			n++
		}
	}
	return n, nil
}

// remove removes a key's record, then its id index entry. Each leaves a purge marker in the
// bucket's stream, which every Authenticator applies.
func (s *Store) remove(ctx context.Context, e storedKey) error {
	if err := s.keys.Purge(ctx, e.hash); err != nil {
		return fmt.Errorf("removing key: %w", err)
	}
	if err := s.keys.Purge(ctx, indexKey(e.key.ID)); err != nil {
		return fmt.Errorf("removing key index: %w", err)
	}
	if s.removed != nil {
		s.removed.Add(1)
	}
	return nil
}

// trim removes the records of a tenant's revoked keys but for the max most recently revoked,
// when s bounds tenants' keys. A failure is logged: the next revocation trims again.
func (s *Store) trim(ctx context.Context, tenant string) {
	if !s.bounds(tenant) {
		return
	}
	stored, err := s.list(ctx, tenant)
	if err != nil {
		s.log.Warn("removing a tenant's oldest revoked keys", "tenant", tenant, "err", err)
		return
	}
	revoked := slices.DeleteFunc(stored, func(e storedKey) bool { return e.key.RevokedAt == nil })
	if len(revoked) <= s.max {
		return
	}
	slices.SortFunc(revoked, func(a, b storedKey) int { // the most recently revoked first
		if c := b.key.RevokedAt.Compare(a.key.RevokedAt.Time); c != 0 {
			return c
		}
		return strings.Compare(a.key.ID, b.key.ID)
	})
	for _, e := range revoked[s.max:] {
		if err := s.remove(ctx, e); err != nil {
			s.log.Warn("removing a tenant's oldest revoked keys", "tenant", tenant, "err", err)
			return
		}
	}
}

// Seed stores a key with a chosen secret (for example the standalone's dev key). Seeding the same
// secret again keeps the existing record (and indexes it by id if it was stored before the index
// existed).
func (s *Store) Seed(ctx context.Context, secret string, nk NewKey) (Key, error) {
	if !nk.Role.Valid() {
		return Key{}, fmt.Errorf("role %s is not valid", subject.Quote(string(nk.Role)))
	}
	if nk.Role != RoleSystemAdmin && !ident.ValidTenant(nk.Tenant) {
		return Key{}, ident.ErrInvalidTenant
	}
	if len(secret) < 16 {
		return Key{}, errors.New("key secret must be at least 16 characters")
	}
	h := Hash(secret)
	if k, err := s.byHash(ctx, h); err == nil {
		return k, s.index(ctx, k.ID, h)
	} else if !errors.Is(err, ErrUnknownKey) {
		return Key{}, err
	}
	k := Key{ID: uuid.NewString(), Tenant: nk.Tenant, Role: nk.Role, Name: nk.Name, CreatedBy: nk.CreatedBy, CreatedAt: timefmt.Now()}
	b, _ := json.Marshal(k)
	// The index goes first: a record is never without it. An index whose record was not
	// stored points at a hash without a record of that id, which Get treats as unknown.
	if err := s.index(ctx, k.ID, h); err != nil {
		return Key{}, err
	}
	if _, err := s.keys.Create(ctx, h, b); err != nil {
		_ = s.keys.Purge(ctx, indexKey(k.ID))
		if bus.IsConflict(err) { // seeded concurrently
			return s.byHash(ctx, h)
		}
		return Key{}, fmt.Errorf("storing key: %w", err)
	}
	return k, nil
}

// indexKey is the KV key of a key's id index entry. It is not a hash, so the Authenticator and
// Keys pass it by.
func indexKey(id string) string { return "id." + id }

// index stores the id index entry of the key with hash h, unless it is there.
func (s *Store) index(ctx context.Context, id, h string) error {
	if _, err := s.keys.Create(ctx, indexKey(id), []byte(h)); err != nil && !bus.IsConflict(err) {
		return fmt.Errorf("indexing key: %w", err)
	}
	return nil
}

// validID reports whether id has the form of the key ids Seed makes, so that no other string
// reaches the bucket as a KV key.
func validID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

// hashOf finds the hash of the key with this id through the index.
func (s *Store) hashOf(ctx context.Context, id string) (string, error) {
	if !validID(id) {
		return "", ErrUnknownKey
	}
	e, err := s.keys.Get(ctx, indexKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", ErrUnknownKey
	}
	if err != nil {
		return "", fmt.Errorf("reading key index: %w", err)
	}
	h := string(e.Value())
	if !looksLikeHash(h) {
		return "", ErrUnknownKey
	}
	return h, nil
}

// Get returns the record of the key with this id; ErrUnknownKey if there is none.
func (s *Store) Get(ctx context.Context, id string) (Key, error) {
	e, err := s.byID(ctx, id)
	return e.key, err
}

// byID reads the record of the key with this id, with its hash, through the index;
// ErrUnknownKey if there is none.
func (s *Store) byID(ctx context.Context, id string) (storedKey, error) {
	h, err := s.hashOf(ctx, id)
	if err != nil {
		return storedKey{}, err
	}
	k, err := s.byHash(ctx, h)
	if err != nil {
		return storedKey{}, err
	}
	if k.ID != id {
		return storedKey{}, ErrUnknownKey
	}
	return storedKey{hash: h, key: k}, nil
}

// Remove removes the key with this id, record and index, as if it had never been created: for a
// key whose secret was never shown (one created for a tenant deleted meanwhile). ErrUnknownKey
// if there is none.
func (s *Store) Remove(ctx context.Context, id string) error {
	e, err := s.byID(ctx, id)
	if err != nil {
		return err
	}
	return s.remove(ctx, e)
}

// RevokeID marks the key with this id revoked and returns its record. Revoking a revoked key
// again keeps the first revocation time.
func (s *Store) RevokeID(ctx context.Context, id string) (Key, error) {
	h, err := s.hashOf(ctx, id)
	if err != nil {
		return Key{}, err
	}
	k, err := s.revoke(ctx, h, id, false)
	if err == nil {
		s.trim(ctx, k.Tenant)
	}
	return k, err
}

// Rotate replaces the key with this id: it creates a key of the same tenant, role and name,
// created by createdBy, then revokes the old one. It returns the new secret (shown once), the
// new record and the revoked old one. A key already revoked is not rotated (ErrRevoked), so
// that of two concurrent rotations only one yields a working key.
func (s *Store) Rotate(ctx context.Context, id, createdBy string) (string, Key, Key, error) {
	e, err := s.byID(ctx, id)
	if err != nil {
		return "", Key{}, Key{}, err
	}
	h, old := e.hash, e.key
	if old.RevokedAt != nil {
		return "", Key{}, Key{}, ErrRevoked
	}
	// Not bounded: the key it replaces is revoked once it is stored.
	secret, k, err := s.create(ctx, NewKey{Tenant: old.Tenant, Role: old.Role, Name: old.Name, CreatedBy: createdBy})
	if err != nil {
		return "", Key{}, Key{}, err
	}
	if old, err = s.revoke(ctx, h, id, true); err != nil {
		// Another rotation or a revocation came first: the new key must not outlive it.
		if _, rerr := s.revoke(ctx, Hash(secret), k.ID, false); rerr != nil {
			return "", Key{}, Key{}, errors.Join(err, fmt.Errorf("revoking the replacement: %w", rerr))
		}
		return "", Key{}, Key{}, err
	}
	s.trim(ctx, old.Tenant)
	return secret, k, old, nil
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
	_, err := s.revoke(ctx, Hash(secret), "", false)
	return err
}

// revoke marks the record under hash h revoked and returns it. id, when given, must be the
// record's. With fresh, a key already revoked is ErrRevoked; without, revoking it again keeps
// the first revocation time.
//
// A revocation that meets another writer's (a compare-and-set conflict) pauses a little
// (bus.ConflictBackoff) and reads the record again, for as long as ctx and bus.ConflictPatience
// allow; then it answers an error wrapping bus.ErrConflictsPersisted.
func (s *Store) revoke(ctx context.Context, h, id string, fresh bool) (Key, error) {
	var k Key
	err := bus.RetryConflicts(ctx, func() error {
		e, err := s.keys.Get(ctx, h)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return ErrUnknownKey
		}
		if err != nil {
			return fmt.Errorf("reading key: %w", err)
		}
		if k, err = decodeKey(e.Value()); err != nil {
			return err
		}
		if id != "" && k.ID != id {
			return ErrUnknownKey
		}
		if k.RevokedAt != nil {
			if fresh {
				return ErrRevoked
			}
			return nil
		}
		now := timefmt.Now()
		k.RevokedAt = &now
		b, _ := json.Marshal(k)
		if _, err := s.keys.Update(ctx, h, b, e.Revision()); err != nil {
			return fmt.Errorf("revoking key: %w", err)
		}
		return nil
	})
	if err != nil {
		return Key{}, err
	}
	return k, nil
}

// Keys returns every stored key record of a tenant ("" for all), oldest first.
func (s *Store) Keys(ctx context.Context, tenant string) ([]Key, error) {
	stored, err := s.list(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Key, 0, len(stored))
	for _, e := range stored {
		out = append(out, e.key)
	}
	slices.SortStableFunc(out, func(a, b Key) int {
		if c := a.CreatedAt.Compare(b.CreatedAt.Time); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// storedKey is a key record with the hash it is stored under.
type storedKey struct {
	hash string
	key  Key
}

// list reads every key record of a tenant ("" for all): from the cache when s has one, once it
// holds the bucket's newest write.
func (s *Store) list(ctx context.Context, tenant string) ([]storedKey, error) {
	if s.cache != nil {
		rev, err := bus.NewestRevision(ctx, s.keys)
		if err != nil {
			return nil, fmt.Errorf("listing keys: %w", err)
		}
		wctx, cancel := context.WithTimeout(ctx, cacheWait)
		defer cancel()
		if err := s.cache.await(wctx, rev); err != nil {
			return nil, fmt.Errorf("listing keys: waiting for the key cache: %w", err)
		}
		return s.cache.tenantKeys(tenant), nil
	}
	entries, err := bus.Entries(ctx, s.js, s.keys)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	var out []storedKey
	for _, e := range entries {
		if !looksLikeHash(e.Key()) {
			continue // not a key record (the id index, say)
		}
		k, err := decodeKey(e.Value())
		if err != nil {
			continue // a damaged record authenticates nothing; listing goes on
		}
		if tenant == "" || k.Tenant == tenant {
			out = append(out, storedKey{hash: e.Key(), key: k})
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
