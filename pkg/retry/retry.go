// Package retry is agentbus's one retry policy: how long to wait before each new attempt of
// something that failed (a first wait that grows by a factor up to a cap, with optional jitter),
// and when to give up (a number of attempts, or a patience measured from the first failure,
// bounded below by a least number of attempts). Every backoff in agentbus is a named Policy
// (bus.ConflictPolicy, the workflow host's handler and NATS retries, subscription deliveries).
//
// It imports only the standard library, so that every package, pkg/bus included, can use it.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ErrGaveUp is Attempts.Wait's answer once the policy gives up (Policy.GaveUp), unless the
// policy names its own (Policy.GiveUp).
var ErrGaveUp = errors.New("retry: attempts used up")

// Policy paces the attempts of one operation. Its zero value retries at once and for ever.
type Policy struct {
	// First is the wait after the first failed attempt.
	First time.Duration
	// Factor multiplies the wait after each further failed attempt; 0 means 2.
	Factor float64
	// Max caps the wait (before jitter); 0 means no cap.
	Max time.Duration
	// Jitter is the share of each wait that is random, from 0 to 1: a wait w becomes a uniformly
	// random time between w·(1−Jitter) and w, so that callers that failed at once do not try
	// again at once.
	Jitter float64

	// MaxAttempts gives up once that many attempts failed; 0 means no such bound.
	MaxAttempts int
	// Patience gives up once that long has passed since the first failure, and at least
	// MinAttempts attempts failed; 0 means no such bound.
	Patience    time.Duration
	MinAttempts int

	// Retryable, for Do, tells the errors worth another attempt; nil means every error.
	Retryable func(error) bool
	// GiveUp is the error of Attempts.Wait (and so of Do) when the policy gives up; nil means
	// ErrGaveUp.
	GiveUp error
	// Rand returns a random number in [0, n); nil means math/rand/v2's Int64N. Tests set it.
	Rand func(n int64) int64
}

// Delay is the wait after the n-th failed attempt (n ≥ 1; less counts as 1):
// min(First·Factor^(n−1), Max), less its jitter.
func (p Policy) Delay(n int) time.Duration {
	factor := p.Factor
	if factor == 0 {
		factor = 2
	}
	w := float64(p.First) * math.Pow(factor, float64(max(n, 1)-1))
	limit := float64(math.MaxInt64)
	if p.Max > 0 {
		limit = float64(p.Max)
	}
	d := time.Duration(math.MaxInt64)
	if w < limit {
		d = time.Duration(w)
	} else if p.Max > 0 {
		d = p.Max
	}
	if p.Jitter <= 0 || d <= 0 {
		return d
	}
	j := time.Duration(float64(d) * min(p.Jitter, 1))
	rnd := p.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	return d - j + time.Duration(rnd(int64(j)+1))
}

// GaveUp reports whether no attempt follows the n-th failed one, the first failure elapsed ago.
func (p Policy) GaveUp(n int, elapsed time.Duration) bool {
	return (p.MaxAttempts > 0 && n >= p.MaxAttempts) ||
		(p.Patience > 0 && elapsed >= p.Patience && n >= p.MinAttempts)
}

// Start begins counting the failed attempts of one operation under p.
func (p Policy) Start() *Attempts { return &Attempts{Policy: p} }

// Do calls fn until it succeeds, fails with an error that is not Retryable (answered as it
// is), or p gives up or ctx ends: then the last error is answered wrapped with ErrGaveUp (or
// p.GiveUp) or ctx's error.
func (p Policy) Do(ctx context.Context, fn func() error) error {
	a := p.Start()
	for {
		err := fn()
		if err == nil || (p.Retryable != nil && !p.Retryable(err)) {
			return err
		}
		if werr := a.Wait(ctx); werr != nil {
			return fmt.Errorf("%w: %w", err, werr)
		}
	}
}

// Attempts counts the failed attempts of one operation; Policy.Start makes one.
type Attempts struct {
	Policy Policy
	n      int
	since  time.Time // of the first failure
}

// Failed counts a failed attempt and answers the wait before the next one, or false when the
// policy gives up. Callers that wait in their own way use it; others use Wait.
func (a *Attempts) Failed() (time.Duration, bool) {
	a.n++
	now := time.Now()
	if a.n == 1 {
		a.since = now
	}
	if a.Policy.GaveUp(a.n, now.Sub(a.since)) {
		return 0, false
	}
	return a.Policy.Delay(a.n), true
}

// Wait counts a failed attempt and pauses before the next one. It answers ErrGaveUp (or the
// policy's GiveUp) without pausing when the policy gives up, and ctx's error when ctx ends first.
func (a *Attempts) Wait(ctx context.Context) error {
	d, ok := a.Failed()
	if !ok {
		if a.Policy.GiveUp != nil {
			return a.Policy.GiveUp
		}
		return ErrGaveUp
	}
	return Sleep(ctx, d)
}

// Reset forgets the failures counted: the next failure is a first one again.
func (a *Attempts) Reset() { a.n, a.since = 0, time.Time{} }

// N is the number of failed attempts counted.
func (a *Attempts) N() int { return a.n }

// Sleep pauses for d, or answers ctx's error when ctx ends first. A ctx ended already answers
// at once, however short d: a select between it and a timer that fired meanwhile (a pause of
// microseconds) would choose either.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
