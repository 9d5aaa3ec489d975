package natsembed

import "github.com/agentbus/agentbus/pkg/gogc"

// DefaultGCPercent is the garbage collector's target (GOGC) of a process that embeds the NATS
// server, unless the GOGC environment variable sets one: that of every agentbus process
// (package gogc). In a process whose heap is mostly the file store's block caches, Go's default,
// 100, collects every few hundred milliseconds under load, and the slowest calls pile up around
// the collections and the stores' block-buffer growth (docs/performance.md, "The slowest calls").
const DefaultGCPercent = gogc.Default

// SetGCPercent sets the garbage collector's target to DefaultGCPercent unless GOGC is set
// (looked up with lookupEnv, os.LookupEnv in a program), and returns the target in effect: GOGC's
// value as given, or DefaultGCPercent's. Call it once, early in main.
func SetGCPercent(lookupEnv func(string) (string, bool)) string { return gogc.Set(lookupEnv) }
