package instance

import "context"

// AwaitTurn waits for subj's turn to append, as Index.Add does.
func (x *Index) AwaitTurn(ctx context.Context, subj string) (done func(), err error) {
	return x.await(ctx, subj)
}

// Turns is how many subjects have appends under way or waiting.
func (x *Index) Turns() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.turns)
}
