// Package idle runs the periodic jobs that have nothing to do while their work is idle: a host's
// usage meter, its sweep of instances in memory, an inbox's keeper, the keep-alive of held
// requests, the host's load reports and its slot grants. Such a job rests when its step finds
// the work idle, and the next change that gives it work wakes it, so that an idle host wakes for
// none of them; between steps, and while it rests, it holds no goroutine.
package idle

import (
	"sync"
	"sync/atomic"
	"time"
)

// The states of a Loop.
const (
	loopNew     int32 = iota // made, not started
	loopWaiting              // a timer holds the next step
	loopRunning              // the step runs
	loopResting              // nothing until a Wake or Kick
	loopStopped
)

// A Loop calls its step every period, each time on a goroutine of its own that ends with the step
// (time.AfterFunc): between steps, and while it rests, a Loop holds a timer and no goroutine. An
// agent's host runs several periodic jobs, and a process runs a host of every agent it serves: a
// Loop lets an idle one cost a timer, not a parked goroutine and its stack.
//
// The step reports whether the work is idle; then the loop rests until Wake (the next step after
// the loop's wake delay) or Kick (the next step now). Steps never overlap. Wake and Kick may be
// called from any goroutine, also before Start; Wake costs one atomic load while a step is due.
type Loop struct {
	period, wakeDelay time.Duration
	state             atomic.Int32

	mu   sync.Mutex
	step func() (rest bool)
	// gen counts the timers armed: a timer's step runs only while it is the latest, so that a
	// timer stopped too late to keep its function from starting does nothing.
	gen   uint64
	timer *time.Timer
	// atOnce is set while the timer armed is for a step at once.
	atOnce bool
	// woken and kicked are a Wake and a Kick that came while the loop was new or its step ran.
	woken, kicked bool
	// ran is closed when the running step returns.
	ran chan struct{}
}

// NewLoop returns a loop that steps every period once started; the step that ends a rest comes
// wakeDelay after the Wake (0: at once).
func NewLoop(period, wakeDelay time.Duration) *Loop {
	return &Loop{period: period, wakeDelay: wakeDelay}
}

// Start runs step after first, and then every period while step reports work (a Kick before
// Start makes first 0). A loop stopped may be started again; Start panics on a loop running.
func (l *Loop) Start(first time.Duration, step func() (rest bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.state.Load(); st != loopNew && st != loopStopped {
		panic("idle: Loop started while it runs")
	}
	l.step = step
	if l.kicked {
		first = 0
	}
	l.woken, l.kicked = false, false
	l.armLocked(first)
}

// armLocked sets the next step d from now; l.mu is held.
func (l *Loop) armLocked(d time.Duration) {
	if l.timer != nil {
		l.timer.Stop()
	}
	l.gen++
	gen := l.gen
	l.atOnce = d <= 0
	l.state.Store(loopWaiting)
	l.timer = time.AfterFunc(d, func() { l.run(gen) })
}

// run runs the step of the timer gen, unless a later one replaced it or the loop stopped.
func (l *Loop) run(gen uint64) {
	l.mu.Lock()
	if gen != l.gen || l.state.Load() != loopWaiting {
		l.mu.Unlock()
		return
	}
	l.state.Store(loopRunning)
	ran := make(chan struct{})
	l.ran = ran
	l.mu.Unlock()

	rest := l.step()

	l.mu.Lock()
	defer l.mu.Unlock()
	close(ran)
	l.ran = nil
	switch {
	case l.state.Load() == loopStopped:
	case l.kicked:
		l.armLocked(0)
	case rest && !l.woken:
		l.state.Store(loopResting)
	default:
		l.armLocked(l.period)
	}
	l.woken, l.kicked = false, false
}

// Wake ends a rest: the next step comes the loop's wake delay from now. Call it after the change that gives
// the job work, not before: a step running as it is called either sees the change or does not
// rest.
func (l *Loop) Wake() {
	if l.state.Load() == loopWaiting {
		return // the step due will see the change
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state.Load() {
	case loopResting:
		l.armLocked(l.wakeDelay)
	case loopNew, loopRunning:
		l.woken = true
	}
}

// Kick asks for a step now: at once, or right after the one running.
func (l *Loop) Kick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state.Load() {
	case loopWaiting:
		if !l.atOnce {
			l.armLocked(0)
		}
	case loopResting:
		l.armLocked(0)
	case loopNew, loopRunning:
		l.kicked = true
	}
}

// Resting reports whether the loop rests.
func (l *Loop) Resting() bool { return l.state.Load() == loopResting }

// Stop ends the loop: it waits for a step running and no step starts after it returns. The
// step's owner ends what the step waits on (its context) before calling Stop; a step must not
// call it.
func (l *Loop) Stop() {
	l.mu.Lock()
	l.state.Store(loopStopped)
	if l.timer != nil {
		l.timer.Stop()
	}
	ran := l.ran
	l.mu.Unlock()
	if ran != nil {
		<-ran
	}
}
