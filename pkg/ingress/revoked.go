package ingress

import (
	"sync"
	"sync/atomic"
	"time"
)

// revocations remembers the keys this instance saw revoked lately (keys.Authenticator.OnRevoked),
// so that a call waiting for its handler when its key is revoked is not given the answer: it
// gets 401 instead (errKeyRevoked), and a streamed one ends with that error. A call notes how
// many revocations it saw when it was authenticated (caller.revocations); when none came since,
// the check is one atomic load, so calls pay nothing while no key is revoked.
type revocations struct {
	n    atomic.Uint64
	keep time.Duration // how long a revoked key is remembered: longer than any call waits

	mu  sync.Mutex
	ids map[string]time.Time // key id → when its revocation was seen
}

// newRevocations remembers revoked keys for keep.
func newRevocations(keep time.Duration) *revocations {
	return &revocations{keep: keep, ids: make(map[string]time.Time)}
}

// seen is the count of revocations so far, for a call being authenticated.
func (r *revocations) seen() uint64 { return r.n.Load() }

// note records the revocation of the key id, and forgets those older than r.keep. The record is
// in place before the count moves, so that a call that sees the new count finds it.
func (r *revocations) note(id string) {
	now := time.Now()
	r.mu.Lock()
	for k, at := range r.ids {
		if now.Sub(at) > r.keep {
			delete(r.ids, k)
		}
	}
	r.ids[id] = now
	r.mu.Unlock()
	r.n.Add(1)
}

// revokedSince reports whether c's key was revoked after c was authenticated.
func (r *revocations) revokedSince(c caller) bool {
	if r.n.Load() == c.revocations {
		return false
	}
	r.mu.Lock()
	_, revoked := r.ids[c.key.ID]
	r.mu.Unlock()
	return revoked
}
