package history_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
)

// FuzzMessageJSON reads arbitrary JSON as a Message. What reads writes valid JSON that reads
// back to the same message, up to what the JSON form is documented to keep: createdAt in UTC to
// the millisecond, data as a JSON value (not its spelling).
func FuzzMessageJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"m1","createdAt":"2024-05-01T12:00:00.123Z","direction":1,"messageType":4,"text":"hi","data":{"a":[1,2.5,"x"]},"hint":"h","requestId":"r","participantId":"p","workflowId":"acme:a:b:c","scope":"s"}`,
		`{"id":"m2","createdAt":"2024-05-01T14:00:00.123456789+02:00","text":null,"data":null}`,
		`{"createdAt":""}`,
		`{"data": { "b" : "<&>" } , "text":""}`,
		`{"ID":"case","Text":"insensitive"}`,
		`{"createdAt":"9999-12-31T22:59:59.999-01:00"}`,
		`{"createdAt":"0000-01-01T00:01:00+00:01"}`,
		// Years outside 0000-9999 in UTC are refused when read, so none is ever written.
		`{"createdAt":"9999-12-31T23:59:59.999-01:00"}`,
		`{"createdAt":"0000-01-01T00:00:00+00:01"}`,
		`{"text":"\ud800","id":"\xff"}`,
		`{"data":"str","direction":-7,"messageType":3}`,
		`{"data":[]}`,
		`{"messageType":1,"text":"sum","data":{"values":[2,3]},"metadata":{"toolCallId":"call_1","b":"<x>","a":""}}`,
		`{"metadata":{}}`,
		`{"metadata":null}`,
		`[]`,
		`null`,
		`{"createdAt":"not a time"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var m history.Message
		if err := json.Unmarshal(in, &m); err != nil {
			return
		}
		b, err := json.Marshal(m)
		require.NoError(t, err, "Marshal of %q read as %+v", in, m)
		require.True(t, json.Valid(b), "Marshal wrote invalid JSON %q", b)
		var back history.Message
		require.NoError(t, json.Unmarshal(b, &back), "%q read as createdAt %v, written as %s, does not read back", in, m.CreatedAt, b)
		want := m.CreatedAt.UTC().Truncate(time.Millisecond)
		require.True(t, back.CreatedAt.Equal(want), "createdAt %v came back as %v (written %s)", m.CreatedAt, back.CreatedAt, b)
		require.Equal(t, m.ID, back.ID, "%q read as %+v came back as %+v", in, m, back)
		require.Equal(t, m.Direction, back.Direction, "%q read as %+v came back as %+v", in, m, back)
		require.Equal(t, m.MessageType, back.MessageType, "%q read as %+v came back as %+v", in, m, back)
		require.Equal(t, m.Hint, back.Hint, "%q read as %+v came back as %+v", in, m, back)
		require.Equal(t, m.RequestID, back.RequestID, "%q read as %+v came back as %+v", in, m, back)
		require.Equal(t, m.ParticipantID, back.ParticipantID, "%q read as %+v came back as %+v", in, m, back)
		require.Equal(t, m.WorkflowID, back.WorkflowID, "%q read as %+v came back as %+v", in, m, back)
		require.Equal(t, m.Scope, back.Scope, "%q read as %+v came back as %+v", in, m, back)
		if m.Text == nil {
			require.Nil(t, back.Text, "text came back")
		} else {
			require.NotNil(t, back.Text, "text %q came back as none", *m.Text)
			require.Equal(t, *m.Text, *back.Text, "text")
		}
		// Nil and empty metadata are the same: none.
		if len(m.Metadata)+len(back.Metadata) > 0 {
			require.Equal(t, m.Metadata, back.Metadata, "metadata")
		}
		require.True(t, sameJSON(t, m.Data, back.Data), "data %q came back as %q", m.Data, back.Data)
		// Written once, the form is stable: writing again gives the same bytes.
		again, err := json.Marshal(back)
		require.NoError(t, err, "second write")
		require.Equal(t, string(b), string(again), "second write differs from first")
	})
}

// sameJSON reports whether two Data fields hold the same JSON value; nil and empty mean none.
func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	for _, x := range []struct {
		raw json.RawMessage
		v   *any
	}{{a, &va}, {b, &vb}} {
		d := json.NewDecoder(bytes.NewReader(x.raw))
		d.UseNumber()
		require.NoError(t, d.Decode(x.v), "data %q is not JSON", x.raw)
	}
	return reflect.DeepEqual(va, vb)
}
