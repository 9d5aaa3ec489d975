package bus

// ParsePubAckFast exposes parsePubAckFast to the package's external tests.
var ParsePubAckFast = parsePubAckFast

// Placed reports how many markers the keeper has placed.
func (k *InboxKeeper) Placed() uint64 { return k.placed.Load() }
