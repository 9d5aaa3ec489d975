package history

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/timefmt"
)

// MarshalJSON writes what encoding/json writes for the wire form.
func FuzzMarshalMatchesEncodingJSON(f *testing.F) {
	f.Add("m1", int64(1714564800123), 1, 4, true, "hi <b>", `{"a": [1, 2.5, "x&y"]}`, "h", "r", "p", "acme:a:b:c", "s")
	f.Add("", int64(0), 0, 0, false, "", "", "", "", "", "", "")
	f.Add("\xff", int64(-62135596800000), -7, 3, true, "\u2028\x00", "not json", "", "\"", "\\", "\n", "")
	f.Fuzz(func(t *testing.T, id string, ms int64, dir, typ int, hasText bool, text, data, hint, req, part, wf, scope string) {
		m := Message{ID: id, CreatedAt: time.UnixMilli(ms), Direction: Direction(dir), MessageType: MessageType(typ),
			Data: json.RawMessage(data), Hint: hint, RequestID: req, ParticipantID: part, WorkflowID: wf, Scope: scope}
		if hasText {
			m.Text = &text
			// Metadata from the same inputs, so that the seed corpus keeps its shape: a
			// message with text and a hint carries the hint as metadata too.
			if hint != "" {
				m.Metadata = map[string]string{MetaToolCallID: hint, text: scope}
			}
		}
		w := wireMessage{ID: m.ID, CreatedAt: m.CreatedAt.UTC().Format(timefmt.Layout), Direction: m.Direction, MessageType: m.MessageType,
			Text: m.Text, Data: m.Data, Hint: m.Hint, RequestID: m.RequestID, ParticipantID: m.ParticipantID, WorkflowID: m.WorkflowID, Scope: m.Scope,
			Metadata: m.Metadata}
		if len(w.Data) == 0 {
			w.Data = nil
		}
		want, wantErr := json.Marshal(w)
		got, err := m.MarshalJSON()
		if wantErr != nil {
			assert.Error(t, err)
			return
		}
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
	})
}
