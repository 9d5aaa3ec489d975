package natsembed

import (
	"runtime/debug"
	"strconv"
)

// DefaultGCPercent is the garbage collector's target (GOGC) of a process that embeds the NATS
// server, unless the GOGC environment variable sets one. Go's default, 100, collects whenever
// the heap has doubled; in a process whose heap is mostly the file store's block caches that is
// every few hundred milliseconds under load, and the slowest calls pile up around the
// collections and the stores' block-buffer growth (docs/performance.md, "Tail latency"). At 400
// the process collects about four times less often and keeps more freed memory for reuse, for
// about 1.6 times the resident memory (130 → 211 MB in the benchmark's open loop).
const DefaultGCPercent = 400

// SetGCPercent sets the garbage collector's target to DefaultGCPercent unless GOGC is set
// (looked up with lookupEnv, os.LookupEnv in a program), and returns the target in effect: GOGC's
// value as given, or DefaultGCPercent's. Call it once, early in main.
func SetGCPercent(lookupEnv func(string) (string, bool)) string {
	if v, ok := lookupEnv("GOGC"); ok && v != "" {
		return v // the runtime read it at start
	}
	debug.SetGCPercent(DefaultGCPercent)
	return strconv.Itoa(DefaultGCPercent)
}
