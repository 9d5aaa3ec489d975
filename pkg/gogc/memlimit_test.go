package gogc

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// keepLimit restores the process's memory limit after the test.
func keepLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

func TestLimit(t *testing.T) {
	keepLimit(t)

	// GOMEMLIMIT given: the runtime took it at start, and it stays.
	debug.SetMemoryLimit(1 << 40)
	stop, got := Limit(env(map[string]string{"GOMEMLIMIT": "3GiB"}), DefaultMemoryLimit)
	stop()
	assert.Equal(t, "GOMEMLIMIT=3GiB", got)
	assert.Equal(t, int64(1<<40), debug.SetMemoryLimit(-1), "GOMEMLIMIT given, the limit must not change")

	// No GOMEMLIMIT (or an empty one): the limit given, while the live heap is small.
	for _, e := range []map[string]string{nil, {"GOMEMLIMIT": ""}} {
		stop, got = Limit(env(e), DefaultMemoryLimit)
		assert.Equal(t, "256MiB", got)
		assert.Equal(t, int64(DefaultMemoryLimit), debug.SetMemoryLimit(-1))
		stop()
		stop() // twice is fine
	}

	// 0: no limit.
	stop, got = Limit(env(nil), 0)
	stop()
	assert.Equal(t, "off", got)
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))

	// A limit below what the runtime holds now is raised to the floor at once.
	stop, _ = Limit(env(nil), 1<<20)
	defer stop()
	assert.Greater(t, debug.SetMemoryLimit(-1), int64(1<<20))
}

// TestFloor: the limit set is the configured one until twice the live heap plus the runtime's
// other memory exceeds it, then follows that, and comes back when the heap shrinks; small moves
// of the floor are not set (setting a limit stops the world).
func TestFloor(t *testing.T) {
	keepLimit(t)
	const MiB = 1 << 20
	g := &floorGuard{limit: 256 * MiB}
	small := heapFigures{live: 30 * MiB, nonHeap: 10 * MiB}
	assert.Equal(t, int64(70*MiB), floor(small))
	g.set(g.want(small))
	assert.Equal(t, int64(256*MiB), g.current)
	assert.Equal(t, int64(256*MiB), debug.SetMemoryLimit(-1))

	big := heapFigures{live: 200 * MiB, nonHeap: 10 * MiB}
	g.set(g.want(big))
	assert.Equal(t, int64(410*MiB), g.current)
	assert.Equal(t, int64(410*MiB), debug.SetMemoryLimit(-1))

	// A move of less than an eighth is not set.
	g.set(g.want(heapFigures{live: 210 * MiB, nonHeap: 10 * MiB}))
	assert.Equal(t, int64(410*MiB), g.current)
	g.set(g.want(heapFigures{live: 260 * MiB, nonHeap: 10 * MiB}))
	assert.Equal(t, int64(530*MiB), g.current)

	// Back under the limit: the configured limit again, however small the move.
	g.set(g.want(heapFigures{live: 100 * MiB, nonHeap: 10 * MiB}))
	assert.Equal(t, int64(256*MiB), g.current)
	assert.Equal(t, int64(256*MiB), debug.SetMemoryLimit(-1))
}

func TestParseAndFormatBytes(t *testing.T) {
	for s, want := range map[string]int64{
		"0": 0, "268435456": 256 << 20, "100B": 100, "512KiB": 512 << 10, "256MiB": 256 << 20,
		"1GiB": 1 << 30, "2TiB": 2 << 40,
	} {
		got, ok := ParseBytes(s)
		require.True(t, ok, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "MiB", "-1", "+1", "1.5GiB", "1 GiB", "1gib", "1MB", "1G", "9999999TiB", "1BB", "0x10"} {
		_, ok := ParseBytes(s)
		assert.False(t, ok, s)
	}
	for n, want := range map[int64]string{0: "0", 100: "100", 1 << 10: "1KiB", 256 << 20: "256MiB", 3 << 30: "3GiB", 1<<20 + 1: "1048577"} {
		assert.Equal(t, want, FormatBytes(n))
	}
}
