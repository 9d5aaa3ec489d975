// Package window keeps a rolling window of request counts, error counts and latency histograms
// per key (a tenant and an agent) in fixed time slots: by default 30 slots of 30 seconds, the
// last 15 minutes. It is what the operator console's charts are drawn from, in process, without
// an external time-series store.
//
// Observe is the hot path: an atomic load, a map lookup, and two or three atomic operations on
// the key's current slot; it does not allocate, and keys share no lock. Histograms use fixed
// log-spaced buckets (Bucket), so the windows of several processes merge by adding their counts
// (Snapshot.Merge), and quantiles are estimated from the merged buckets (Histogram.Quantile).
//
// Memory is bounded: at most Config.MaxKeys keys are kept, each with a fixed ring of slots
// (about 6.5 KiB), and a key with no observation in the whole window is dropped when the window
// is read or a new key needs its place.
package window

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultSlot    = 30 * time.Second
	DefaultSlots   = 30
	DefaultMaxKeys = 1024
)

// Config sizes a Window. Zero fields take the defaults.
type Config struct {
	// Slot is the time one slot covers. It must divide a second or be a whole number of
	// seconds, so that every process's slots start at the same instants.
	Slot time.Duration
	// Slots is how many slots the window holds: the current one, still filling, and the
	// Slots-1 before it.
	Slots int
	// MaxKeys bounds the keys kept. Observations of a new key beyond it are not kept (Dropped).
	MaxKeys int
}

func (c Config) withDefaults() Config {
	if c.Slot <= 0 {
		c.Slot = DefaultSlot
	}
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	return c
}

// Key names one series of the window.
type Key struct {
	Tenant, Agent string
}

// Outcome is how a request ended, for its counts.
type Outcome uint8

const (
	// OK: answered with a status below 400.
	OK Outcome = iota
	// ClientError: answered 4xx. It counts as a request and in ClientErrors, not in Errors.
	ClientError
	// Error: answered 5xx, the handler's own answer or the platform's (no host, timeout,
	// dead letter, bus unavailable).
	Error
)

// OutcomeOf is the outcome of an HTTP status.
func OutcomeOf(status int) Outcome {
	switch {
	case status >= 500:
		return Error
	case status >= 400:
		return ClientError
	default:
		return OK
	}
}

// Window is a rolling window of slots per key. Its methods may be called concurrently.
type Window struct {
	cfg    Config
	slotNs int64
	// ring is the number of slots each series holds, a power of two at least cfg.Slots, so that
	// a slot's place is its index masked.
	ring int64

	// keys is replaced whole (copy on write) when a key is added or dropped, which is rare;
	// Observe reads it with one atomic load and no lock.
	keys atomic.Pointer[map[Key]*series]
	// mu serialises adding and dropping keys.
	mu sync.Mutex
	// swept is the slot index of the last sweep of idle keys.
	swept int64

	dropped atomic.Uint64
	// droppedAt is the slot index of the last dropped observation, 0 for none.
	droppedAt atomic.Int64
}

// series is the ring of slots of one key.
type series struct {
	slots []slot
	// mu serialises the reset of a slot for a new index, and reading the slots.
	mu sync.Mutex
	// retired is set, under mu, when the series was dropped from the window: a slot is not
	// reset any more, and an observation that needs one looks the key up again.
	retired bool
}

// slot holds the counts of one time slot; index is the slot's number (start time / slot width)
// and is stored after its counts were zeroed.
type slot struct {
	index        atomic.Int64
	errors       atomic.Uint32
	clientErrors atomic.Uint32
	buckets      [NumBuckets]atomic.Uint32
}

// New returns an empty window.
func New(cfg Config) *Window {
	cfg = cfg.withDefaults()
	w := &Window{cfg: cfg, slotNs: int64(cfg.Slot), ring: 1}
	for w.ring < int64(cfg.Slots) {
		w.ring <<= 1
	}
	empty := map[Key]*series{}
	w.keys.Store(&empty)
	return w
}

// Config returns the window's configuration, defaults filled in.
func (w *Window) Config() Config { return w.cfg }

// Observe counts one request of key k answered at time at, after d, with outcome o.
func (w *Window) Observe(k Key, at time.Time, d time.Duration, o Outcome) {
	idx := at.UnixNano() / w.slotNs
	b := Bucket(d)
	for {
		s := (*w.keys.Load())[k]
		if s == nil {
			if s = w.add(k, idx); s == nil {
				w.dropped.Add(1)
				w.droppedAt.Store(idx)
				return
			}
		}
		if s.observe(idx&(w.ring-1), idx, b, o) {
			return
		}
		// A sweep dropped the series while it was idle: the key is added anew.
	}
}

// observe counts into slot i for slot index idx; it reports false when the series was retired.
func (s *series) observe(i, idx int64, b int, o Outcome) bool {
	sl := &s.slots[i]
	if got := sl.index.Load(); got != idx {
		if got > idx {
			// The slot already holds a later index: this observation is older than the
			// window's ring (a clock stepped back). It is not kept.
			return true
		}
		if !s.reset(sl, idx) {
			return false
		}
	}
	sl.buckets[b].Add(1)
	switch o {
	case Error:
		sl.errors.Add(1)
	case ClientError:
		sl.clientErrors.Add(1)
	}
	return true
}

// reset zeroes sl for slot index idx, unless another observation did first; it reports false
// when the series was retired.
func (s *series) reset(sl *slot, idx int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retired {
		return false
	}
	if sl.index.Load() >= idx {
		return true
	}
	sl.errors.Store(0)
	sl.clientErrors.Store(0)
	for i := range sl.buckets {
		sl.buckets[i].Store(0)
	}
	sl.index.Store(idx)
	return true
}

// add adds key k, seen at slot index idx, and returns its series; nil when the window holds
// MaxKeys keys that are all active.
func (w *Window) add(k Key, idx int64) *series {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := *w.keys.Load()
	if s := old[k]; s != nil {
		return s
	}
	if len(old) >= w.cfg.MaxKeys || idx-w.swept >= int64(w.cfg.Slots) {
		old = w.sweepLocked(idx)
		if len(old) >= w.cfg.MaxKeys {
			return nil
		}
	}
	s := &series{slots: make([]slot, w.ring)}
	next := make(map[Key]*series, len(old)+1)
	for key, v := range old {
		next[key] = v
	}
	next[k] = s
	w.keys.Store(&next)
	return s
}

// sweepLocked drops the keys with no observation within the window ending at slot index idx,
// and returns the keys that remain. w.mu is held.
func (w *Window) sweepLocked(idx int64) map[Key]*series {
	w.swept = idx
	old := *w.keys.Load()
	var idle []Key
	for k, s := range old {
		if s.retireIfIdle(idx - int64(w.cfg.Slots)) {
			idle = append(idle, k)
		}
	}
	if len(idle) == 0 {
		return old
	}
	next := make(map[Key]*series, len(old)-len(idle))
	for k, s := range old {
		next[k] = s
	}
	for _, k := range idle {
		delete(next, k)
	}
	w.keys.Store(&next)
	return next
}

// retireIfIdle retires s when none of its slots holds an index after oldest, and reports
// whether it did. A slot gets a new index only under s.mu, and an observation into a slot of an
// old index needs one, so no observation lands in a retired series.
func (s *series) retireIfIdle(oldest int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.slots {
		if s.slots[i].index.Load() > oldest {
			return false
		}
	}
	s.retired = true
	return true
}

// Sweep drops the keys with no observation in the window that ends at now. Snapshot sweeps
// too, and so does adding a key when the window is full or was not swept for a window's
// length, so calling it is needed only to give memory back sooner.
func (w *Window) Sweep(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sweepLocked(now.UnixNano() / w.slotNs)
}

// Keys returns how many keys the window holds.
func (w *Window) Keys() int { return len(*w.keys.Load()) }

// Dropped returns how many observations were not kept since the window was made, because their
// key was new while the window held MaxKeys active keys.
func (w *Window) Dropped() uint64 { return w.dropped.Load() }

// Snapshot returns the counts of the window that ends at now: of every key, or of one tenant's
// keys when tenant is not empty. Series and their slots are sorted; slots without observations
// are left out.
func (w *Window) Snapshot(now time.Time, tenant string) Snapshot {
	idx := now.UnixNano() / w.slotNs
	oldest := idx - int64(w.cfg.Slots) // slots after it are in the window
	w.mu.Lock()
	keys := w.sweepLocked(idx)
	w.mu.Unlock()

	snap := Snapshot{SlotMs: w.slotNs / int64(time.Millisecond), Series: []Series{}}
	if at := w.droppedAt.Load(); at > oldest && at != 0 {
		snap.Dropped = true
	}
	for k, s := range keys {
		if tenant != "" && k.Tenant != tenant {
			continue
		}
		if slots := s.read(oldest, idx); len(slots) > 0 {
			snap.Series = append(snap.Series, Series{Tenant: k.Tenant, Agent: k.Agent, Slots: slots})
		}
	}
	snap.sort()
	return snap
}

// read returns the slots of s with an index in (oldest, newest] that hold observations, by
// index.
func (s *series) read(oldest, newest int64) []Slot {
	s.mu.Lock() // no slot is reset while it is read
	defer s.mu.Unlock()
	var out []Slot
	for i := range s.slots {
		sl := &s.slots[i]
		idx := sl.index.Load()
		if idx <= oldest || idx > newest {
			continue
		}
		r := Slot{Index: idx, Errors: uint64(sl.errors.Load()), ClientErrors: uint64(sl.clientErrors.Load())}
		for b := range sl.buckets {
			r.Latency[b] = uint64(sl.buckets[b].Load())
		}
		if r.Latency.Count() > 0 {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Slot) int { return cmp.Compare(a.Index, b.Index) })
	return out
}
