package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// Kept is the one store of what agentbus gave up on and keeps for an operator to look at, send
// again or throw away: a stream (ensureKept) of messages, each with the last error
// (subject.HeaderError) and the number of attempts (subject.HeaderAttempts), read by sequence
// and paged under a subject filter. It has two uses: dead letters (pkg/deadletter: requests whose
// handler failed on every attempt) and undelivered events (pkg/subscription: events a receiver
// did not accept in time).
type Kept struct {
	Stream jetstream.Stream
	JS     jetstream.JetStream
	// Noun names one kept message in errors ("dead letter"); its plural adds an s.
	Noun string
	// NotFound is the error of an id the filter does not hold.
	NotFound error
}

// Page sizes of Kept.Page.
const (
	KeptDefaultLimit = 50
	KeptMaxLimit     = 200
)

// Add keeps msg, with the last error cause and the number of attempts made, under the
// de-duplication id msgID: a second Add within the dedupe window stores nothing new and returns
// the first one's sequence.
func (k *Kept) Add(ctx context.Context, msg *nats.Msg, msgID, cause string, attempts uint64) (uint64, error) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	msg.Header.Set(subject.HeaderError, HeaderSafe(cause))
	msg.Header.Set(subject.HeaderAttempts, strconv.FormatUint(attempts, 10))
	ack, err := k.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	if err != nil {
		return 0, fmt.Errorf("storing %s: %w", k.Noun, err)
	}
	return ack.Sequence, nil
}

// Attempts reads the number of attempts Add stored on raw.
func Attempts(raw *jetstream.RawStreamMsg) int {
	n, _ := strconv.Atoi(raw.Header.Get(subject.HeaderAttempts))
	return n
}

// Page returns up to limit kept messages under filter, oldest first, after the sequence after
// (0: from the oldest), and the sequence to continue after (0 when there are no more). A limit
// of 0 or less is KeptDefaultLimit; more than KeptMaxLimit is KeptMaxLimit.
func (k *Kept) Page(ctx context.Context, filter string, after uint64, limit int) ([]*jetstream.RawStreamMsg, uint64, error) {
	if limit <= 0 {
		limit = KeptDefaultLimit
	}
	limit = min(limit, KeptMaxLimit)
	var out []*jetstream.RawStreamMsg
	for seq := after + 1; ; {
		raw, err := k.Stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, 0, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("listing %ss: %w", k.Noun, err)
		}
		if len(out) == limit {
			return out, out[len(out)-1].Sequence, nil
		}
		out = append(out, raw)
		seq = raw.Sequence + 1
	}
}

// Get reads the kept message id, which must be under filter: another's (another tenant's, another
// subscription's) is not found, as one that does not exist.
func (k *Kept) Get(ctx context.Context, id uint64, filter string) (*jetstream.RawStreamMsg, error) {
	if id == 0 {
		return nil, k.NotFound
	}
	raw, err := k.Stream.GetMsg(ctx, id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, k.NotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", k.Noun, err)
	}
	if !subject.MatchesFilter(raw.Subject, filter) {
		return nil, k.NotFound
	}
	return raw, nil
}

// Remove deletes the kept message id, which its caller read first (Get); a deletion the server
// answers with jetstream.ErrMsgNotFound is NotFound.
func (k *Kept) Remove(ctx context.Context, id uint64) error {
	if err := k.Stream.DeleteMsg(ctx, id); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return k.NotFound
		}
		return fmt.Errorf("removing %s: %w", k.Noun, err)
	}
	return nil
}

// Purge removes every kept message under filter, of the tenant named in its error.
func (k *Kept) Purge(ctx context.Context, filter, tenant string) error {
	if err := k.Stream.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
		return fmt.Errorf("purging %ss of %s: %w", k.Noun, tenant, err)
	}
	return nil
}
