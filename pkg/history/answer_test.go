package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
)

// TestSyncAnswerJSONIsEncodingJSONs checks SyncAnswer's hand-written JSON against encoding/json's
// reflection on the same struct, byte for byte.
func TestSyncAnswerJSONIsEncodingJSONs(t *testing.T) {
	// reflected has SyncAnswer's fields and tags but not its MarshalJSON.
	type reflected history.SyncAnswer
	text := func(s string) *string { return &s }
	ids := history.IDs{MessageID: "m-1", RequestID: "r<1>", WorkflowID: "default:Echo:Supervisor Workflow:a&b", ThreadID: "t\u2028"}
	answers := []*history.SyncAnswer{
		{IDs: ids},
		{},
		{IDs: ids, Response: &history.Reply{}},
		{IDs: ids, Response: &history.Reply{ID: "x", Text: text("hello"), Data: json.RawMessage(`{"a": [1, 2] , "b":"<i>&"}`), MessageType: 1, CreatedAt: "2026-11-24T10:00:00.000Z"}},
		{IDs: ids, Response: &history.Reply{ID: "x", Text: text("bad \xff utf-8, \"quotes\", \\, \n, \u2029, <script>"), Data: json.RawMessage(`null`), MessageType: 2, Scope: "s", Hint: "h"}},
		{IDs: ids, Response: &history.Reply{Text: text(""), Data: json.RawMessage(` "x" `), Hint: "only a hint"}},
		{IDs: ids, Response: &history.Reply{Data: json.RawMessage(`[]`), Scope: "only a scope", MessageType: -1}},
	}
	for _, a := range answers {
		want, err := json.Marshal((*reflected)(a))
		require.NoError(t, err)
		got, err := a.AppendJSON(nil)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
		viaMarshal, err := json.Marshal(a)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(viaMarshal), "json.Marshal uses the same encoding")
	}

	bad := &history.SyncAnswer{IDs: ids, Response: &history.Reply{Data: json.RawMessage(`{"a":`)}}
	_, wantErr := json.Marshal((*reflected)(bad))
	require.Error(t, wantErr)
	got, err := bad.AppendJSON([]byte("prefix"))
	assert.Error(t, err, "invalid data is refused, as encoding/json refuses it")
	assert.Equal(t, "prefix", string(got))
}

// A message's Reply is what decoding its JSON into a Reply gives (a null or empty data being
// nil), and an answer that carries it encoded (ResponseJSON) is byte for byte the answer that
// carries the decoded one: a synchronous endpoint writes either, by the host's version.
func TestMessageReplyIsItsDecodedJSON(t *testing.T) {
	text := func(s string) *string { return &s }
	at := time.Date(2026, 12, 6, 2, 53, 1, 234567891, time.UTC)
	ids := history.IDs{MessageID: "m-1", RequestID: "r-1", WorkflowID: "default:Echo:Supervisor Workflow:a", ThreadID: "t"}
	msgs := []history.Message{
		{ID: "x", CreatedAt: at, Direction: history.Out, MessageType: 1, Text: text("You said: <hi> & \u2028"), RequestID: "r", ParticipantID: "ada", WorkflowID: "w"},
		{ID: "y", CreatedAt: at, MessageType: 2, Data: json.RawMessage(`{"sum": 3, "html":"<b>"}`), Scope: "s", Hint: "h", Metadata: map[string]string{"k": "v"}},
		{ID: "z", CreatedAt: at, MessageType: 2, Data: json.RawMessage(`{"sum":3}`), DataCompact: true},
		{ID: "n", CreatedAt: at, Data: json.RawMessage(`null`)},
		{ID: "e", CreatedAt: at, Data: json.RawMessage{}, Text: text("")},
		{},
	}
	for _, m := range msgs {
		stored, err := m.MarshalJSON()
		require.NoError(t, err)
		var decoded history.Reply
		require.NoError(t, json.Unmarshal(stored, &decoded))
		if string(decoded.Data) == "null" {
			decoded.Data = nil
		}
		want, err := (&history.SyncAnswer{IDs: ids, Response: &decoded}).AppendJSON(nil)
		require.NoError(t, err)
		r := m.Reply()
		encoded, err := r.AppendJSON(nil)
		require.NoError(t, err)
		carried, err := (&history.SyncAnswer{IDs: ids, ResponseJSON: encoded}).AppendJSON(nil)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(carried), "message %q", m.ID)

		// Field by field too, the data compared as JSON (the decoded one is compacted).
		if assert.Equal(t, decoded.Data == nil, r.Data == nil, "message %q: data", m.ID) && r.Data != nil {
			assert.JSONEq(t, string(decoded.Data), string(r.Data), "message %q", m.ID)
		}
		r.DataCompact, r.Data, decoded.Data = false, nil, nil
		assert.Equal(t, decoded, r, "message %q", m.ID)
	}
}
