package gogc

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"
)

// DefaultMemoryLimit is the soft memory limit of agentbus's processes (AGENTBUS_MEMORY_LIMIT's
// default) unless the GOMEMLIMIT environment variable sets one: 256 MiB of memory held by the Go
// runtime (the heap, goroutine stacks and the runtime's own), the binary's code not counted.
const DefaultMemoryLimit = 256 << 20

// checkEvery is how often a limit's floor is checked against the live heap.
const checkEvery = time.Second

// Limit sets the soft memory limit to limit bytes unless GOMEMLIMIT is set (looked up with
// lookupEnv), and returns the limit in effect as its Stop and its description: "GOMEMLIMIT=…" as
// given, "off" when limit is 0 (none), else the limit as "256MiB". Call Stop when the process
// stops.
//
// Below the limit, the collector keeps its target (Set): at GOGC 400 a heap may grow to five
// times what is live between collections. Near the limit it collects more often, down to the
// limit's floor: the limit set is never less than twice the live heap plus the runtime's memory
// besides the heap, so that a live heap near or above the limit makes the collector run as
// often as GOGC 100 would, and not nearly continuously. The floor is checked every second while
// the limit applies, and only a limit given by GOMEMLIMIT has none.
func Limit(lookupEnv func(string) (string, bool), limit int64) (stop func(), inEffect string) {
	if v, ok := lookupEnv("GOMEMLIMIT"); ok && v != "" {
		return func() {}, "GOMEMLIMIT=" + v // the runtime read it at start
	}
	if limit <= 0 {
		debug.SetMemoryLimit(math.MaxInt64)
		return func() {}, "off"
	}
	g := &floorGuard{limit: limit, stop: make(chan struct{}), done: make(chan struct{})}
	g.set(g.want(readHeap()))
	go g.run()
	var once sync.Once
	return func() { once.Do(func() { close(g.stop); <-g.done }) }, FormatBytes(limit)
}

// heapFigures are the runtime's figures a limit's floor follows.
type heapFigures struct {
	live    uint64 // the heap's live objects at the last collection
	nonHeap uint64 // memory the runtime holds besides the heap (stacks, metadata, …)
}

// readHeap reads the heap figures from runtime/metrics.
func readHeap() heapFigures {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	var heap uint64
	for i := 2; i < len(s); i++ {
		heap += v(i)
	}
	return heapFigures{live: v(0), nonHeap: v(1) - min(heap, v(1))}
}

// floorGuard keeps the limit set at least twice the live heap plus the runtime's other memory.
type floorGuard struct {
	limit      int64
	current    int64 // the limit last set
	stop, done chan struct{}
}

// floor is the least limit that lets the heap double between collections.
func floor(h heapFigures) int64 {
	return int64(min(2*h.live+h.nonHeap, math.MaxInt64/2))
}

// want is the limit to set for h: the configured limit, or the floor when that is higher.
func (g *floorGuard) want(h heapFigures) int64 { return max(g.limit, floor(h)) }

// set sets the limit when it moved by an eighth or more since last set (setting it stops the
// world for a moment), or back to the configured one.
func (g *floorGuard) set(want int64) {
	if d := want - g.current; g.current != 0 && want != g.limit && d < g.current/8 && -d < g.current/8 {
		return
	}
	if want != g.current {
		debug.SetMemoryLimit(want)
		g.current = want
	}
}

func (g *floorGuard) run() {
	defer close(g.done)
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.set(g.want(readHeap()))
		}
	}
}

// FormatBytes writes n bytes as GOMEMLIMIT and AGENTBUS_MEMORY_LIMIT take them: in the largest
// of TiB, GiB, MiB and KiB that divides it, else in bytes.
func FormatBytes(n int64) string {
	for _, u := range units {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseBytes reads a byte count as GOMEMLIMIT takes it: a whole number with an optional unit,
// B, KiB, MiB, GiB or TiB ("512MiB", "1GiB", "268435456"). It reports false for anything else
// and for a negative count or one that overflows.
func ParseBytes(s string) (int64, bool) {
	num, mult := s, int64(1)
	for _, u := range units {
		if v, ok := trimSuffix(s, u.suffix); ok {
			num, mult = v, u.n
			break
		}
	}
	if v, ok := trimSuffix(num, "B"); ok && mult == 1 {
		num = v
	}
	if num == "" || num[0] == '+' || num[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, false
	}
	return n * mult, true
}

func trimSuffix(s, suffix string) (string, bool) {
	if len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// units are the byte units, largest first.
var units = []struct {
	suffix string
	n      int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
