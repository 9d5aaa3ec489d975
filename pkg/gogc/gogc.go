// Package gogc sets the garbage collector's target of agentbus's processes (GOGC) when the
// environment gives none, and their soft memory limit (Limit: AGENTBUS_MEMORY_LIMIT, unless
// GOMEMLIMIT is set).
//
// Go's default, 100, collects whenever the heap has doubled since the last collection. The
// ingress and the workflow host keep a live heap of 2–3 MB and allocate with every call, so under
// load they collected every few tens of milliseconds (about 27 and 18 times a second at 8,000
// calls a second, docs/performance.md), each collection costing about the same whatever the
// heap's size. A process that embeds the NATS server holds the store's block
// caches, and at 100 collects every few hundred milliseconds, its slowest calls piling up around
// the collections. At 400 each collects four to five times less often, for a few more megabytes
// of memory in the ingress and the host, and about 1.6 times the resident memory in the
// standalone (130 → 211 MB in the benchmark's open loop).
//
// At 400 alone, a heap that holds more (the standalone's store caches and the de-duplication ids
// and results it keeps for 10 minutes) may grow to five times what is live before a collection:
// the memory limit caps that, and below it the target of 400 holds.
package gogc

import (
	"runtime/debug"
	"strconv"
)

// Default is the garbage collector's target of agentbus's processes unless the GOGC
// environment variable sets one.
const Default = 400

// Set sets the garbage collector's target to Default unless GOGC is set (looked up with
// lookupEnv, os.LookupEnv in a program), and returns the target in effect: GOGC's value as
// given, or Default's. Call it once, early in main.
func Set(lookupEnv func(string) (string, bool)) string {
	if v, ok := lookupEnv("GOGC"); ok && v != "" {
		return v // the runtime read it at start
	}
	debug.SetGCPercent(Default)
	return strconv.Itoa(Default)
}
