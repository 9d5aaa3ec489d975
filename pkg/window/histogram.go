package window

import (
	"encoding/json"
	"errors"
	"math"
	"math/bits"
	"time"
)

// Latency buckets. They are fixed and the same in every process, so that histograms merge by
// adding their counts.
//
// Bucket 0 holds [0, 2^17 ns), about [0, 131 µs). From there each power of two of nanoseconds
// is cut in two at its √2 point: bucket 1+2j holds [2^(17+j), √2·2^(17+j)) and bucket 2+2j
// holds [√2·2^(17+j), 2^(18+j)) ns, for j from 0 to 22. The last bucket holds everything from
// 2^40 ns (about 18 minutes 20 s) on. Every bucket but the first and the last spans a factor
// √2.
const (
	firstShift = 17
	lastShift  = 40
	// NumBuckets is the number of latency buckets of a Histogram.
	NumBuckets = 2*(lastShift-firstShift) + 2
)

// midpoints[k] is round(√2·2^k), the point that cuts [2^k, 2^(k+1)) in two.
var midpoints = func() (m [lastShift]uint64) {
	for k := range m {
		m[k] = uint64(math.Round(math.Sqrt2 * math.Ldexp(1, k)))
	}
	return m
}()

// Bucket returns the index of the latency bucket that holds d. A negative d counts as 0.
func Bucket(d time.Duration) int {
	if d < 1<<firstShift {
		return 0
	}
	ns := uint64(d)
	k := bits.Len64(ns) - 1 // ns is in [2^k, 2^(k+1))
	if k >= lastShift {
		return NumBuckets - 1
	}
	i := 1 + 2*(k-firstShift)
	if ns >= midpoints[k] {
		i++
	}
	return i
}

// BucketBounds returns the bounds of bucket i: it holds the durations d with lo <= d < hi. The
// last bucket's hi is math.MaxInt64.
func BucketBounds(i int) (lo, hi time.Duration) {
	switch {
	case i <= 0:
		return 0, 1 << firstShift
	case i >= NumBuckets-1:
		return 1 << lastShift, math.MaxInt64
	}
	k := firstShift + (i-1)/2
	if i%2 == 1 {
		return 1 << k, time.Duration(midpoints[k])
	}
	return time.Duration(midpoints[k]), 1 << (k + 1)
}

// Histogram counts latencies by bucket (see Bucket).
type Histogram [NumBuckets]uint64

// Count returns how many latencies h holds.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Add adds o's counts to h.
func (h *Histogram) Add(o *Histogram) {
	for i, c := range o {
		h[i] += c
	}
}

// Quantile estimates the q-quantile (0 < q <= 1) of the latencies h holds; ok is false when h
// is empty.
//
// The estimate lies in the bucket where the cumulative count first reaches q·n (n the total).
// Within that bucket the latencies are taken to be spread evenly on a logarithmic scale: with
// a fraction f of the bucket's count needed to reach q·n, the estimate is lo·(hi/lo)^f, that is
// lo·2^(f/2). The first bucket, which starts at 0, is interpolated linearly, and the last,
// which has no upper bound, answers its lower bound. So the estimate is off by less than a
// factor √2 (the width of a bucket) from the true quantile of the observations.
func (h *Histogram) Quantile(q float64) (d time.Duration, ok bool) {
	n := h.Count()
	if n == 0 || !(q > 0) {
		return 0, false
	}
	q = min(q, 1)
	rank := q * float64(n)
	var cum float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if cum+float64(c) < rank && i < NumBuckets-1 {
			cum += float64(c)
			continue
		}
		f := min(max((rank-cum)/float64(c), 0), 1)
		lo, hi := BucketBounds(i)
		switch i {
		case 0:
			return time.Duration(f * float64(hi)), true
		case NumBuckets - 1:
			return lo, true
		}
		return time.Duration(float64(lo) * math.Exp2(f/2)), true
	}
	return 0, false // not reached: the last non-empty bucket answers
}

// histogramJSON is a Histogram on the wire: the counts from bucket From on, up to the last
// non-empty bucket, so that the empty buckets on either side of a distribution cost nothing.
type histogramJSON struct {
	From   int      `json:"from"`
	Counts []uint64 `json:"counts"`
}

// MarshalJSON writes h as {"from": i, "counts": [...]}.
func (h Histogram) MarshalJSON() ([]byte, error) {
	lo, hi := 0, NumBuckets
	for lo < hi && h[lo] == 0 {
		lo++
	}
	for hi > lo && h[hi-1] == 0 {
		hi--
	}
	return json.Marshal(histogramJSON{From: lo, Counts: h[lo:hi]})
}

// errBuckets is the error of a histogram whose buckets are not this package's.
var errBuckets = errors.New("window: histogram buckets out of range")

// UnmarshalJSON reads what MarshalJSON writes.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var in histogramJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.From < 0 || in.From+len(in.Counts) > NumBuckets {
		return errBuckets
	}
	*h = Histogram{}
	copy(h[in.From:], in.Counts)
	return nil
}
