package tenantlimits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// recordVersion is the version of a stored record; a record of another version is ignored.
const recordVersion = 1

// stored is a record as the bucket holds it.
type stored struct {
	V int `json:"v"`
	Limits
	UpdatedAt timefmt.Time `json:"updatedAt"`
	UpdatedBy string       `json:"updatedBy,omitempty"`
}

// Entry is a tenant's record and when it was set.
type Entry struct {
	Limits    Limits
	UpdatedAt time.Time
	UpdatedBy string
	// Revision is the bucket's revision of the record.
	Revision uint64
}

// ErrNotFound means a tenant has no record: its limits are the deployment's.
var ErrNotFound = errors.New("the tenant has no limits of its own")

// Store reads and writes the tenants' records. Reads go to the bucket's stream leader (the
// bucket is declared so, package bus), so that a read right after a write sees it.
type Store struct{ kv jetstream.KeyValue }

// NewStore returns the store of the bucket kv (bus.Resources.TenantLimits).
func NewStore(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

// Get returns a tenant's record; ErrNotFound when it has none.
func (s *Store) Get(ctx context.Context, tenant string) (Entry, error) {
	e, err := s.kv.Get(ctx, subject.TenantLimitsKey(tenant))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, fmt.Errorf("reading the limits of tenant %s: %w", tenant, err)
	}
	return decode(e)
}

// Put replaces a tenant's record, which Validate accepted, and returns its revision; by names
// who set it. A record without any value is removed instead: the tenant's limits are the
// deployment's again.
func (s *Store) Put(ctx context.Context, tenant string, l Limits, by string) (uint64, error) {
	if l.Empty() {
		if err := s.Delete(ctx, tenant); err != nil {
			return 0, err
		}
		return bus.NewestRevision(ctx, s.kv)
	}
	b, err := json.Marshal(stored{V: recordVersion, Limits: l, UpdatedAt: timefmt.Now(), UpdatedBy: by})
	if err != nil {
		return 0, fmt.Errorf("encoding the limits of tenant %s: %w", tenant, err)
	}
	rev, err := s.kv.Put(ctx, subject.TenantLimitsKey(tenant), b)
	if err != nil {
		return 0, fmt.Errorf("writing the limits of tenant %s: %w", tenant, err)
	}
	return rev, nil
}

// Delete removes a tenant's record, if it has one (a removal of nothing writes nothing).
func (s *Store) Delete(ctx context.Context, tenant string) error {
	if _, err := s.Get(ctx, tenant); errors.Is(err, ErrNotFound) {
		return nil
	}
	if err := s.kv.Delete(ctx, subject.TenantLimitsKey(tenant)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("removing the limits of tenant %s: %w", tenant, err)
	}
	return nil
}

// Empty reports whether l sets nothing.
func (l Limits) Empty() bool {
	if l.Values != (Values{}) || l.KeyRate != nil || l.WriteRate != nil || l.ListenRate != nil || l.MaxBytes != nil || l.MaxInstances != nil {
		return false
	}
	for _, v := range l.Agents {
		if v != (Values{}) {
			return false
		}
	}
	return true
}

func decode(e jetstream.KeyValueEntry) (Entry, error) {
	var st stored
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return Entry{}, fmt.Errorf("decoding the limits of tenant %s: %w", e.Key(), err)
	}
	if st.V != recordVersion {
		return Entry{}, fmt.Errorf("the limits of tenant %s are of version %d", e.Key(), st.V)
	}
	return Entry{Limits: st.Limits, UpdatedAt: st.UpdatedAt.Time, UpdatedBy: st.UpdatedBy, Revision: e.Revision()}, nil
}

// Cache holds every tenant's record in memory, fed by a watch of the bucket, so that what a
// call or a slot needs is read without a NATS round trip. Revision tells how far it is: an
// ingress that wrote a record waits until every ingress's cache holds it before it answers.
type Cache struct {
	log      *slog.Logger
	onChange func(c *Cache, tenant string)

	mu   sync.RWMutex
	recs map[string]Entry
	// revision is that of the newest entry the watch delivered and the cache took in.
	revision atomic.Uint64
	// limited is set while any record holds a value: a deployment that sets none pays for
	// nothing but this load.
	limited atomic.Bool

	// subs are Subscribe's callbacks, called under subsMu (read-locked) after onChange.
	subsMu  sync.RWMutex
	subs    map[uint64]func(c *Cache, tenant string)
	nextSub uint64

	watcher   jetstream.KeyWatcher
	stopWatch context.CancelFunc
	done      chan struct{}
}

// Watch starts following the bucket kv and returns once the records it holds are loaded.
// onChange, when not nil, is called with the cache and a tenant whose record changed (written,
// replaced or removed), after the cache holds the change: for each record as it is loaded, then
// for each change, one at a time, on the watch's goroutine. Close stops it. While JetStream
// answers as a cluster still electing its leaders does, it tries again (bus.Starting).
func Watch(ctx context.Context, kv jetstream.KeyValue, onChange func(c *Cache, tenant string), log *slog.Logger) (*Cache, error) {
	return bus.Starting(ctx, func(ctx context.Context) (*Cache, error) {
		return watch(ctx, kv, onChange, log)
	})
}

// watch is one try of Watch; it stops what it started when it fails.
func watch(ctx context.Context, kv jetstream.KeyValue, onChange func(c *Cache, tenant string), log *slog.Logger) (*Cache, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{log: log, onChange: onChange, recs: map[string]Entry{}, done: make(chan struct{})}
	// The watch outlives ctx: it is bound to the Cache and stopped by Close (as keys.Authenticator).
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	w, err := kv.WatchAll(wctx)
	if err != nil {
		stopWatch()
		return nil, fmt.Errorf("watching tenant limits: %w", err)
	}
	c.watcher, c.stopWatch = w, stopWatch
	upTo, err := bus.NewestRevision(ctx, kv)
	if err != nil {
		_ = w.Stop()
		stopWatch()
		return nil, fmt.Errorf("loading tenant limits: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(c.done)
		bus.Follow(c.watcher, upTo, ready, func(e jetstream.KeyValueEntry, _ bool) {
			c.apply(e)
			c.revision.Store(e.Revision())
			if c.onChange != nil {
				c.onChange(c, e.Key())
			}
			c.subsMu.RLock()
			for _, fn := range c.subs {
				fn(c, e.Key())
			}
			c.subsMu.RUnlock()
		})
	}()
	select {
	case <-ready:
		return c, nil
	case <-ctx.Done():
		_ = w.Stop()
		stopWatch()
		<-c.done
		return nil, fmt.Errorf("loading tenant limits: %w", ctx.Err())
	}
}

// Subscribe shares the cache: fn is called as Watch's onChange is, with each tenant the cache
// holds a record of, then with each tenant whose record changes, until cancel returns (a call
// under way finishes first). Hosts of one process share one cache this way
// (agent.HostConfig.TenantLimits): each cache holds every tenant's record. fn runs on the
// watch's goroutine or, for the records held, on Subscribe's; it must not call cancel.
func (c *Cache) Subscribe(fn func(c *Cache, tenant string)) (cancel func()) {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if c.subs == nil {
		c.subs = make(map[uint64]func(*Cache, string))
	}
	id := c.nextSub
	c.nextSub++
	c.subs[id] = fn
	for _, tenant := range c.Tenants() {
		fn(c, tenant)
	}
	return func() {
		c.subsMu.Lock()
		delete(c.subs, id)
		c.subsMu.Unlock()
	}
}

// apply takes one entry of the bucket in.
func (c *Cache) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Operation() == jetstream.KeyValuePut {
		entry, err := decode(e)
		if err == nil {
			c.recs[e.Key()] = entry
		} else {
			c.log.Error("ignoring bad tenant limits", "tenant", e.Key(), "err", err)
			delete(c.recs, e.Key())
		}
	} else {
		delete(c.recs, e.Key())
	}
	c.limited.Store(len(c.recs) > 0)
}

// Revision is the revision of the bucket up to which the cache holds every write.
func (c *Cache) Revision() uint64 { return c.revision.Load() }

// Get returns a tenant's record; ok is false when it has none (its limits are the defaults).
func (c *Cache) Get(tenant string) (Entry, bool) {
	if c == nil || !c.limited.Load() {
		return Entry{}, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.recs[tenant]
	return e, ok
}

// Limits returns a tenant's limits as set: empty when it has no record.
func (c *Cache) Limits(tenant string) Limits {
	e, _ := c.Get(tenant)
	return e.Limits
}

// Tenants lists, sorted, the tenants with a record.
func (c *Cache) Tenants() []string {
	if c == nil {
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Sorted(maps.Keys(c.recs))
}

// Close stops the watch. A connection closed before it has ended the watch already.
func (c *Cache) Close() error {
	err := c.watcher.Stop()
	c.stopWatch()
	<-c.done
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("stopping the watch of tenant limits: %w", err)
	}
	return nil
}
