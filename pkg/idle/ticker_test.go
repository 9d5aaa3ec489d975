package idle_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/idle"
)

const period = 5 * time.Millisecond

// tick waits for the next tick of t, failing after a second.
func tick(t *testing.T, tk *idle.Ticker) {
	t.Helper()
	select {
	case <-tk.C:
	case <-time.After(time.Second):
		t.Fatal("no tick within a second")
	}
}

// quiet checks that t neither ticks nor wakes for 20 periods.
func quiet(t *testing.T, tk *idle.Ticker) {
	t.Helper()
	select {
	case <-tk.C:
		t.Fatal("a resting ticker ticked")
	case <-tk.Woken():
		t.Fatal("woken without a Wake")
	case <-time.After(20 * period):
	}
}

func TestTickerRestsUntilWoken(t *testing.T) {
	tk := idle.NewTicker(period)
	defer tk.Stop()
	tick(t, tk)

	require.True(t, tk.Rest(func() bool { return true }))
	assert.True(t, tk.Resting())
	quiet(t, tk)

	tk.Wake()
	assert.False(t, tk.Resting())
	select {
	case <-tk.Woken():
	case <-time.After(time.Second):
		t.Fatal("Woken did not receive after a Wake")
	}
	tk.Resume()
	tick(t, tk)
	tick(t, tk)
}

func TestTickerWithWorkGoesOn(t *testing.T) {
	tk := idle.NewTicker(period)
	defer tk.Stop()
	require.False(t, tk.Rest(func() bool { return false }))
	assert.False(t, tk.Resting())
	tick(t, tk)

	tk.Wake() // not resting: nothing to end
	select {
	case <-tk.Woken():
		t.Fatal("woken while ticking")
	case <-time.After(2 * period):
	}
}

// A ticker asked to rest again while it rests, and finding work, ticks again without a Wake.
func TestTickerAskedAgainWhileResting(t *testing.T) {
	tk := idle.NewTicker(period)
	defer tk.Stop()
	require.True(t, tk.Rest(func() bool { return true }))
	require.False(t, tk.Rest(func() bool { return false }))
	tick(t, tk)
}

// A Wake that comes while the ticker decides to rest is never lost: a producer adds work and
// wakes the ticker, the owner's loop takes the work on each tick and rests when it finds none.
// Every piece of work is taken within a bounded time however the two interleave.
func TestTickerLosesNoWake(t *testing.T) {
	tk := idle.NewTicker(50 * time.Microsecond)
	defer tk.Stop()
	var pending, taken atomic.Int64
	const pieces = 2000

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-tk.Woken():
				tk.Resume()
			case <-tk.C:
				taken.Add(pending.Swap(0))
				tk.Rest(func() bool { return pending.Load() == 0 })
			}
		}
	})
	defer wg.Wait()
	defer close(done)

	for i := range pieces {
		pending.Add(1)
		tk.Wake()
		if i%7 == 0 {
			time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for taken.Load() != pieces && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.EqualValues(t, pieces, taken.Load(), "work left behind a resting ticker")
}
