package agent

import (
	"hash/maphash"
	"time"

	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// keptRing remembers the last keptRingSize requests with a caller-chosen id (a kept result) that
// an instance finished on this host, as hashes of their id and fingerprint, with when they
// finished. A copy of one that comes again (its acknowledgement was lost, or the inbox stored it
// twice through a NATS failover) is answered from its kept result; when that cannot be found
// within the de-duplication window, the ring still tells the host that the request ran, and it
// is not run again (Host.settleEarly). It is made with an instance's first such request: an
// instance called without ids holds none.
type keptRing struct {
	sums [keptRingSize]uint64
	at   [keptRingSize]int64 // Unix nanoseconds
	next int
}

// keptRingSize bounds a ring: 512 bytes per instance in memory. A copy stored twice comes
// within a failover's seconds, in which an instance finishes few requests.
const keptRingSize = 32

// keptSeed keys the ring's hashes for this process.
var keptSeed = maphash.MakeSeed()

// keptSum is the hash a keptRing holds for req.
func keptSum(req *agentbusv1.Request) uint64 {
	var h maphash.Hash
	h.SetSeed(keptSeed)
	h.WriteString(req.GetRequestId())
	h.WriteByte(0)
	h.WriteString(req.GetFingerprint())
	return h.Sum64()
}

func (r *keptRing) add(sum uint64, at int64) {
	r.sums[r.next%keptRingSize], r.at[r.next%keptRingSize] = sum, at
	r.next++
}

// has reports whether the ring holds sum, finished at since or later.
func (r *keptRing) has(sum uint64, since int64) bool {
	for i, s := range r.sums[:min(r.next, keptRingSize)] {
		if s == sum && r.at[i] >= since {
			return true
		}
	}
	return false
}

// noteKept remembers that req, a request with a kept result, was finished on the instance.
func (l *liveInstance) noteKept(req *agentbusv1.Request) {
	sum := keptSum(req)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kept == nil {
		l.kept = new(keptRing)
	}
	l.kept.add(sum, time.Now().UnixNano())
}

// keptLately reports whether req, a request with a kept result, was finished on its instance by
// this host within the last window (liveInstance.noteKept), as long as the host keeps the
// instance in memory. After the de-duplication window a requestId names a new request.
func (s *liveSet) keptLately(req *agentbusv1.Request, window time.Duration) bool {
	s.mu.Lock()
	l := s.m[liveKey{req.GetTenantId(), req.GetWorkflowId()}]
	s.mu.Unlock()
	if l == nil {
		return false
	}
	sum := keptSum(req)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kept != nil && l.kept.has(sum, time.Now().Add(-window).UnixNano())
}
