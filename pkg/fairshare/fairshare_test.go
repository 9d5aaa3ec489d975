package fairshare_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/fairshare"
)

// shares returns a share function that reads a table, weight 1 and no cap for keys not in it.
func shares(table map[string]fairshare.Share) func(string) fairshare.Share {
	return func(k string) fairshare.Share { return table[k] }
}

// saturated hands out n items of a queue in which every key always has items waiting, giving
// each back at once (a slot freed), and counts them by key.
func saturated(q *fairshare.Queue[string, int], keys []string, n int) map[string]int {
	for _, k := range keys {
		for i := range 4 {
			q.Push(k, i)
		}
	}
	got := map[string]int{}
	for range n {
		k, _, ok := q.Next()
		if !ok {
			break
		}
		got[k]++
		q.Push(k, 0) // it still has work
		q.Done(k)
	}
	return got
}

func TestItemsOfAKeyComeOutInOrder(t *testing.T) {
	q := fairshare.New[string, int](nil)
	for i := range 1000 {
		q.Push("a", i)
		q.Push("b", -i)
	}
	var a, b []int
	for {
		k, v, ok := q.Next()
		if !ok {
			break
		}
		if k == "a" {
			a = append(a, v)
		} else {
			b = append(b, v)
		}
		q.Done(k)
	}
	require.Len(t, a, 1000)
	require.Len(t, b, 1000)
	for i := range 1000 {
		assert.Equal(t, i, a[i])
		assert.Equal(t, -i, b[i])
	}
	assert.Zero(t, q.Len())
	assert.Zero(t, q.Keys())
}

// Keys of equal weight alternate item by item, whatever the order and number of their items.
func TestEqualKeysTakeTurns(t *testing.T) {
	q := fairshare.New[string, int](nil)
	for i := range 100 {
		q.Push("a", i) // a's whole backlog first
	}
	q.Push("b", 0)
	q.Push("b", 1)
	q.Push("c", 0)
	var order []string
	for range 7 {
		k, _, ok := q.Next()
		require.True(t, ok)
		order = append(order, k)
	}
	assert.Equal(t, []string{"a", "b", "c", "a", "b", "a", "a"}, order)
}

func TestWeightsShareTheTurns(t *testing.T) {
	tests := []struct {
		name    string
		weights map[string]int
	}{
		{"3:1", map[string]int{"a": 3, "b": 1}},
		{"1:1", map[string]int{"a": 1, "b": 1}},
		{"1:2:5", map[string]int{"a": 1, "b": 2, "c": 5}},
		{"10:1:1:1", map[string]int{"a": 10, "b": 1, "c": 1, "d": 1}},
		{"zero and negative weights count as 1", map[string]int{"a": 0, "b": -4, "c": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := map[string]fairshare.Share{}
			var keys []string
			total := 0
			for k, w := range tt.weights {
				table[k] = fairshare.Share{Weight: w}
				keys = append(keys, k)
				total += max(w, 1)
			}
			const n = 10000
			got := saturated(fairshare.New[string, int](shares(table)), keys, n)
			for k, w := range tt.weights {
				want := float64(n) * float64(max(w, 1)) / float64(total)
				assert.InEpsilon(t, want, float64(got[k]), 0.10, "key %s got %d of %d items", k, got[k], n)
				// Deficit round robin is exact over whole rounds: off by less than a round.
				assert.InDelta(t, want, float64(got[k]), float64(total), "key %s", k)
			}
		})
	}
}

// A key's items out at once never pass its cap; the keys without one take the rest.
func TestCapIsNeverExceeded(t *testing.T) {
	table := map[string]fairshare.Share{"capped": {Weight: 5, MaxConcurrent: 2}, "one": {MaxConcurrent: 1}}
	q := fairshare.New[string, int](shares(table))
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"capped", "one", "free", "other"}
	var out []string // items out, by key
	outOf := map[string]int{}
	peak := map[string]int{}
	for range 100000 {
		switch rng.IntN(3) {
		case 0:
			q.Push(keys[rng.IntN(len(keys))], 0)
		case 1:
			if k, _, ok := q.Next(); ok {
				out = append(out, k)
				outOf[k]++
				peak[k] = max(peak[k], outOf[k])
				if c := table[k].MaxConcurrent; c > 0 {
					require.LessOrEqual(t, outOf[k], c, "key %s passed its cap", k)
				}
			}
		case 2:
			if len(out) > 0 {
				i := rng.IntN(len(out))
				k := out[i]
				out[i] = out[len(out)-1]
				out = out[:len(out)-1]
				outOf[k]--
				q.Done(k)
			}
		}
	}
	assert.Equal(t, 2, peak["capped"])
	assert.Equal(t, 1, peak["one"])
	assert.Greater(t, peak["free"], 2)
}

// A capped key gets no item while at its cap, and the others go on; once one of its items is
// back, it gets the next turn that comes round.
func TestCappedKeyWaitsAndComesBack(t *testing.T) {
	q := fairshare.New[string, int](shares(map[string]fairshare.Share{"a": {MaxConcurrent: 1}}))
	q.Push("a", 1)
	q.Push("a", 2)
	q.Push("b", 1)
	q.Push("b", 2)
	q.Push("b", 3)
	k, v, _ := q.Next()
	assert.Equal(t, "a", k)
	assert.Equal(t, 1, v)
	k, _, _ = q.Next()
	assert.Equal(t, "b", k)
	k, _, _ = q.Next()
	assert.Equal(t, "b", k, "a is at its cap")
	q.Done("a")
	k, v, _ = q.Next()
	assert.Equal(t, "b", k, "b's turn came before a was back")
	assert.Equal(t, 3, v)
	k, v, ok := q.Next()
	require.True(t, ok)
	assert.Equal(t, "a", k)
	assert.Equal(t, 2, v)
	_, _, ok = q.Next()
	assert.False(t, ok)
	waiting, out := q.Waiting("a")
	assert.Equal(t, 0, waiting)
	assert.Equal(t, 1, out)
}

// However heavy the other keys are, a key with an item waiting gets it out within one round:
// the sum of the others' weights.
func TestNoKeyStarves(t *testing.T) {
	table := map[string]fairshare.Share{"heavy": {Weight: 1000}, "mid": {Weight: 50}}
	q := fairshare.New[string, int](shares(table))
	for i := range 5000 {
		q.Push("heavy", i)
		q.Push("mid", i)
	}
	for round := range 20 {
		q.Push("light", round)
		waited := 0
		for {
			k, _, ok := q.Next()
			require.True(t, ok)
			q.Done(k)
			if k == "light" {
				break
			}
			waited++
		}
		assert.LessOrEqual(t, waited, 1000+50, "round %d: the light key waited %d items", round, waited)
	}
}

// A key whose items are all handed out and given back is not kept: a million keys that came and
// went leave nothing behind.
func TestIdleKeysCostNothing(t *testing.T) {
	q := fairshare.New[int, int](nil)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const n = 1 << 20
	for i := range n {
		q.Push(i, i)
	}
	require.Equal(t, n, q.Keys())
	busy := heap()
	for range n {
		k, _, ok := q.Next()
		require.True(t, ok)
		q.Done(k)
	}
	assert.Zero(t, q.Keys())
	assert.Zero(t, q.Len())
	after := heap()
	t.Logf("heap: %d KiB before, %d KiB with %d keys waiting, %d KiB after they went", before>>10, busy>>10, n, after>>10)
	assert.Less(t, after, before+64<<10, "keys that went left memory behind")
	runtime.KeepAlive(q)
}

// Pushing, handing out and giving back an item of a key that is already in allocates nothing.
func TestSteadyOperationsAllocateNothing(t *testing.T) {
	q := fairshare.New[string, int](nil)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
		q.Push(keys[i], 0)
	}
	i := 0
	allocs := testing.AllocsPerRun(10000, func() {
		q.Push(keys[i%len(keys)], i)
		k, _, _ := q.Next()
		q.Done(k)
		i++
	})
	assert.Zero(t, allocs)
}

func TestDoneWithoutNextPanics(t *testing.T) {
	q := fairshare.New[string, int](nil)
	assert.Panics(t, func() { q.Done("a") })
	q.Push("a", 1)
	assert.Panics(t, func() { q.Done("a") }, "waiting, not out")
}

// BenchmarkQueue costs one item's way through a queue (Push, Next, Done) with a number of keys
// waiting, each with a few items: the cost per item does not grow with the keys. A key that
// comes and goes with each item (a tenant's lone request) is the "key per item" case.
func BenchmarkQueue(b *testing.B) {
	for _, keys := range []int{1, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			q := fairshare.New[string, int](nil)
			names := make([]string, keys)
			for i := range names {
				names[i] = "tenant-" + strconv.Itoa(i)
				for j := range 4 {
					q.Push(names[i], j)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k, _, _ := q.Next()
				q.Push(names[i%keys], i)
				q.Done(k)
			}
		})
	}
	b.Run("key per item", func(b *testing.B) {
		q := fairshare.New[string, int](nil)
		names := make([]string, 1000)
		for i := range names {
			names[i] = "tenant-" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			q.Push(names[i%len(names)], i)
			k, _, _ := q.Next()
			q.Done(k)
		}
	})
}

// Reshare changes a key's share while it has items: a hold keeps them all waiting, a raised cap
// lets more out at once, a lowered one lets none out until fewer are out than it allows, and a
// changed weight holds from the key's next turn. Keys not matched keep theirs.
func TestReshare(t *testing.T) {
	table := map[string]fairshare.Share{"a": {Hold: true}}
	q := fairshare.New[string, int](shares(table))
	for i := range 6 {
		q.Push("a", i)
	}
	q.Push("b", 0)
	k, _, ok := q.Next()
	require.True(t, ok)
	assert.Equal(t, "b", k, "a is held")
	_, _, ok = q.Next()
	assert.False(t, ok, "a is held")

	table["a"] = fairshare.Share{MaxConcurrent: 3}
	assert.Equal(t, 3, q.Reshare(func(k string) bool { return k == "a" }), "a lets 3 of its 6 out")
	for i := range 3 {
		k, v, ok := q.Next()
		require.True(t, ok)
		assert.Equal(t, "a", k)
		assert.Equal(t, i, v)
	}
	_, _, ok = q.Next()
	assert.False(t, ok, "a is at its cap of 3")

	table["a"] = fairshare.Share{MaxConcurrent: 1}
	assert.Zero(t, q.Reshare(func(string) bool { return true }), "3 out of a cap of 1")
	q.Done("a")
	q.Done("a")
	_, _, ok = q.Next()
	assert.False(t, ok, "one out: at the lowered cap")
	q.Done("a")
	k, v, ok := q.Next()
	require.True(t, ok, "none out: below the lowered cap")
	assert.Equal(t, "a", k)
	assert.Equal(t, 3, v)

	table["a"] = fairshare.Share{Weight: 2, Hold: true}
	q.Reshare(func(k string) bool { return k == "a" })
	q.Done("a")
	table["a"] = fairshare.Share{Weight: 2}
	q.Push("c", 0)
	q.Reshare(func(k string) bool { return k == "a" })
	got := ""
	for {
		k, _, ok := q.Next()
		if !ok {
			break
		}
		got += k
		q.Done(k)
	}
	assert.Equal(t, "caa", got, "c came in while a was held; a's weight is 2")
}

// Range tells every key held with its items waiting and out.
func TestRange(t *testing.T) {
	q := fairshare.New[string, int](nil)
	q.Push("a", 1)
	q.Push("a", 2)
	q.Push("b", 1)
	_, _, _ = q.Next() // a's first
	got := map[string][2]int{}
	q.Range(func(k string, waiting, out int) bool {
		got[k] = [2]int{waiting, out}
		return true
	})
	assert.Equal(t, map[string][2]int{"a": {1, 1}, "b": {1, 0}}, got)
}
