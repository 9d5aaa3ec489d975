package idle_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/idle"
)

const period = 5 * time.Millisecond

// stepper is a loop's step that counts its calls, rests while idle is set and, while block is
// set, waits in each call until release.
type stepper struct {
	calls   atomic.Int64
	idle    atomic.Bool
	block   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newStepper() *stepper {
	return &stepper{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (s *stepper) step() bool {
	s.calls.Add(1)
	if s.block.Load() {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.idle.Load()
}

// callsReach waits until s was called n times, failing after a second.
func callsReach(t *testing.T, s *stepper, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return s.calls.Load() >= n }, time.Second, time.Millisecond,
		"%d steps, not %d", s.calls.Load(), n)
}

// noStep checks that s is not called for 20 periods.
func noStep(t *testing.T, s *stepper) {
	t.Helper()
	before := s.calls.Load()
	time.Sleep(20 * period)
	assert.Equal(t, before, s.calls.Load(), "no step")
}

// A loop steps every period while there is work, rests without a goroutine once its step finds
// none, and steps again a period after a Wake.
func TestLoopRestsWithoutAGoroutineUntilWoken(t *testing.T) {
	s := newStepper()
	l := idle.NewLoop(period, period)
	defer l.Stop()
	l.Start(0, s.step)
	callsReach(t, s, 3)

	s.idle.Store(true)
	require.Eventually(t, l.Resting, time.Second, time.Millisecond)
	noStep(t, s)
	goleak.VerifyNone(t) // resting: a loop holds no goroutine

	l.Wake()
	assert.False(t, l.Resting())
	before := s.calls.Load()
	callsReach(t, s, before+1)
	require.Eventually(t, l.Resting, time.Second, time.Millisecond, "idle still: rests again after one step")
}

// Kick runs a step at once, whether the next one is due in an hour or the loop rests; a Kick
// before Start makes the first step come at once.
func TestLoopKick(t *testing.T) {
	s := newStepper()
	l := idle.NewLoop(time.Hour, time.Hour)
	defer l.Stop()
	l.Kick()
	l.Start(time.Hour, s.step)
	callsReach(t, s, 1)
	l.Kick()
	callsReach(t, s, 2)
	goleak.VerifyNone(t) // waiting for its next step: no goroutine either

	s.idle.Store(true)
	l.Kick()
	callsReach(t, s, 3)
	require.Eventually(t, l.Resting, time.Second, time.Millisecond)
	l.Kick()
	callsReach(t, s, 4)
}

// A Wake or a Kick that comes while a step runs is not lost: after a step that found no work, a
// Wake keeps the loop from resting, and a Kick runs the next step at once.
func TestLoopWakeAndKickWhileAStepRuns(t *testing.T) {
	s := newStepper()
	s.idle.Store(true)
	s.block.Store(true)
	l := idle.NewLoop(period, period)
	defer l.Stop()
	l.Start(0, s.step)
	<-s.entered
	l.Wake()
	s.release <- struct{}{}
	<-s.entered // a period later, not resting
	s.release <- struct{}{}
	require.Eventually(t, l.Resting, time.Second, time.Millisecond)

	slow := idle.NewLoop(time.Hour, time.Hour)
	defer slow.Stop()
	slow.Start(0, s.step)
	<-s.entered
	slow.Kick()
	s.release <- struct{}{}
	select {
	case <-s.entered:
	case <-time.After(time.Second):
		t.Fatal("a Kick while the step ran: no step right after it")
	}
	s.block.Store(false)
	s.release <- struct{}{}
}

// Stop waits for the step running, and no step starts after it, whatever is asked.
func TestLoopStop(t *testing.T) {
	s := newStepper()
	s.block.Store(true)
	l := idle.NewLoop(period, period)
	l.Start(0, s.step)
	<-s.entered
	stopped := make(chan struct{})
	go func() {
		l.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a step ran")
	case <-time.After(20 * period):
	}
	s.block.Store(false)
	s.release <- struct{}{}
	<-stopped
	l.Wake()
	l.Kick()
	noStep(t, s)
	assert.Equal(t, int64(1), s.calls.Load())

	never := idle.NewLoop(period, period)
	never.Stop() // a loop never started stops too

	l.Start(0, s.step) // and one stopped starts again
	callsReach(t, s, 2)
	assert.Panics(t, func() { l.Start(0, s.step) }, "started while it runs")
	l.Stop()
}

// With no wake delay, the step a Wake asks for comes at once, however long the period.
func TestLoopWakeAtOnce(t *testing.T) {
	s := newStepper()
	s.idle.Store(true)
	l := idle.NewLoop(time.Hour, 0)
	defer l.Stop()
	l.Start(0, s.step)
	callsReach(t, s, 1)
	require.Eventually(t, l.Resting, time.Second, time.Millisecond)
	l.Wake()
	callsReach(t, s, 2)
	require.Eventually(t, l.Resting, time.Second, time.Millisecond)
	l.Wake()
	callsReach(t, s, 3)
}

// A Wake that comes while the loop decides to rest is never lost: a producer adds work and
// wakes the loop, whose step takes the work and rests when it finds none. Every piece of work is
// taken within a bounded time however the two interleave.
func TestLoopLosesNoWake(t *testing.T) {
	var pending, taken atomic.Int64
	const pieces = 2000
	l := idle.NewLoop(50*time.Microsecond, 0)
	defer l.Stop()
	l.Start(0, func() bool {
		taken.Add(pending.Swap(0))
		return pending.Load() == 0
	})
	for i := range pieces {
		pending.Add(1)
		l.Wake()
		if i%7 == 0 {
			time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
		}
	}
	require.Eventually(t, func() bool { return taken.Load() == pieces }, 5*time.Second, time.Millisecond,
		"work left behind a resting loop: %d of %d taken", taken.Load(), pieces)
}
