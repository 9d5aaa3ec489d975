package history_test

import (
	"encoding/json"
	"testing"

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
