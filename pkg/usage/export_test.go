package usage

import "time"

// SetClock makes r judge the days by now.
func SetClock(r *Reader, now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
	for _, t := range r.tenants {
		t.validUntil = time.Time{}
	}
}

// PendingTenants is how many tenants m holds counts for.
func PendingTenants(m *Meter) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.tenants)
}

// Resting reports whether m's flushes rest, nothing being left to publish.
func Resting(m *Meter) bool { return m.flushes.Resting() }

// MaxFlushCounters is how many counters a flush publishes at once.
const MaxFlushCounters = maxFlushCounters
