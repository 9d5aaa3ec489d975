package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/history"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// FuzzEnvelopeDecode decodes arbitrary bytes as the host decodes a bus envelope. A Request that
// decodes re-encodes to an equal message and becomes a history message (incomingMessage) whose
// JSON is valid and reads back; a Reply that decodes re-encodes to an equal message.
func FuzzEnvelopeDecode(f *testing.F) {
	for _, req := range []*agentbusv1.Request{
		{},
		{RequestId: "r1", TenantId: "acme", WorkflowId: "acme:support:Supervisor Workflow:default", AgentName: "support",
			WorkflowType: "Supervisor Workflow", ActivationName: "default", ParticipantId: "user", Kind: agentbusv1.Kind_KIND_CHAT,
			Text: "hello", Data: []byte(`{"a":1}`), CreatedAtMs: 1700000000000, MessageId: "m1", Scope: "s", Hint: "h"},
		{Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "order", Params: map[string]string{"x": "1", "": "\x00"},
			Body: []byte{0xff, 0xfe, 0}, Headers: []byte("Content-Type: text/plain\n"), ContentType: "text/plain"},
		{Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "m", Body: []byte(`<html>"quoted"</html>`)},
		{Kind: agentbusv1.Kind_KIND_DATA, Method: "m", Data: []byte(`not json`)},
		{Kind: agentbusv1.Kind_KIND_FILE, Text: "f.txt", File: &agentbusv1.FileRef{Object: "acme/1", FileName: "f.txt", Size: 5, Sha256: "00"}},
		{Kind: agentbusv1.Kind(99), EnvelopeRef: &agentbusv1.BlobRef{Name: "claims/1", Size: 1 << 30}},
		{Kind: agentbusv1.Kind_KIND_CHAT, CreatedAtMs: -1},
	} {
		b, err := proto.Marshal(req)
		require.NoError(f, err)
		f.Add(b)
	}
	for _, rep := range []*agentbusv1.Reply{
		{RequestId: "r1", StatusCode: 200, Content: []byte(`{"id":"x"}`), ContentType: "application/json", RunId: "run"},
		{StatusCode: 404, Error: "unknown-method", Partial: true, Delta: "δ", ContentRef: &agentbusv1.BlobRef{Name: "n"}},
		{StatusCode: 200, Partial: true, Restart: true, Attempt: 2},
	} {
		b, _ := proto.Marshal(rep)
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{0x0a, 0x02, 0xc3, 0x28}) // request_id with invalid UTF-8

	f.Fuzz(func(t *testing.T, data []byte) {
		rep := new(agentbusv1.Reply)
		if proto.Unmarshal(data, rep) == nil {
			checkProtoRoundTrip(t, rep, new(agentbusv1.Reply))
		}
		req := new(agentbusv1.Request)
		if err := proto.Unmarshal(data, req); err != nil {
			return // the host terminates undecodable requests
		}
		checkProtoRoundTrip(t, req, new(agentbusv1.Request))

		m := incomingMessage(req, req.GetBody())
		require.NotNil(t, m, "incomingMessage(%v)", req)
		require.NotEmpty(t, m.ID, "incomingMessage(%v) = %+v", req, m)
		require.Equal(t, history.In, m.Direction, "incomingMessage(%v) = %+v", req, m)
		require.NotNil(t, m.Text, "incomingMessage(%v) = %+v", req, m)
		if len(m.Data) > 0 {
			require.True(t, json.Valid(m.Data), "incomingMessage(%v) data %q is not JSON", req, m.Data)
		}
		b, err := json.Marshal(m)
		require.NoError(t, err, "json.Marshal(incomingMessage(%v))", req)
		require.True(t, json.Valid(b), "json.Marshal(incomingMessage(%v)) = %q is not valid JSON", req, b)
		require.True(t, strings.Contains(string(b), `"createdAt"`), "stored message %s has no createdAt", b)
		// What the host stores, history reads back.
		var back history.Message
		require.NoError(t, json.Unmarshal(b, &back), "history cannot read the stored message %s (request created_at_ms %d)", b, req.GetCreatedAtMs())
		require.Equal(t, m.ID, back.ID, "stored message %s read back as %+v", b, back)
		require.Equal(t, m.RequestID, back.RequestID, "stored message %s read back as %+v", b, back)
		require.Equal(t, m.WorkflowID, back.WorkflowID, "stored message %s read back as %+v", b, back)
		require.NotNil(t, back.Text, "stored message %s read back as %+v", b, back)
		require.Equal(t, *m.Text, *back.Text, "stored message %s read back as %+v", b, back)
	})
}

// checkProtoRoundTrip checks that a decoded envelope re-encodes to bytes that decode to an equal
// message.
func checkProtoRoundTrip(t *testing.T, m, fresh proto.Message) {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err, "re-encoding decoded %T", m)
	require.NoError(t, proto.Unmarshal(b, fresh), "decoding re-encoded %T", m)
	// proto.Equal, not assert.Equal: generated messages carry internal state.
	require.True(t, proto.Equal(m, fresh), "%T changed over a re-encode: %v vs %v", m, m, fresh)
}
