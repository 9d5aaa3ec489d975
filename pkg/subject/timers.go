package subject

import (
	"hash/fnv"
	"strconv"
)

// The agents' timers are kept in TimerShards streams, each tenant's in one of them (TimerShard):
// the NATS server fires the due schedules of a stream one after the other, in the order they were
// set, and the streams at once, so that a tenant whose thousands of timers fall due together
// delays only the tenants of its shard, not every tenant (docs/limits.md#timers-due-at-once).
// The stream the timers were kept in before, SchedulesStream, is LegacyTimers: what was set
// there fires and is relayed from there, and is replaced or cancelled there.
const (
	// TimerShards is how many streams hold the timers. A deployment keeps the count its
	// streams were made with: a tenant's shard is its id's hash modulo the count.
	TimerShards = 8
	// LegacyTimers is the shard number of SchedulesStream.
	LegacyTimers = -1
	// TimerStreamPrefix begins the name of each timer stream: AGENTBUS_TIMERS_0 and on.
	TimerStreamPrefix = "AGENTBUS_TIMERS_"
)

// TimerShard is the timer stream a tenant's timers are set in: 0 to TimerShards-1.
func TimerShard(tenant string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	return int(h.Sum32() % TimerShards)
}

// TimerStream names the stream of timer shard shard (SchedulesStream for LegacyTimers).
func TimerStream(shard int) string {
	if shard == LegacyTimers {
		return SchedulesStream
	}
	return TimerStreamPrefix + strconv.Itoa(shard)
}

// timerPrefix begins the subjects of timer shard shard's stream.
func timerPrefix(shard int) string {
	if shard == LegacyTimers {
		return schedPrefix
	}
	return timersPrefix + "." + strconv.Itoa(shard)
}
