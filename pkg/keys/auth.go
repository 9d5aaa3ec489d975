package keys

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Authenticator checks API key secrets. It keeps the key records in memory, fed by a watch on the
// keys bucket: a key created, revoked or deleted anywhere is seen here as soon as NATS delivers
// the change (well under a second on a healthy cluster). Revision tells how far it is; the
// ingress that makes a change waits until every ingress's Authenticator has it before it answers.
type Authenticator struct {
	adminHash []byte // Hash of AGENTBUS_ADMIN_KEY; nil without one
	log       *slog.Logger

	mu   sync.RWMutex
	byID map[string]Key // by hash
	// byTenant holds the hashes of each tenant's key records ("" the tenant-less ones), so
	// that a tenant's keys are found without going through every tenant's.
	byTenant map[string]map[string]struct{}
	// revision is that of the newest entry of the keys bucket the watch delivered and the
	// cache took in; the watch delivers in revision order, so every older one came before it.
	revision atomic.Uint64
	// moved is closed, and replaced, each time revision moves (under movedMu), for await.
	movedMu sync.Mutex
	moved   chan struct{}

	watcher   jetstream.KeyWatcher
	stopWatch context.CancelFunc // ends the watch's subscription even when NATS is gone
	done      chan struct{}

	// revokedMu guards onRevoked: the funcs OnRevoked added, by their id.
	revokedMu     sync.Mutex
	onRevoked     map[uint64]func(keyID string)
	nextRevokedID uint64
}

// OnRevoked calls f with the id of each key the cache stops accepting (revoked, or its record
// removed) from now on, until the returned func is called: a connection authenticated once and
// kept open (a listen stream) ends with its key. f is called in the cache's watch, before the
// cache's Revision moves past the change, so that an ingress that confirms a revocation has run
// it; it must not block.
func (a *Authenticator) OnRevoked(f func(keyID string)) (stop func()) {
	a.revokedMu.Lock()
	defer a.revokedMu.Unlock()
	if a.onRevoked == nil {
		a.onRevoked = make(map[uint64]func(string))
	}
	id := a.nextRevokedID
	a.nextRevokedID++
	a.onRevoked[id] = f
	return func() {
		a.revokedMu.Lock()
		defer a.revokedMu.Unlock()
		delete(a.onRevoked, id)
	}
}

// revoked tells the OnRevoked funcs that the key keyID is no longer accepted.
func (a *Authenticator) revoked(keyID string) {
	a.revokedMu.Lock()
	defer a.revokedMu.Unlock()
	for _, f := range a.onRevoked {
		f(keyID)
	}
}

// NewAuthenticator starts watching the keys bucket and returns once the current keys are loaded.
// adminKey, when not empty, is accepted as a system-admin key for every tenant. Close stops it.
// While JetStream answers as a cluster still electing its leaders does, it tries again
// (bus.Starting).
func NewAuthenticator(ctx context.Context, keysKV jetstream.KeyValue, adminKey string, log *slog.Logger) (*Authenticator, error) {
	return bus.Starting(ctx, func(ctx context.Context) (*Authenticator, error) {
		return newAuthenticator(ctx, keysKV, adminKey, log)
	})
}

// newAuthenticator is one try of NewAuthenticator; it stops what it started when it fails.
func newAuthenticator(ctx context.Context, keysKV jetstream.KeyValue, adminKey string, log *slog.Logger) (*Authenticator, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{log: log, byID: make(map[string]Key), byTenant: make(map[string]map[string]struct{}),
		moved: make(chan struct{}), done: make(chan struct{})}
	if adminKey != "" {
		a.adminHash = appendHash(nil, adminKey)
	}
	// The watch outlives ctx: it is bound to the Authenticator and stopped by Close. Its own
	// context lets Close end it when the connection closed first: nats.go then cannot
	// unsubscribe, and its goroutine waiting on the context would stay forever.
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	w, err := keysKV.WatchAll(wctx)
	if err != nil {
		stopWatch()
		return nil, fmt.Errorf("watching keys: %w", err)
	}
	a.watcher, a.stopWatch = w, stopWatch
	upTo, err := bus.NewestRevision(ctx, keysKV)
	if err != nil {
		_ = w.Stop()
		stopWatch()
		return nil, fmt.Errorf("loading keys: %w", err)
	}
	ready := make(chan struct{})
	go a.run(upTo, ready)
	select {
	case <-ready:
		return a, nil
	case <-ctx.Done():
		_ = w.Stop()
		stopWatch()
		<-a.done
		return nil, fmt.Errorf("loading keys: %w", ctx.Err())
	}
}

// run follows the keys bucket; it closes ready once the entries read include its revision upTo
// (bus.NewestRevision), or at once when that is 0.
func (a *Authenticator) run(upTo uint64, ready chan struct{}) {
	defer close(a.done)
	bus.Follow(a.watcher, upTo, ready, func(e jetstream.KeyValueEntry, _ bool) {
		a.apply(e)
		a.revision.Store(e.Revision())
		a.movedMu.Lock()
		close(a.moved)
		a.moved = make(chan struct{})
		a.movedMu.Unlock()
	})
}

// Revision is the revision of the keys bucket up to which the cache holds every write: a key
// created, revoked or rotated at that revision or before is authenticated as the bucket has it.
// An ingress that wrote a key compares it with the bucket's revision after the write to know
// when its cache holds it (bus.NewestRevision).
func (a *Authenticator) Revision() uint64 { return a.revision.Load() }

// errStopped is await's answer once the Authenticator is closed or its watch ended.
var errStopped = errors.New("the key cache stopped following the keys bucket")

// await waits until the cache holds the bucket up to revision rev, ctx ends or the watch ends.
func (a *Authenticator) await(ctx context.Context, rev uint64) error {
	for {
		a.movedMu.Lock()
		moved := a.moved
		a.movedMu.Unlock()
		if a.revision.Load() >= rev {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-a.done:
			return errStopped
		}
	}
}

// tenantKeys returns the cached key records of a tenant ("" for every key), in no order.
func (a *Authenticator) tenantKeys(tenant string) []storedKey {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if tenant == "" {
		out := make([]storedKey, 0, len(a.byID))
		for h, k := range a.byID {
			out = append(out, storedKey{hash: h, key: k})
		}
		return out
	}
	hashes := a.byTenant[tenant]
	out := make([]storedKey, 0, len(hashes))
	for h := range hashes {
		out = append(out, storedKey{hash: h, key: a.byID[h]})
	}
	return out
}

// apply takes one entry of the keys bucket into the cache, and tells the OnRevoked funcs when
// it ends a key that was accepted.
func (a *Authenticator) apply(e jetstream.KeyValueEntry) {
	if !looksLikeHash(e.Key()) {
		return
	}
	if ended := a.applyLocked(e); ended != "" {
		a.revoked(ended)
	}
}

// applyLocked is apply's change of the cache; it returns the id of a key accepted before it and
// not after.
func (a *Authenticator) applyLocked(e jetstream.KeyValueEntry) (ended string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := e.Key()
	if old, ok := a.byID[h]; ok {
		a.forget(h, old.Tenant)
		if old.RevokedAt == nil {
			ended = old.ID
		}
	}
	if e.Operation() != jetstream.KeyValuePut {
		return ended // deleted or purged
	}
	k, err := decodeKey(e.Value())
	if err != nil {
		a.log.Error("ignoring bad key record", "err", err)
		return ended
	}
	if k.RevokedAt == nil {
		ended = ""
	}
	a.byID[h] = k
	hashes := a.byTenant[k.Tenant]
	if hashes == nil {
		hashes = make(map[string]struct{})
		a.byTenant[k.Tenant] = hashes
	}
	hashes[h] = struct{}{}
	return ended
}

// forget drops the record under hash h, of tenant, from the cache; a.mu is held.
func (a *Authenticator) forget(h, tenant string) {
	delete(a.byID, h)
	hashes := a.byTenant[tenant]
	delete(hashes, h)
	if len(hashes) == 0 {
		delete(a.byTenant, tenant)
	}
}

// Authenticate returns the record of the key with this secret, ErrUnknownKey or ErrRevoked.
func (a *Authenticator) Authenticate(secret string) (Key, error) {
	if secret == "" {
		return Key{}, ErrUnknownKey
	}
	var room [hashLen]byte // every call authenticates: the hash stays on the stack
	h := appendHash(room[:0], secret)
	if a.adminHash != nil && subtle.ConstantTimeCompare(h, a.adminHash) == 1 {
		return Key{ID: "admin", Role: RoleSystemAdmin, Name: "AGENTBUS_ADMIN_KEY"}, nil
	}
	// The lookup is by the SHA-256 of the secret, so its timing tells nothing useful about
	// stored secrets.
	a.mu.RLock()
	k, ok := a.byID[string(h)]
	a.mu.RUnlock()
	if !ok {
		return Key{}, ErrUnknownKey
	}
	if k.RevokedAt != nil {
		return Key{}, ErrRevoked
	}
	return k, nil
}

// Close stops the watch. A connection closed before it has ended the watch already.
func (a *Authenticator) Close() error {
	err := a.watcher.Stop()
	a.stopWatch()
	<-a.done
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("stopping key watch: %w", err)
	}
	return nil
}
