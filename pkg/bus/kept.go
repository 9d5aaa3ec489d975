package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
	// Count, when set, is told what each kept message takes in the stream, for its tenant's
	// usage: the bytes Add stored, and what Remove and Purge removed as negative bytes with the
	// time the message was kept. A removal the server answers "not found" is not counted:
	// whoever removed the message first did.
	Count func(tenant string, bytes int64, kept time.Time)
}

// count tells Count of bytes of tenant's, when there is a Count.
func (k *Kept) count(tenant string, bytes int64, kept time.Time) {
	if k.Count != nil && bytes != 0 {
		k.Count(tenant, bytes, kept)
	}
}

// Page sizes of Kept.Page.
const (
	KeptDefaultLimit = 50
	KeptMaxLimit     = 200
)

// Add keeps msg of tenant, with the last error cause and the number of attempts made, under the
// de-duplication id msgID, counts what it takes in the stream (RecordBytes) and returns its
// sequence. A second Add within the dedupe window stores nothing new, counts nothing and
// returns the first one's sequence.
func (k *Kept) Add(ctx context.Context, tenant string, msg *nats.Msg, msgID, cause string, attempts uint64) (uint64, error) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	msg.Header.Set(subject.HeaderError, HeaderSafe(cause))
	msg.Header.Set(subject.HeaderAttempts, strconv.FormatUint(attempts, 10))
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	ack, err := k.JS.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("storing %s: %w", k.Noun, err)
	}
	if !ack.Duplicate {
		k.count(tenant, RecordBytes(msg.Subject, HeaderBytes(msg.Header), len(msg.Data)), time.Now())
	}
	return ack.Sequence, nil
}

// DeletedBefore reports whether the message at seq, which a deletion failed to delete, is gone:
// another process deleted it, or the whole stream. nats.go's error on a deletion names no
// reason: the server's "sequence not found" is not jetstream.ErrMsgNotFound.
func DeletedBefore(ctx context.Context, stream jetstream.Stream, seq uint64) bool {
	_, err := stream.GetMsg(ctx, seq)
	return errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
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

// Remove deletes the kept message raw of tenant, which its caller read (Get), and counts it off;
// a message removed meanwhile (by another Remove, or a Purge) is NotFound, and not counted.
func (k *Kept) Remove(ctx context.Context, tenant string, raw *jetstream.RawStreamMsg) error {
	if err := k.Stream.DeleteMsg(ctx, raw.Sequence); err != nil {
		if DeletedBefore(ctx, k.Stream, raw.Sequence) {
			return k.NotFound
		}
		return fmt.Errorf("removing %s: %w", k.Noun, err)
	}
	k.count(tenant, -StoredBytes(raw), raw.Time)
	return nil
}

// Purge removes every kept message under filter, which are tenant's, and counts each off. It
// reads their headers first, by an ordered consumer, and then purges the filter up to the last
// one read: one kept under filter meanwhile stays, to be removed by the next Purge.
func (k *Kept) Purge(ctx context.Context, filter, tenant string) error {
	removed, last, err := k.sizes(ctx, filter)
	if err != nil {
		return fmt.Errorf("reading the %ss of %s to purge: %w", k.Noun, tenant, err)
	}
	if last == 0 {
		return nil
	}
	if err := k.Stream.Purge(ctx, jetstream.WithPurgeSubject(filter), jetstream.WithPurgeSequence(last+1)); err != nil {
		return fmt.Errorf("purging %ss of %s: %w", k.Noun, tenant, err)
	}
	for _, r := range removed {
		k.count(tenant, -r.Bytes, r.At)
	}
	return nil
}

// sizes reads what each kept message under filter takes in the stream, and the sequence of the
// last one (0 for none), by the headers of an ordered consumer's deliveries.
func (k *Kept) sizes(ctx context.Context, filter string) (out []Stored, last uint64, err error) {
	stream := k.Stream.CachedInfo().Config.Name
	cons, err := k.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, HeadersOnly: true,
	})
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = k.JS.DeleteConsumer(context.WithoutCancel(ctx), stream, cons.CachedInfo().Name) }()
	for pending := cons.CachedInfo().NumPending; pending > 0; {
		got, err := func() (uint64, error) {
			fctx, cancel := context.WithTimeout(ctx, sizesFetchWait)
			defer cancel()
			batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchContext(fctx))
			if err != nil {
				return 0, err
			}
			got := uint64(0)
			for m := range batch.Messages() {
				md, err := m.Metadata()
				if err != nil {
					return got, err
				}
				size, _ := strconv.Atoi(m.Headers().Get(msgSizeHeader))
				out = append(out, Stored{Bytes: RecordBytes(m.Subject(), headerBytes(m.Headers(), headersOnlyHeaders), size), At: md.Timestamp})
				last = md.Sequence.Stream
				got++
			}
			return got, batch.Error()
		}()
		if err != nil {
			return nil, 0, err
		}
		if got == 0 {
			return nil, 0, fmt.Errorf("no message read of %d under %s", pending, filter)
		}
		pending -= min(got, pending)
	}
	return out, last, nil
}

// sizesFetchWait bounds each fetch of Kept.sizes; the messages it asks for are there already.
const sizesFetchWait = 5 * time.Second

// msgSizeHeader is the size of a message's data, which a headers-only consumer delivers in its
// place.
const msgSizeHeader = "Nats-Msg-Size"

// headersOnlyHeaders are the headers a headers-only consumer's delivery has that are not stored
// with the message.
var headersOnlyHeaders = map[string]bool{msgSizeHeader: true}
