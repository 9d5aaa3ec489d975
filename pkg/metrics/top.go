package metrics

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Other is the value TopLabel gives every name that is not among the busiest.
const Other = "other"

// TopLabel maps names that callers choose (tenants) to label values, keeping the number of
// series bounded: the busiest names, up to the limit it is made with, keep their own value and
// every other name becomes Other. Each label value is a time series in Prometheus, so an
// unbounded set of values would grow its memory without bound.
//
// Until limit names are seen, every name keeps its value. Past that, TopLabel counts the names
// it is asked about (a Space-Saving count over 8 × limit names, so that memory stays bounded
// too) and once per period compares them: a name that is not labelled takes the place of the
// quietest labelled name when it was asked about more than twice as often, with counts halved
// each period so that recent traffic weighs most. The name that loses its place is passed to
// the drop function, which deletes its series: from then on its requests count under Other, and
// the series it had simply end, as Prometheus expects of a series that goes away.
//
// A TopLabel is safe for concurrent use.
type TopLabel struct {
	limit, capacity int
	period          time.Duration
	drop            func(name string)
	now             func() time.Time

	due atomic.Int64 // UnixNano of the next comparison

	mu       sync.RWMutex
	counts   map[string]*count // candidates, the labelled names among them
	labelled map[string]bool
}

// count is how often a name was asked about. A name that took the place of another in a full
// table started from that name's count: err is how much of n that may be (Space-Saving), so
// n - err uses of it are certain.
type count struct {
	n   atomic.Int64
	err int64 // guarded by TopLabel.mu
}

func (c *count) certain() int64 { return c.n.Load() - c.err }

// NewTopLabel returns a TopLabel that keeps up to limit names (at least one), compares them
// every period (a minute when zero) and passes each name that loses its place to drop (nil
// ignores them).
func NewTopLabel(limit int, period time.Duration, drop func(name string)) *TopLabel {
	limit = max(limit, 1)
	if period <= 0 {
		period = time.Minute
	}
	if drop == nil {
		drop = func(string) {}
	}
	t := &TopLabel{limit: limit, capacity: 8 * limit, period: period, drop: drop, now: time.Now,
		counts: make(map[string]*count), labelled: make(map[string]bool)}
	t.due.Store(t.now().Add(period).UnixNano())
	return t
}

// Value counts one use of name and returns name while it is among the busiest, Other otherwise.
func (t *TopLabel) Value(name string) string {
	now := t.now().UnixNano()
	t.mu.RLock()
	c, known := t.counts[name]
	labelled := t.labelled[name]
	t.mu.RUnlock()
	if known {
		c.n.Add(1)
	}
	if known && now < t.due.Load() {
		return label(name, labelled)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !known {
		t.addLocked(name)
	}
	if due := t.due.Load(); now >= due {
		t.due.Store(now + int64(t.period))
		t.compareLocked()
	}
	return label(name, t.labelled[name])
}

func label(name string, labelled bool) string {
	if labelled {
		return name
	}
	return Other
}

// addLocked counts a name not counted yet. A full table gives up its quietest name that is not
// labelled, and the newcomer starts from that name's count, as its possible error
// (Space-Saving: a busy name is not missed, and rare names cannot add up to a busy one).
func (t *TopLabel) addLocked(name string) {
	if c, ok := t.counts[name]; ok { // counted while the lock was free
		c.n.Add(1)
		return
	}
	c := new(count)
	if len(t.counts) >= t.capacity {
		quietest, least := "", int64(0)
		for n, c := range t.counts {
			if v := c.n.Load(); !t.labelled[n] && (quietest == "" || v < least) {
				quietest, least = n, v
			}
		}
		delete(t.counts, quietest)
		c.err = least
	}
	c.n.Store(c.err + 1)
	t.counts[name] = c
	if len(t.labelled) < t.limit {
		t.labelled[name] = true
	}
}

// compareLocked lets the busiest names that are not labelled take the places of the quietest
// labelled ones, by the uses certain of each, then halves every count.
func (t *TopLabel) compareLocked() {
	type entry struct {
		name  string
		count int64
	}
	var in, out []entry
	for n, c := range t.counts {
		e := entry{n, c.certain()}
		if t.labelled[n] {
			in = append(in, e)
		} else {
			out = append(out, e)
		}
	}
	slices.SortFunc(in, func(a, b entry) int { return cmp.Compare(a.count, b.count) })  // quietest first
	slices.SortFunc(out, func(a, b entry) int { return cmp.Compare(b.count, a.count) }) // busiest first
	for i := 0; i < len(in) && i < len(out) && out[i].count > 2*in[i].count; i++ {
		delete(t.labelled, in[i].name)
		t.labelled[out[i].name] = true
		t.drop(in[i].name)
	}
	for n, c := range t.counts {
		if v := c.n.Load() / 2; v > 0 || t.labelled[n] {
			c.n.Store(v)
			c.err /= 2
		} else {
			delete(t.counts, n)
		}
	}
}
