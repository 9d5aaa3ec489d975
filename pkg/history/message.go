package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentbus/agentbus/pkg/jsonenc"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// Direction says who sent a message.
type Direction int

// Directions.
const (
	// In is a message sent to the agent.
	In Direction = 0
	// Out is a message the agent sent.
	Out Direction = 1
)

// MessageType is the kind of a message (docs/messaging.md#messages-and-threads).
type MessageType int

// Message types. 3 is reserved.
const (
	Chat    MessageType = 0
	Data    MessageType = 1
	File    MessageType = 2
	Webhook MessageType = 4
)

// MetaToolCallID is the Metadata key of the id of the tool call a message belongs to: the Data
// message a chat's model asked for (incoming) and its result (outgoing) carry the same id.
const MetaToolCallID = "toolCallId"

// MetaTimer is the Metadata key of the name of the timer that sent an incoming message (package
// agent's Instance.Schedule): the message came from the agent's own schedule, not from its
// participant.
const MetaTimer = "timer"

// Message is one stored message with the fields of the interface's message
// (docs/interface.md#21-message-common-structure-all-types). Its JSON form is what clients see
// in history responses.
type Message struct {
	// ID is unique; the writer gives it (a UUID), and storing the same ID again within the
	// stream's dedupe window stores nothing.
	ID string `json:"id"`
	// CreatedAt is written as package timefmt writes every time: UTC, milliseconds.
	CreatedAt   time.Time   `json:"createdAt"`
	Direction   Direction   `json:"direction"`
	MessageType MessageType `json:"messageType"`
	// Text is null in JSON when nil.
	Text *string `json:"text"`
	// Data is null in JSON when nil or empty.
	Data json.RawMessage `json:"data"`
	// DataCompact says that Data is already written as encoding/json writes a value (valid,
	// compact, HTML characters escaped), as package jsonenc's encoders write it: AppendJSON copies
	// it as it is instead of checking and compacting it again. Leave it false for JSON from
	// elsewhere.
	DataCompact   bool   `json:"-"`
	Hint          string `json:"hint,omitempty"`
	RequestID     string `json:"requestId"`
	ParticipantID string `json:"participantId"`
	WorkflowID    string `json:"workflowId"`
	Scope         string `json:"scope,omitempty"`
	// Metadata describes the message beyond the interface's fields, omitted when empty. A tool call
	// of a chat and its result (package agent's ChatWithTools) carry MetaToolCallID.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Pos is the message's position in the history stream, set when it is read or appended:
	// twice the stream sequence of the record holding it, plus one for the second message of
	// an exchange record. Positions grow with time; they are not part of the JSON form, and Page
	// returns one as the cursor of the next page.
	Pos uint64 `json:"-"`
}

// wireMessage is Message's JSON form, with the time as the fixed-width string.
type wireMessage struct {
	ID            string            `json:"id"`
	CreatedAt     string            `json:"createdAt"`
	Direction     Direction         `json:"direction"`
	MessageType   MessageType       `json:"messageType"`
	Text          *string           `json:"text"`
	Data          json.RawMessage   `json:"data"`
	Hint          string            `json:"hint,omitempty"`
	RequestID     string            `json:"requestId"`
	ParticipantID string            `json:"participantId"`
	WorkflowID    string            `json:"workflowId"`
	Scope         string            `json:"scope,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// Storable reports whether t can be a message's createdAt: its year in UTC has four digits, as
// ISO 8601 timestamps need.
func Storable(t time.Time) bool { return timefmt.InRange(t) }

// MarshalJSON writes createdAt as package timefmt does and a nil or empty Data as null.
func (m Message) MarshalJSON() ([]byte, error) {
	return m.AppendJSON(make([]byte, 0, 256+len(m.Data)))
}

// AppendJSON appends the message's JSON form (MarshalJSON's) to dst. It writes what
// encoding/json writes for the wire form, without reflection: every call stores two messages.
func (m Message) AppendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"id":`...)
	b = jsonenc.AppendString(b, m.ID)
	b = append(b, `,"createdAt":"`...)
	b = timefmt.Append(b, m.CreatedAt)
	b = append(b, `","direction":`...)
	b = jsonenc.AppendInt(b, int64(m.Direction))
	b = append(b, `,"messageType":`...)
	b = jsonenc.AppendInt(b, int64(m.MessageType))
	b, err := appendTextData(b, m.Text, m.Data, m.DataCompact)
	if err != nil {
		return dst, err
	}
	if m.Hint != "" {
		b = append(b, `,"hint":`...)
		b = jsonenc.AppendString(b, m.Hint)
	}
	b = append(b, `,"requestId":`...)
	b = jsonenc.AppendString(b, m.RequestID)
	b = append(b, `,"participantId":`...)
	b = jsonenc.AppendString(b, m.ParticipantID)
	b = append(b, `,"workflowId":`...)
	b = jsonenc.AppendString(b, m.WorkflowID)
	if m.Scope != "" {
		b = append(b, `,"scope":`...)
		b = jsonenc.AppendString(b, m.Scope)
	}
	if len(m.Metadata) > 0 {
		b = append(b, `,"metadata":{`...)
		for i, k := range slices.Sorted(maps.Keys(m.Metadata)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, k)
			b = append(b, ':')
			b = jsonenc.AppendString(b, m.Metadata[k])
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads the JSON form; a null data becomes a nil Data.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w wireMessage
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var t time.Time
	if w.CreatedAt != "" {
		var err error
		if t, err = timefmt.Parse(w.CreatedAt); err != nil {
			return fmt.Errorf("decoding createdAt: %w", err)
		}
		if !Storable(t) {
			return fmt.Errorf("decoding createdAt: %q is outside the years 0000-9999 in UTC", w.CreatedAt)
		}
	}
	data := w.Data
	if bytes.Equal(data, []byte("null")) {
		data = nil
	}
	*m = Message{
		ID:            w.ID,
		CreatedAt:     t,
		Direction:     w.Direction,
		MessageType:   w.MessageType,
		Text:          w.Text,
		Data:          data,
		Hint:          w.Hint,
		RequestID:     w.RequestID,
		ParticipantID: w.ParticipantID,
		WorkflowID:    w.WorkflowID,
		Scope:         w.Scope,
		Metadata:      w.Metadata,
		Pos:           m.Pos,
	}
	return nil
}
