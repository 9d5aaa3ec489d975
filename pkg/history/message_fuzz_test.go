package history_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

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
		if err != nil {
			t.Fatalf("Marshal of %q read as %+v: %v", in, m, err)
		}
		if !json.Valid(b) {
			t.Fatalf("Marshal wrote invalid JSON %q", b)
		}
		var back history.Message
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q read as createdAt %v, written as %s, does not read back: %v", in, m.CreatedAt, b, err)
		}
		want := m.CreatedAt.UTC().Truncate(time.Millisecond)
		if !back.CreatedAt.Equal(want) {
			t.Fatalf("createdAt %v came back as %v (written %s)", m.CreatedAt, back.CreatedAt, b)
		}
		if back.ID != m.ID || back.Direction != m.Direction || back.MessageType != m.MessageType || back.Hint != m.Hint ||
			back.RequestID != m.RequestID || back.ParticipantID != m.ParticipantID || back.WorkflowID != m.WorkflowID ||
			back.Scope != m.Scope {
			t.Fatalf("%q read as %+v came back as %+v", in, m, back)
		}
		if (back.Text == nil) != (m.Text == nil) || (m.Text != nil && *back.Text != *m.Text) {
			t.Fatalf("text %v came back as %v", m.Text, back.Text)
		}
		if len(m.Metadata)+len(back.Metadata) > 0 && !reflect.DeepEqual(m.Metadata, back.Metadata) {
			t.Fatalf("metadata %v came back as %v", m.Metadata, back.Metadata)
		}
		if !sameJSON(t, m.Data, back.Data) {
			t.Fatalf("data %q came back as %q", m.Data, back.Data)
		}
		// Written once, the form is stable: writing again gives the same bytes.
		again, err := json.Marshal(back)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("second write %s differs from first %s (%v)", again, b, err)
		}
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
		if err := d.Decode(x.v); err != nil {
			t.Fatalf("data %q is not JSON: %v", x.raw, err)
		}
	}
	return reflect.DeepEqual(va, vb)
}
