package instance

// MaxBatch is how many runs one index entry holds at most.
const MaxBatch = maxBatch

// Hold keeps subj's turn busy, as an append under way would: the runs added meanwhile queue up
// until release, which appends them.
func (x *Index) Hold(subj string) (release func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.turns[subj]
	if t == nil {
		t = &turn{}
		x.turns[subj] = t
	}
	if t.busy {
		panic("Hold: an append to " + subj + " is under way")
	}
	t.busy = true
	return func() { go x.flush(subj, t) }
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
