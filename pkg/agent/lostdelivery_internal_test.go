package agent

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// At a gap in a partition's deliveries, the host gives back only requests that were delivered
// to it under its own pin and never arrived: not one it holds, not one it acknowledged (that one
// is acknowledged again), not one the partition already waited for (a previous owner's, which
// may still be running there, or one this host gave back itself), and none delivered after the
// delivery in hand.
func TestGapGivesBackOnlyWhatWasLostHere(t *testing.T) {
	h := &Host{log: slog.New(slog.DiscardHandler), held: map[heldKey]*delivery{}, convs: map[string]*conversation{}}
	part := &partition{key: partKey{agent: "Seq", n: 0}, pin: "pin-1",
		others: map[string][]uint64{"conv-a": {3}}} // a previous owner's request
	h.held[part.heldKey(5)] = &delivery{seq: 5, part: part}
	part.noteAckedLocked(6, "$JS.ACK.reply-6")

	// Unacknowledged in the inbox, by conversation: 3 the previous owner's, 4 and 7 lost here,
	// 5 held, 6 acknowledged (its acknowledgement lost), 9 on its way after the delivery in
	// hand (8).
	unacked := map[string][]uint64{"conv-a": {3, 4}, "conv-b": {5, 6, 7}, "conv-c": {9}}
	taken, reacks, again := h.beginTenure(part, part.pin, unacked, &deliverySeqs{seq: 8, consumerSeq: 12})

	assert.True(t, taken)
	assert.Equal(t, []uint64{4, 7}, again, "given back")
	assert.Equal(t, []string{"$JS.ACK.reply-6"}, reacks, "acknowledged again")
	assert.Equal(t, map[string][]uint64{"conv-a": {3, 4}, "conv-b": {6, 7}, "conv-c": {9}}, part.others,
		"waited for: every unacknowledged request not held here")
	assert.Equal(t, "pin-1", part.pin)

	// A new tenure gives nothing back: what it finds unacknowledged was delivered to others.
	_, _, again = h.beginTenure(part, "pin-2", map[string][]uint64{"conv-d": {10}}, nil)
	assert.Empty(t, again)
}
