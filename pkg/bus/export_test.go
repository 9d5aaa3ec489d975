package bus

// ParsePubAckFast exposes parsePubAckFast to the package's external tests.
var ParsePubAckFast = parsePubAckFast
