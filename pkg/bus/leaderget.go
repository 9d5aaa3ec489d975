package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// msgGetRequest and msgGetResponse are the JetStream API's STREAM.MSG.GET request and answer.
type msgGetRequest struct {
	Seq        uint64 `json:"seq,omitempty"`
	NextBySubj string `json:"next_by_subj,omitempty"`
	LastBySubj string `json:"last_by_subj,omitempty"`
}

type msgGetResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// LeaderGet reads a message of a stream from the stream's leader: the message at seq or, when
// nextBySubject is set, the first message at or after seq whose subject matches that filter
// (wildcards allowed). It answers jetstream.ErrMsgNotFound when there is none.
//
// Unlike a direct get, which any replica may answer from a state that lags behind, it sees every
// message the stream holds at the time of the call, so its answer may be relied on for ordering.
func LeaderGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64, nextBySubject string) (*jetstream.RawStreamMsg, error) {
	return leaderMsgGet(ctx, nc, stream, msgGetRequest{Seq: seq, NextBySubj: nextBySubject})
}

// leaderMsgGet sends a STREAM.MSG.GET request to the stream's leader, bounded by 5 s when ctx
// has no deadline, and reads its answer.
func leaderMsgGet(ctx context.Context, nc *nats.Conn, stream string, r msgGetRequest) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding message get: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, subject.StreamMsgGetAPI(stream), req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.what(stream), err)
	}
	return decodeMsgGet(msg.Data, r, stream)
}

// what names the message r asks for, in errors.
func (r msgGetRequest) what(stream string) string {
	switch {
	case r.LastBySubj != "":
		return fmt.Sprintf("the last message of %s on %s", stream, r.LastBySubj)
	case r.NextBySubj != "":
		return fmt.Sprintf("the first message of %s on %s from %d", stream, r.NextBySubj, r.Seq)
	}
	return fmt.Sprintf("message %d of %s", r.Seq, stream)
}

// decodeMsgGet reads the answer of the STREAM.MSG.GET request r to stream. Only its errors name
// the message (msgGetRequest.what): a read that succeeds formats nothing.
func decodeMsgGet(data []byte, r msgGetRequest, stream string) (*jetstream.RawStreamMsg, error) {
	var resp msgGetResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r.what(stream), err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) || resp.Error.Code == 404 {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("reading %s: %s (%d)", r.what(stream), resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("reading %s: empty answer", r.what(stream))
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		var err error
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("decoding the headers of %s: %w", r.what(stream), err)
		}
	}
	return m, nil
}
