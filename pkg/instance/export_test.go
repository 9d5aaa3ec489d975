package instance

import "time"

// MaxBatch is how many runs one index entry holds at most.
const MaxBatch = maxBatch

// Hold keeps subj's turn busy, as an append under way would: the runs added meanwhile queue up
// until release, which appends them. It first waits for the turn of an earlier Add, which ends
// a moment after that Add returns, to end.
func (x *Index) Hold(subj string) (release func()) {
	for range 5000 {
		x.mu.Lock()
		if x.turns[subj] == nil {
			t := &turn{}
			x.turns[subj] = t
			x.mu.Unlock()
			return func() { go x.flush(subj, t) }
		}
		x.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	panic("Hold: an append to " + subj + " is still under way after 5 s")
}

// Queued is how many runs wait in subj's turn.
func (x *Index) Queued(subj string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t := x.turns[subj]; t != nil {
		return len(t.queue)
	}
	return 0
}

// Turns is how many subjects have runs queued or an append under way.
func (x *Index) Turns() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.turns)
}
