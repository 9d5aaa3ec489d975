package window_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/window"
)

// t0 is a slot boundary for 30 s slots.
var t0 = time.Unix(1_800_000_000, 0)

func TestBucketsCoverEveryDurationOnce(t *testing.T) {
	lo0, _ := window.BucketBounds(0)
	assert.Equal(t, time.Duration(0), lo0)
	prevHi := time.Duration(0)
	for i := range window.NumBuckets {
		lo, hi := window.BucketBounds(i)
		assert.Equal(t, prevHi, lo, "bucket %d starts where %d ends", i, i-1)
		assert.Less(t, lo, hi)
		assert.Equal(t, i, window.Bucket(lo), "lower bound of %d", i)
		if hi != math.MaxInt64 {
			assert.Equal(t, i, window.Bucket(hi-1), "last value of %d", i)
		}
		if i > 0 && i < window.NumBuckets-1 {
			assert.InDelta(t, math.Sqrt2, float64(hi)/float64(lo), 1e-5, "bucket %d spans √2", i)
		}
		prevHi = hi
	}
	assert.Equal(t, 0, window.Bucket(-time.Second))
	assert.Equal(t, window.NumBuckets-1, window.Bucket(time.Hour))
	assert.Equal(t, window.NumBuckets-1, window.Bucket(math.MaxInt64))
	// The range the charts need: from under a millisecond to the longest wait (300 s).
	assert.Less(t, window.Bucket(300*time.Second), window.NumBuckets-1)
	assert.Greater(t, window.Bucket(time.Millisecond), 1)
}

func TestQuantileWithinABucketOfTheTruth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dist := range []struct {
		name string
		draw func() time.Duration
	}{
		{"uniform 1-20 ms", func() time.Duration { return time.Millisecond + time.Duration(rng.Int64N(int64(19*time.Millisecond))) }},
		{"log-normal around 3 ms", func() time.Duration {
			return time.Duration(3e6 * math.Exp(rng.NormFloat64()))
		}},
		{"bimodal 1 ms and 400 ms", func() time.Duration {
			if rng.IntN(100) < 95 {
				return time.Millisecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
			}
			return 400*time.Millisecond + time.Duration(rng.Int64N(int64(100*time.Millisecond)))
		}},
	} {
		t.Run(dist.name, func(t *testing.T) {
			var h window.Histogram
			values := make([]time.Duration, 20000)
			for i := range values {
				values[i] = dist.draw()
				h[window.Bucket(values[i])]++
			}
			slices.Sort(values)
			for _, q := range []float64{0.5, 0.9, 0.99} {
				truth := values[int(math.Ceil(q*float64(len(values))))-1]
				got, ok := h.Quantile(q)
				require.True(t, ok)
				ratio := float64(got) / float64(truth)
				assert.True(t, ratio > 1/math.Sqrt2 && ratio < math.Sqrt2, "q%.2f: estimate %v, truth %v", q, got, truth)
			}
		})
	}
}

func TestQuantileEdges(t *testing.T) {
	var h window.Histogram
	_, ok := h.Quantile(0.5)
	assert.False(t, ok, "empty")

	// One value: every quantile is in its bucket.
	h[window.Bucket(10*time.Millisecond)] = 1
	lo, hi := window.BucketBounds(window.Bucket(10 * time.Millisecond))
	for _, q := range []float64{0.01, 0.5, 0.99, 1} {
		got, ok := h.Quantile(q)
		require.True(t, ok)
		assert.True(t, got >= lo && got <= hi, "q%v: %v not in [%v, %v]", q, got, lo, hi)
	}
	// Geometric interpolation: half of a bucket's count is at lo·2^(1/4).
	h = window.Histogram{}
	b := window.Bucket(10 * time.Millisecond)
	h[b] = 2
	got, _ := h.Quantile(0.5)
	assert.InDelta(t, float64(lo)*math.Pow(2, 0.25), float64(got), 2)
	// The first bucket interpolates from 0, the last answers its lower bound.
	h = window.Histogram{}
	h[0] = 4
	got, _ = h.Quantile(0.5)
	_, hi0 := window.BucketBounds(0)
	assert.Equal(t, hi0/2, got)
	h = window.Histogram{}
	h[window.NumBuckets-1] = 1
	got, _ = h.Quantile(0.99)
	lastLo, _ := window.BucketBounds(window.NumBuckets - 1)
	assert.Equal(t, lastLo, got)
}

func TestHistogramJSON(t *testing.T) {
	var h window.Histogram
	h[3], h[5] = 7, 1
	b, err := json.Marshal(h)
	require.NoError(t, err)
	assert.JSONEq(t, `{"from":3,"counts":[7,0,1]}`, string(b))
	var back window.Histogram
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, h, back)

	b, err = json.Marshal(window.Histogram{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"from":48,"counts":[]}`, string(b))
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, window.Histogram{}, back)

	assert.Error(t, json.Unmarshal([]byte(`{"from":47,"counts":[1,2]}`), &back))
	assert.Error(t, json.Unmarshal([]byte(`{"from":-1,"counts":[1]}`), &back))
}

// requests sums a series' requests, errors and client errors.
func totals(sr window.Series) (req, errs, client uint64) {
	for _, sl := range sr.Slots {
		req += sl.Requests()
		errs += sl.Errors
		client += sl.ClientErrors
	}
	return
}

func TestObserveFillsTheSlotOfItsTime(t *testing.T) {
	w := window.New(window.Config{})
	k := window.Key{Tenant: "acme", Agent: "Echo"}
	w.Observe(k, t0, 2*time.Millisecond, window.OK)
	w.Observe(k, t0.Add(29*time.Second), 3*time.Millisecond, window.Error)
	w.Observe(k, t0.Add(30*time.Second), 500*time.Millisecond, window.ClientError)
	w.Observe(k, t0.Add(95*time.Second), 7*time.Millisecond, window.OK)
	w.Observe(window.Key{Tenant: "other", Agent: "Echo"}, t0, time.Millisecond, window.OK)

	snap := w.Snapshot(t0.Add(100*time.Second), "acme")
	assert.Equal(t, int64(30000), snap.SlotMs)
	require.Len(t, snap.Series, 1)
	sr := snap.Series[0]
	assert.Equal(t, "acme", sr.Tenant)
	assert.Equal(t, "Echo", sr.Agent)
	require.Len(t, sr.Slots, 3)
	first := t0.UnixMilli() / 30000
	assert.Equal(t, []int64{first, first + 1, first + 3}, []int64{sr.Slots[0].Index, sr.Slots[1].Index, sr.Slots[2].Index})
	assert.Equal(t, t0.UTC(), sr.Slots[0].Start(snap.SlotMs))
	assert.Equal(t, uint64(2), sr.Slots[0].Requests())
	assert.Equal(t, uint64(1), sr.Slots[0].Errors)
	assert.Equal(t, uint64(1), sr.Slots[1].ClientErrors)
	assert.Equal(t, uint64(0), sr.Slots[1].Errors)
	p50, _ := sr.Slots[1].Latency.Quantile(0.5)
	assert.InDelta(t, 0.5, p50.Seconds(), 0.5*0.42)

	all := w.Snapshot(t0.Add(100*time.Second), "")
	assert.Len(t, all.Series, 2)
	assert.Equal(t, "acme", all.Series[0].Tenant, "sorted by tenant")
}

func TestOldSlotsLeaveTheWindow(t *testing.T) {
	w := window.New(window.Config{})
	k := window.Key{Tenant: "acme", Agent: "Echo"}
	for i := range 40 { // 20 minutes, one call a slot
		w.Observe(k, t0.Add(time.Duration(i)*30*time.Second), time.Millisecond, window.OK)
	}
	now := t0.Add(39*30*time.Second + time.Second)
	snap := w.Snapshot(now, "")
	require.Len(t, snap.Series, 1)
	slots := snap.Series[0].Slots
	require.Len(t, slots, 30, "the current slot and the 29 before it")
	assert.Equal(t, now.UnixMilli()/30000, slots[29].Index)
	assert.Equal(t, slots[29].Index-29, slots[0].Index)

	// A slot reused for a later index starts from zero.
	w.Observe(k, now.Add(30*time.Second), time.Millisecond, window.Error)
	snap = w.Snapshot(now.Add(30*time.Second), "")
	last := snap.Series[0].Slots[len(snap.Series[0].Slots)-1]
	assert.Equal(t, uint64(1), last.Requests())
	assert.Equal(t, uint64(1), last.Errors)

	// An observation older than the slot's content is not kept.
	w.Observe(k, t0, time.Millisecond, window.OK)
	assert.Equal(t, snap, w.Snapshot(now.Add(30*time.Second), ""))
}

func TestIdleKeysAreDroppedAndKeysAreCapped(t *testing.T) {
	w := window.New(window.Config{MaxKeys: 3})
	for i := range 3 {
		w.Observe(window.Key{Tenant: "t", Agent: fmt.Sprint(i)}, t0, time.Millisecond, window.OK)
	}
	w.Observe(window.Key{Tenant: "t", Agent: "over"}, t0, time.Millisecond, window.OK)
	assert.Equal(t, 3, w.Keys())
	assert.Equal(t, uint64(1), w.Dropped())
	assert.True(t, w.Snapshot(t0, "").Dropped)

	// Half a window later key 0 is seen again; a window after the first calls the others are
	// idle and give their place.
	w.Observe(window.Key{Tenant: "t", Agent: "0"}, t0.Add(8*time.Minute), time.Millisecond, window.OK)
	later := t0.Add(15*time.Minute + time.Second)
	w.Observe(window.Key{Tenant: "t", Agent: "new"}, later, time.Millisecond, window.OK)
	assert.Equal(t, 2, w.Keys(), "keys 1 and 2 dropped, 0 and new kept")
	snap := w.Snapshot(later, "")
	assert.False(t, snap.Dropped, "the drop left the window")
	var agents []string
	for _, sr := range snap.Series {
		agents = append(agents, sr.Agent)
	}
	assert.Equal(t, []string{"0", "new"}, agents)

	// A window later still, reading drops them all.
	w.Snapshot(later.Add(16*time.Minute), "")
	assert.Equal(t, 0, w.Keys())
	// A key dropped while idle counts again when it comes back.
	w.Observe(window.Key{Tenant: "t", Agent: "0"}, later.Add(17*time.Minute), time.Millisecond, window.OK)
	snap = w.Snapshot(later.Add(17*time.Minute), "")
	require.Len(t, snap.Series, 1)
	r, _, _ := totals(snap.Series[0])
	assert.Equal(t, uint64(1), r)
}

func TestSnapshotsMergeByAdding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	one, a, b := window.New(window.Config{}), window.New(window.Config{}), window.New(window.Config{})
	keys := []window.Key{{"acme", "Echo"}, {"acme", "Bot"}, {"zeta", "Echo"}}
	for i := range 5000 {
		k := keys[rng.IntN(len(keys))]
		at := t0.Add(time.Duration(rng.Int64N(int64(10 * time.Minute))))
		d := time.Duration(rng.Int64N(int64(time.Second)))
		o := window.Outcome(rng.IntN(3))
		one.Observe(k, at, d, o)
		if i%3 == 0 {
			a.Observe(k, at, d, o)
		} else {
			b.Observe(k, at, d, o)
		}
	}
	now := t0.Add(10 * time.Minute)
	merged := a.Snapshot(now, "")
	require.NoError(t, merged.Merge(b.Snapshot(now, "")))
	assert.Equal(t, one.Snapshot(now, ""), merged)

	// Through JSON, as they travel between processes.
	var back window.Snapshot
	raw, err := json.Marshal(merged)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, merged, back)

	// Merging into an empty snapshot copies; widths must agree.
	var empty window.Snapshot
	require.NoError(t, empty.Merge(merged))
	assert.Equal(t, merged, empty)
	assert.Error(t, empty.Merge(window.Snapshot{SlotMs: 10000}))
}

// TestConcurrentObserveAndRead: observers on several keys across slot boundaries, readers and
// sweeps at the same time (run with -race). No observation is lost or counted twice.
func TestConcurrentObserveAndRead(t *testing.T) {
	w := window.New(window.Config{Slot: time.Second, Slots: 8, MaxKeys: 64})
	const (
		goroutines = 8
		perG       = 4000
	)
	keys := []window.Key{{"a", "x"}, {"a", "y"}, {"b", "x"}}
	var wantErrors, wantClient uint64
	for g := range goroutines {
		for i := range perG {
			switch window.Outcome((g + i) % 3) {
			case window.Error:
				wantErrors++
			case window.ClientError:
				wantClient++
			}
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
				w.Snapshot(t0.Add(3*time.Second), "a")
				w.Sweep(t0.Add(3 * time.Second))
			}
		}
	}()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				// Four slots, walked through in time order by each goroutine.
				at := t0.Add(time.Duration(i) * 4 * time.Second / perG)
				o := window.Outcome((g + i) % 3)
				w.Observe(keys[(g+i)%len(keys)], at, time.Duration(i)*time.Microsecond, o)
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	snap := w.Snapshot(t0.Add(3*time.Second), "")
	var req, errs, client uint64
	for _, sr := range snap.Series {
		r, e, c := totals(sr)
		req, errs, client = req+r, errs+e, client+c
	}
	assert.Equal(t, uint64(goroutines*perG), req)
	assert.Equal(t, wantErrors, errs)
	assert.Equal(t, wantClient, client)
	assert.Equal(t, uint64(0), w.Dropped())
}

func TestObserveDoesNotAllocate(t *testing.T) {
	w := window.New(window.Config{})
	k := window.Key{Tenant: "acme", Agent: "Echo"}
	w.Observe(k, t0, time.Millisecond, window.OK)
	at := t0.Add(time.Second)
	allocs := testing.AllocsPerRun(1000, func() {
		w.Observe(k, at, 3*time.Millisecond, window.Error)
	})
	assert.Zero(t, allocs)
}

func BenchmarkObserve(b *testing.B) {
	w := window.New(window.Config{})
	k := window.Key{Tenant: "default", Agent: "Echo"}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.Observe(k, now, time.Duration(i&0xffff)*time.Microsecond, window.OK)
	}
}

// BenchmarkObserveParallel: every goroutine on one key, the worst case for contention.
func BenchmarkObserveParallel(b *testing.B) {
	w := window.New(window.Config{})
	k := window.Key{Tenant: "default", Agent: "Echo"}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			w.Observe(k, now, time.Duration(i&0xffff)*time.Microsecond, window.OK)
			i++
		}
	})
}

// BenchmarkObserveManyKeys: 500 keys in the window, each observation on another.
func BenchmarkObserveManyKeys(b *testing.B) {
	w := window.New(window.Config{})
	keys := make([]window.Key, 500)
	for i := range keys {
		keys[i] = window.Key{Tenant: fmt.Sprintf("tenant-%d", i/10), Agent: fmt.Sprintf("Agent%d", i%10)}
	}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.Observe(keys[i%len(keys)], now, time.Millisecond, window.OK)
	}
}
