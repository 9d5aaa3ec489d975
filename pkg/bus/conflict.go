package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/retry"
)

// IsConflict reports whether err refuses a compare-and-set write because what it expected had
// changed: another writer got there first. That is a publish whose expected last sequence, or
// expected last subject sequence, did not match, a KV Update at a revision that is no longer the
// key's, or a KV Create of a key that exists.
//
// A stream refuses such a write with the API error code jetstream.JSErrCodeStreamWrongLastSequence
// (10071). A replicated stream refuses it with jetstream.JSErrCodeStreamWrongLastSequenceConstant
// (10164) instead while another write to the subject that expects its last sequence is still
// being agreed on by the replicas: when writers race. nats.go's KV wraps either code in
// jetstream.ErrKeyRevisionMismatch (Update) or jetstream.ErrKeyExists (Create), except a Create
// of a deleted key, which returns the stream's error as it is. IsConflict knows all of these.
func IsConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return true
	}
	return false
}

// A writer that lost a compare-and-set race pauses before it reads again and retries: on a
// replicated stream the write that beat it may still be being agreed on, and until it is, the
// leader shows the subject's old last sequence (and a replica's direct get may show an older
// one still), so a retry at once is refused again. The pauses grow from conflictFirstWait to
// conflictMaxWait: short next to the few milliseconds a replicated write takes, so that
// writers racing on one subject wait about as long as the race lasts.
//
// A writer that has just written knows the subject's newest sequence and needs no read, so under
// steady contention it tends to win again, and the others to wait longer: sixteen writers
// appending over and over to one subject of a stream with three replicas see some appends lose
// fifty times in a row or more, over a few hundred milliseconds. So a write is bounded by the
// time it has met conflicts, ConflictPatience, rather than by a number of attempts; but it makes
// at least conflictMinAttempts, so that on a machine too busy to run it for most of that time it
// still gets its tries.
const (
	conflictFirstWait = 100 * time.Microsecond
	conflictMaxWait   = 4 * time.Millisecond
	// ConflictPatience is how long a write goes on after its first conflict before it gives up.
	ConflictPatience = 2 * time.Second
	// conflictMinAttempts is how many attempts a write makes, whatever the time they took,
	// before it gives up.
	conflictMinAttempts = 64
)

// ConflictPolicy is the retry policy of a compare-and-set write after a conflict: pauses of
// half to all of a step that doubles from 100 µs to 4 ms, for ConflictPatience after the first
// conflict and at least 64 attempts. Its Retryable is IsConflict; it gives up with
// ErrConflictsPersisted.
var ConflictPolicy = retry.Policy{
	First:       conflictFirstWait,
	Max:         conflictMaxWait,
	Jitter:      0.5,
	Patience:    ConflictPatience,
	MinAttempts: conflictMinAttempts,
	Retryable:   IsConflict,
	GiveUp:      ErrConflictsPersisted,
}

// ErrConflictsPersisted is ConflictBackoff.Wait's answer when a write has met conflicts for
// ConflictPatience.
var ErrConflictsPersisted = errors.New("other writers kept getting there first")

// ConflictBackoff paces the attempts of one compare-and-set write after each conflict
// (IsConflict). Its zero value is ready; use one per write. The first attempt, which meets no
// conflict when no other writer is there, waits for nothing.
type ConflictBackoff struct {
	// Patience is how long the write goes on after its first conflict; 0 means
	// ConflictPatience.
	Patience time.Duration

	steps    int       // the pauses taken
	since    time.Time // of the first conflict
	attempts int       // the conflicts met
}

// Wait pauses before the next attempt (ConflictPolicy.Delay): a random time between half and
// all of a step that doubles from conflictFirstWait up to conflictMaxWait, so that writers that
// met at once do not meet again. It returns ctx's error when ctx ends first, and ErrConflictsPersisted without
// pausing once its Patience has passed since the first conflict and it has met
// conflictMinAttempts conflicts.
func (b *ConflictBackoff) Wait(ctx context.Context) error {
	p := ConflictPolicy
	if b.Patience > 0 {
		p.Patience = b.Patience
	}
	b.attempts++
	if now := time.Now(); b.since.IsZero() {
		b.since = now
	} else if p.GaveUp(b.attempts, now.Sub(b.since)) {
		return ErrConflictsPersisted
	}
	return sleep(ctx, b.next())
}

// next is the next pause.
func (b *ConflictBackoff) next() time.Duration {
	b.steps++
	return ConflictPolicy.Delay(b.steps)
}

// RetryConflicts calls attempt, a compare-and-set write that reads what it changes, until it
// answers anything but a conflict (IsConflict), pausing as ConflictPolicy says before each new
// attempt. A conflict that outlasts ctx or ConflictPatience is answered wrapped with Wait's error.
func RetryConflicts(ctx context.Context, attempt func() error) error {
	return RetryConflictsFor(ctx, ConflictPatience, attempt)
}

// RetryConflictsFor is RetryConflicts with a patience of its own: for a write that may wait
// longer than most, such as one that only adds to a set, which no order depends on.
func RetryConflictsFor(ctx context.Context, patience time.Duration, attempt func() error) error {
	p := ConflictPolicy
	if patience > 0 {
		p.Patience = patience
	}
	return p.Do(ctx, attempt)
}
