package history

import (
	"encoding/json"
	"fmt"

	"github.com/agentbus/agentbus/pkg/jsonenc"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// IDs name what send accepted.
type IDs struct {
	MessageID  string `json:"messageId"`
	RequestID  string `json:"requestId"`
	WorkflowID string `json:"workflowId"`
	ThreadID   string `json:"threadId"`
}

// Reply is the reply as synchronous endpoints show it (docs/interface.md#24-converse-response).
type Reply struct {
	ID          string          `json:"id"`
	Text        *string         `json:"text"`
	Data        json.RawMessage `json:"data"`
	MessageType int             `json:"messageType"`
	CreatedAt   string          `json:"createdAt"`
	Scope       string          `json:"scope,omitempty"`
	Hint        string          `json:"hint,omitempty"`
	// DataCompact says that Data is already written as encoding/json writes a value, as
	// Message.DataCompact does: AppendJSON copies it as it is.
	DataCompact bool `json:"-"`
}

// ReplyContentType is the content type of a bus reply whose content is a Reply's JSON
// (Reply.AppendJSON): a workflow host's reply to a Chat, Data or File request. A synchronous
// endpoint writes such content into its answer as it is, without decoding it. Content of
// another type (the stored message's JSON, from a host that does not send this one) is decoded
// into a Reply first.
const ReplyContentType = "application/vnd.agentbus.reply+json"

// Reply is the message as a synchronous caller sees it, the reply of its request: what a
// decoding of the message's JSON into a Reply gives, a null or empty Data being nil.
func (m Message) Reply() Reply {
	data := m.Data
	if len(data) == 0 || string(data) == "null" {
		data = nil
	}
	return Reply{ID: m.ID, Text: m.Text, Data: data, DataCompact: m.DataCompact && data != nil,
		MessageType: int(m.MessageType), CreatedAt: timefmt.Format(m.CreatedAt), Scope: m.Scope, Hint: m.Hint}
}

// SyncAnswer is the answer of send with wait=true: the ids and the handler's reply, null when
// the handler sent none.
type SyncAnswer struct {
	IDs
	Response *Reply `json:"response"`
	// ResponseJSON is the reply already encoded (ReplyContentType), written as it is in place of
	// Response.
	ResponseJSON json.RawMessage `json:"-"`
}

// MarshalJSON writes what encoding/json would write for a, without reflection (AppendJSON).
func (a *SyncAnswer) MarshalJSON() ([]byte, error) { return a.AppendJSON(nil) }

// AppendJSON appends a's JSON form, byte for byte encoding/json's for the struct (ResponseJSON,
// when set, standing for Response): every synchronous send and converse call writes one, and
// encoding/json's reflection took about 2 % of such a call's CPU. It fails only on invalid JSON
// in the response's data.
func (a *SyncAnswer) AppendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"messageId":`...)
	b = jsonenc.AppendString(b, a.MessageID)
	b = append(b, `,"requestId":`...)
	b = jsonenc.AppendString(b, a.RequestID)
	b = append(b, `,"workflowId":`...)
	b = jsonenc.AppendString(b, a.WorkflowID)
	b = append(b, `,"threadId":`...)
	b = jsonenc.AppendString(b, a.ThreadID)
	b = append(b, `,"response":`...)
	if a.ResponseJSON != nil {
		b = append(b, a.ResponseJSON...)
		return append(b, '}'), nil
	}
	if a.Response == nil {
		return append(b, "null}"...), nil
	}
	b, err := a.Response.AppendJSON(b)
	if err != nil {
		return dst, err
	}
	return append(b, '}'), nil
}

// AppendJSON appends m's JSON form, byte for byte encoding/json's for the struct. It fails only
// on invalid JSON in Data.
func (m *Reply) AppendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"id":`...)
	b = jsonenc.AppendString(b, m.ID)
	b, err := appendTextData(b, m.Text, m.Data, m.DataCompact)
	if err != nil {
		return dst, err
	}
	b = append(b, `,"messageType":`...)
	b = jsonenc.AppendInt(b, int64(m.MessageType))
	b = append(b, `,"createdAt":`...)
	b = jsonenc.AppendString(b, m.CreatedAt)
	if m.Scope != "" {
		b = append(b, `,"scope":`...)
		b = jsonenc.AppendString(b, m.Scope)
	}
	if m.Hint != "" {
		b = append(b, `,"hint":`...)
		b = jsonenc.AppendString(b, m.Hint)
	}
	return append(b, '}'), nil
}

// appendTextData appends a message's text and data fields, `,"text":` and `,"data":` with their
// values: the text null when nil, the data as appendData writes it.
func appendTextData(dst []byte, text *string, data json.RawMessage, compact bool) ([]byte, error) {
	b := append(dst, `,"text":`...)
	if text == nil {
		b = append(b, "null"...)
	} else {
		b = jsonenc.AppendString(b, *text)
	}
	b = append(b, `,"data":`...)
	return appendData(b, data, compact)
}

// appendData appends a message's data as encoding/json writes a json.RawMessage, null when it
// is empty; compact data (Message.DataCompact) is copied as it is.
func appendData(dst, data json.RawMessage, compact bool) ([]byte, error) {
	if compact && len(data) > 0 {
		return append(dst, data...), nil
	}
	b, err := jsonenc.AppendRaw(dst, data)
	if err != nil {
		return dst, fmt.Errorf("encoding data: %w", err)
	}
	return b, nil
}

// StreamDelta is the data of a streamed answer's "delta" event: a piece of the reply's text.
type StreamDelta struct {
	Delta string `json:"delta"`
}

// StreamRestart is the data of a streamed answer's "restart" event: the handler runs again, as
// attempt Attempt (2 for the first retry), and what was streamed before belongs to an earlier
// attempt.
type StreamRestart struct {
	Attempt int32 `json:"attempt"`
}
