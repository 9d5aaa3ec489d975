package history

import (
	"encoding/json"
	"fmt"

	"github.com/agentbus/agentbus/pkg/jsonenc"
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
}

// SyncAnswer is the answer of send with wait=true: the ids and the handler's reply, null when
// the handler sent none.
type SyncAnswer struct {
	IDs
	Response *Reply `json:"response"`
}

// MarshalJSON writes what encoding/json would write for a, without reflection (AppendJSON).
func (a *SyncAnswer) MarshalJSON() ([]byte, error) { return a.AppendJSON(nil) }

// AppendJSON appends a's JSON form, byte for byte encoding/json's for the struct: every
// synchronous send and converse call writes one, and encoding/json's reflection took about 2 %
// of such a call's CPU. It fails only on invalid JSON in the response's data.
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
	m := a.Response
	if m == nil {
		return append(b, "null}"...), nil
	}
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, m.ID)
	b = append(b, `,"text":`...)
	if m.Text == nil {
		b = append(b, "null"...)
	} else {
		b = jsonenc.AppendString(b, *m.Text)
	}
	b = append(b, `,"data":`...)
	var err error
	if b, err = jsonenc.AppendRaw(b, m.Data); err != nil {
		return dst, fmt.Errorf("encoding the response's data: %w", err)
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
	return append(b, "}}"...), nil
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
