package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/retry"
	"github.com/agentbus/agentbus/pkg/subject"
)

// While no stream answers a publish (nats.ErrNoResponders), nothing was stored, so it is safe to
// publish again, with or without a de-duplication id. A NATS cluster answers so while it elects
// a new leader for the stream, for seconds after the leader's node died (docs/architecture.md,
// "A webhook call, step by step"); a publisher that gave up at once would refuse every request
// of that window. Publish and Waiter.Await publish again, after waits that grow from
// noStreamFirstWait to noStreamMaxWait, for as long as their caller's budget allows.
const (
	noStreamFirstWait = 100 * time.Millisecond
	noStreamMaxWait   = 500 * time.Millisecond
)

// noStreamPolicy paces the publishes of one message while no stream answers: 100 ms doubling up
// to 500 ms.
var noStreamPolicy = retry.Policy{First: noStreamFirstWait, Max: noStreamMaxWait}

// AttemptTimeout bounds one attempt of a read or write on a request's path that its caller
// tries again when it fails (an instance's record, a kept result; a publish that a stream stores
// at most once, resendAfter). An answer takes milliseconds; one that has not come by then was
// lost with the server or the connection it went through, or with the stream's or bucket's
// leader, whose followers drop what reaches them unanswered until they have elected a new one
// (4–9 s after its node died). An attempt that waited for JetStream's default timeout (5 s)
// could add five seconds to a call for each stream or bucket it met that way. Use Attempt.
const AttemptTimeout = 2 * time.Second

// resendAfter is how long Publish and Waiter.Await wait for the acknowledgement of a message
// that a stream stores at most once (resendable) before they send it again: AttemptTimeout,
// which tests shorten (SetResendAfter).
var resendAfter = AttemptTimeout

// Attempt returns ctx bounded by AttemptTimeout, for one attempt of an operation its caller
// tries again.
func Attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, AttemptTimeout)
}

// noStreamBackoff paces the publishes of one message while no stream answers (noStreamPolicy).
type noStreamBackoff struct{ n int }

// pause waits before the next publish, each time longer up to noStreamMaxWait. It reports false
// without waiting when the wait would not end before until, and ctx's error when ctx ends first.
func (b *noStreamBackoff) pause(ctx context.Context, until time.Time) (bool, error) {
	b.n++
	wait := noStreamPolicy.Delay(b.n)
	if time.Until(until) <= wait {
		return false, nil
	}
	if err := sleep(ctx, wait); err != nil {
		return false, err
	}
	return true, nil
}

// Publish stores m in the stream bound to its subject and returns the server's acknowledgement.
// It is jetstream.JetStream.PublishMsg for the calls made on every request (the inbox and
// history appends): the acknowledgement's common form is read without encoding/json's
// reflection, which was a measurable share of a call's CPU and allocations. Errors are the
// same: a JetStream API error is a *jetstream.APIError, no stream answering is
// jetstream.ErrNoStreamResponse.
//
// Options go in m's headers, as the server reads them: jetstream.MsgIDHeader,
// jetstream.ExpectedLastSubjSeqHeader and so on. Publish keeps trying until ctx's deadline; a
// ctx without one gets js's default timeout, as with PublishMsg: an acknowledgement lost with a
// server that died must not block the publisher for ever.
//
// It publishes again while no stream answers (nats.ErrNoResponders: nothing was stored), and,
// when a stream stores m at most once however often it is sent (resendable), when no
// acknowledgement came within resendAfter; any other message is never published again once the
// server may have stored it, so it is stored at most once. A message sent again that expects a
// last sequence may be refused as a conflict (IsConflict) because its first copy was stored:
// its writer reads the subject again, as after any conflict, and finds it there.
func Publish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (*jetstream.PubAck, error) {
	nc := js.Conn()
	giveUp, hasDeadline := ctx.Deadline()
	if !hasDeadline {
		giveUp = time.Now().Add(js.Options().DefaultTimeout)
	}
	resend := resendable(m)
	request := func() (*nats.Msg, error) {
		if hasDeadline && !resend {
			return nc.RequestMsgWithContext(ctx, m)
		}
		// RequestMsg with a timeout takes a pooled timer; a context with one would cost several
		// allocations per call. The context is still honoured before each attempt.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wait := time.Until(giveUp)
		if resend {
			wait = min(wait, resendAfter)
		}
		if wait <= 0 {
			return nil, nats.ErrTimeout
		}
		return nc.RequestMsg(m, wait)
	}
	resp, err := request()
	var backoff noStreamBackoff
	for {
		if err == nil {
			var ack *jetstream.PubAck
			if ack, err = parsePubAck(resp.Data); err == nil {
				return ack, nil
			}
		}
		if notStoredYet(err) {
			if again, _ := backoff.pause(ctx, giveUp); !again {
				break
			}
		} else if !resend || !errors.Is(err, nats.ErrTimeout) || !time.Now().Before(giveUp) || ctx.Err() != nil {
			break
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			markResent(m)
		}
		resp, err = request()
	}
	return nil, noStreamErr(err)
}

// markResent marks m, a message sent before that the stream may have stored, as sent again
// (subject.HeaderResent) when it is a request to an inbox: a NATS cluster may store such a copy
// twice, and the host that gets a marked copy looks for the messages of an earlier one in the
// request's thread before it runs it. Only the copies sent again carry the mark: a request whose
// first send was acknowledged costs the host nothing more.
func markResent(m *nats.Msg) {
	if m.Header != nil && subject.IsInbox(m.Subject) {
		m.Header.Set(subject.HeaderResent, "1")
	}
}

// resendable reports whether a stream stores m at most once however often it is sent: m has a
// de-duplication id (jetstream.MsgIDHeader), or expects the stream's or its subject's last
// sequence, which a stored copy changes, so that a second copy is refused.
func resendable(m *nats.Msg) bool {
	return m.Header.Get(jetstream.MsgIDHeader) != "" ||
		m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != "" ||
		m.Header.Get(jetstream.ExpectedLastSeqHeader) != ""
}

// noStreamErr names a publish that no stream answered (nats.ErrNoResponders) as PublishMsg does,
// jetstream.ErrNoStreamResponse; other errors are returned as they are.
func noStreamErr(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return jetstream.ErrNoStreamResponse
	}
	return err
}

// jsErrCodeMsgIDInProcess is the JetStream error a stream answers a message with while another
// copy with the same de-duplication id is being stored ("duplicate message id is in process").
const jsErrCodeMsgIDInProcess jetstream.ErrorCode = 10158

// notStoredYet reports a publish error after which the message may be published again at once:
// no stream answered (nothing was stored), or the stream is storing another copy with the same
// de-duplication id, whose acknowledgement the publisher did not get (sent again because it was
// lost). Published again, it is stored, or acknowledged as a duplicate of that copy.
func notStoredYet(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeMsgIDInProcess)
}

// parsePubAck reads a publish acknowledgement: its common forms by hand (parsePubAckFast),
// anything else (an error, a domain, batch fields) through encoding/json.
func parsePubAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := parsePubAckFast(data); ok {
		return ack, nil
	}
	return parsePubAckJSON(data)
}

// parsePubAckJSON reads any acknowledgement through encoding/json, as nats.go does.
func parsePubAckJSON(data []byte) (*jetstream.PubAck, error) {
	var resp struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("nats: %w", resp.Error)
	}
	if resp.PubAck == nil || resp.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return resp.PubAck, nil
}

var (
	ackStreamPrefix = []byte(`{"stream":"`)
	ackSeqKey       = []byte(`,"seq":`)
	// The server writes a duplicate's acknowledgement by hand, with a space.
	ackDuplicate        = []byte(`,"duplicate": true}`)
	ackDuplicateNoSpace = []byte(`,"duplicate":true}`)
)

// parsePubAckFast reads the two forms of a successful acknowledgement that a stream without a
// domain sends, {"stream":"NAME","seq":N} and {"stream":"NAME","seq":N,"duplicate": true}, or
// reports false.
func parsePubAckFast(data []byte) (*jetstream.PubAck, bool) {
	rest, ok := bytes.CutPrefix(data, ackStreamPrefix)
	if !ok {
		return nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return nil, false
	}
	for _, c := range rest[:end] {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return nil, false // escapes, control characters or non-ASCII: leave them to encoding/json
		}
	}
	stream := streamName(rest[:end])
	rest, ok = bytes.CutPrefix(rest[end+1:], ackSeqKey)
	if !ok {
		return nil, false
	}
	n, seq := 0, uint64(0)
	for ; n < len(rest) && rest[n] >= '0' && rest[n] <= '9'; n++ {
		d := uint64(rest[n] - '0')
		if seq > (math.MaxUint64-d)/10 {
			return nil, false // overflows: leave it to encoding/json
		}
		seq = seq*10 + d
	}
	if n == 0 || (n > 1 && rest[0] == '0') {
		return nil, false
	}
	switch tail := rest[n:]; {
	case len(tail) == 1 && tail[0] == '}':
		return &jetstream.PubAck{Stream: stream, Sequence: seq}, true
	case bytes.Equal(tail, ackDuplicate), bytes.Equal(tail, ackDuplicateNoSpace):
		return &jetstream.PubAck{Stream: stream, Sequence: seq, Duplicate: true}, true
	}
	return nil, false
}

// streamName returns b as a string, the package's constant for the streams every call publishes
// to (no allocation).
func streamName(b []byte) string {
	switch string(b) {
	case subject.MessagesStream:
		return subject.MessagesStream
	}
	return string(b)
}
