// Package idle has the ticker of a periodic job that has nothing to do while its work is idle:
// a host's usage meter, its sweep of instances in memory, an inbox's keeper and the keep-alive of
// held requests. Such a ticker rests (stops ticking) when its owner finds the work idle, and the
// next change that gives the job work wakes it, so that an idle host wakes for none of them.
//
// It is not a scheduler: the owner's loop still selects on the ticker's channels and decides
// what a tick does.
package idle

import (
	"sync/atomic"
	"time"
)

// A Ticker ticks every period like a time.Ticker until it rests (Rest), and again from a
// Wake on. Its owner's loop selects on C and on Woken, calling Resume after Woken: the next tick
// then comes a period later.
//
// Wake may be called from any goroutine and costs one atomic load while the ticker is not
// resting; Rest, Resume and Stop belong to the owner's loop.
type Ticker struct {
	// C delivers the ticks.
	C <-chan time.Time

	t       *time.Ticker
	period  time.Duration
	stopped bool // the owner's: t is stopped
	resting atomic.Bool
	woken   chan struct{}
}

// NewTicker returns a ticker that ticks every period, starting now.
func NewTicker(period time.Duration) *Ticker {
	t := time.NewTicker(period)
	return &Ticker{C: t.C, t: t, period: period, woken: make(chan struct{}, 1)}
}

// Rest stops the ticker if idle reports that the job has nothing to do, and reports whether it
// did. idle is asked after the ticker is marked resting, so a Wake cannot fall between the two:
// either the Wake sees the mark and sends on Woken, or idle sees what the waker changed before
// it called Wake.
func (t *Ticker) Rest(idle func() bool) bool {
	t.resting.Store(true)
	if !idle() && t.resting.CompareAndSwap(true, false) {
		if t.stopped { // asked again while it rested
			t.Resume()
		}
		return false
	}
	// Idle, or a Wake has already ended this rest and sent on Woken, which the loop will see.
	t.t.Stop()
	t.stopped = true
	return true
}

// Wake ends a rest: the owner's loop receives from Woken. Call it after the change that gives
// the job work, not before.
func (t *Ticker) Wake() {
	if t.resting.Load() && t.resting.CompareAndSwap(true, false) {
		select {
		case t.woken <- struct{}{}:
		default:
		}
	}
}

// Woken receives once for each Wake that ended a rest.
func (t *Ticker) Woken() <-chan struct{} { return t.woken }

// Resume starts the ticker again after Woken: its next tick comes a period from now.
func (t *Ticker) Resume() {
	t.t.Reset(t.period)
	t.stopped = false
}

// Resting reports whether the ticker rests.
func (t *Ticker) Resting() bool { return t.resting.Load() }

// Stop stops the ticker for good; no tick comes after it.
func (t *Ticker) Stop() { t.t.Stop() }
