package bus

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
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
