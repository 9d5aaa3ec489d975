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

	"github.com/agentbus/agentbus/pkg/subject"
)

// Publish retries: as jetstream.JetStream.PublishMsg does, a publish that finds no responder
// (a stream leader being elected) is tried again after a short wait.
const (
	publishRetryWait     = 250 * time.Millisecond
	publishRetryAttempts = 2
)

// Publish stores m in the stream bound to its subject and returns the server's acknowledgement.
// It is jetstream.JetStream.PublishMsg for the calls made on every request (the inbox and
// history appends): the acknowledgement's common form is read without encoding/json's
// reflection, which was a measurable share of a call's CPU and allocations. Errors are the
// same: a JetStream API error is a *jetstream.APIError, no stream answering is
// jetstream.ErrNoStreamResponse.
//
// Options go in m's headers, as the server reads them: jetstream.MsgIDHeader,
// jetstream.ExpectedLastSubjSeqHeader and so on. As with PublishMsg, a ctx without a deadline
// gets js's default timeout: an acknowledgement lost with a server that died must not block the
// publisher for ever.
//
// It retries only while no stream answers (nats.ErrNoResponders: nothing was stored), never after
// a timeout, so a message without a de-duplication id is stored at most once.
func Publish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (*jetstream.PubAck, error) {
	nc := js.Conn()
	request := func() (*nats.Msg, error) { return nc.RequestMsgWithContext(ctx, m) }
	if _, ok := ctx.Deadline(); !ok {
		// RequestMsg with a timeout takes a pooled timer; a context with one would cost several
		// allocations per call. The context is still honoured before each attempt.
		timeout := js.Options().DefaultTimeout
		request = func() (*nats.Msg, error) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nc.RequestMsg(m, timeout)
		}
	}
	resp, err := request()
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < publishRetryAttempts; r++ {
		t := time.NewTimer(publishRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = request()
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, jetstream.ErrNoStreamResponse
		}
		return nil, err
	}
	return parsePubAck(resp.Data)
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
	case subject.InboxStream:
		return subject.InboxStream
	case subject.MessagesStream:
		return subject.MessagesStream
	}
	return string(b)
}
