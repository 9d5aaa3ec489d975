package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// ParkInbox parks agent's inbox s as DeleteInbox does, for the package's external tests of a
// DeleteInbox stopped half-way.
func ParkInbox(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, agent string) (jetstream.Stream, error) {
	return park(ctx, js, s, subject.RetiredInbox(agent))
}

// ParsePubAckFast exposes parsePubAckFast to the package's external tests.
var ParsePubAckFast = parsePubAckFast

// Placed reports how many markers the keeper has placed.
func (k *InboxKeeper) Placed() uint64 { return k.placed.Load() }

// SetResendAfter sets how long Waiter.Await waits for an acknowledgement before it sends a
// request with a de-duplication id again, until the test ends.
func SetResendAfter(t interface{ Cleanup(func()) }, d time.Duration) {
	old := resendAfter
	resendAfter = d
	t.Cleanup(func() { resendAfter = old })
}

// SetLookupEvery sets how often Waiter.Await reads a late reply's kept result again, until the
// test ends.
func SetLookupEvery(t interface{ Cleanup(func()) }, d time.Duration) {
	old := lookupEvery
	lookupEvery = d
	t.Cleanup(func() { lookupEvery = old })
}

// NextConflictWait returns the pause b.Wait would take next, and counts it taken.
func (b *ConflictBackoff) NextConflictWait() time.Duration { return b.next() }

// SinceFirstConflict makes b's first conflict d ago.
func (b *ConflictBackoff) SinceFirstConflict(d time.Duration) { b.since = time.Now().Add(-d) }

// MetConflicts makes b have met n conflicts.
func (b *ConflictBackoff) MetConflicts(n int) { b.attempts = n }

// ConflictMinAttempts is conflictMinAttempts.
const ConflictMinAttempts = conflictMinAttempts

// SetScanIdle sets how long Scan waits for its watch before it reads the keys it waits for
// directly, until the test ends.
func SetScanIdle(t interface{ Cleanup(func()) }, d time.Duration) {
	old := scanIdle
	scanIdle = d
	t.Cleanup(func() { scanIdle = old })
}

// Resting reports whether the keeper rests.
func (k *InboxKeeper) Resting() bool { return k.loop.Resting() }
