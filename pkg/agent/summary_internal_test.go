package agent

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/jsonenc"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// The webhook call and answer are stored as encoding/json would write them.
func FuzzWebhookSummaryMatchesEncodingJSON(f *testing.F) {
	f.Add("a", "1", "b", "<x>", []byte(`{"ping":1}`), 200, "application/json", false)
	f.Add("", "", "", "", []byte("\xff\x00"), 500, "", false)
	f.Add("k", "\u2028", "k2", "\"", []byte("x"), -1, "text/plain; charset=utf-8", true)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, body []byte, status int, contentType string, huge bool) {
		if huge {
			body = []byte(strings.Repeat("y", maxStoredBody+1))
		}
		summary := func(b []byte) any {
			switch {
			case len(b) > maxStoredBody:
				return map[string]any{"truncated": true, "size": len(b)}
			case utf8.Valid(b):
				return string(b)
			default:
				return map[string]any{"base64": base64.StdEncoding.EncodeToString(b), "size": len(b)}
			}
		}
		params := map[string]string{k1: v1, k2: v2}
		want, err := json.Marshal(struct {
			Params map[string]string `json:"params"`
			Body   any               `json:"body"`
		}{params, summary(body)})
		require.NoError(t, err)
		call := appendWebhookCall(nil, params, body)
		assert.Equal(t, string(want), string(call))
		assertCompact(t, call)

		resp := Response{StatusCode: status, ContentType: contentType, Content: body}
		want, err = json.Marshal(struct {
			StatusCode  int    `json:"statusCode"`
			ContentType string `json:"contentType"`
			Content     any    `json:"content"`
		}{status, contentType, summary(body)})
		require.NoError(t, err)
		answer := appendWebhookAnswer(nil, resp)
		assert.Equal(t, string(want), string(answer))
		assertCompact(t, answer)
	})
}

// assertCompact checks what history.Message.DataCompact promises of b, which history then
// stores without checking: checking and compacting it would leave it as it is.
func assertCompact(t *testing.T, b []byte) {
	t.Helper()
	again, err := jsonenc.AppendRaw(nil, b)
	require.NoError(t, err)
	assert.Equal(t, string(b), string(again))
}

// BenchmarkWebhookExchangeJSON measures what the host encodes to store a webhook call: the
// incoming call and the handler's answer, as history writes them; "checked" is the cost when
// their data is checked and compacted again, as data from elsewhere is.
func BenchmarkWebhookExchangeJSON(b *testing.B) {
	req := &agentbusv1.Request{
		RequestId: "0b5e8e3c-6c5b-4d44-9a8e-5f3c2d1b0a99", TenantId: "default", WorkflowId: "default:echo:bench:42",
		ParticipantId: "webhook", Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "echo", CreatedAtMs: 1764000000000,
		Params: map[string]string{"participantId": "webhook", "x": "1"}, Body: []byte("0123456789"),
	}
	answer := JSON(200, map[string]any{"method": "echo", "body": "0123456789", "params": req.Params, "sha256": strings.Repeat("ab", 32)})
	for _, checked := range []bool{false, true} {
		name := "as-written"
		if checked {
			name = "checked"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 4<<10)
			for b.Loop() {
				in, out := incomingMessage(req, req.Body), webhookOutgoing(req, answer, "out")
				in.DataCompact, out.DataCompact = !checked, !checked
				var err error
				if buf, err = in.AppendJSON(buf[:0]); err != nil {
					b.Fatal(err)
				}
				if buf, err = out.AppendJSON(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A body or answer of megabytes is kept in history as its size: storing the call holds no
// buffer of its size.
func TestLargeBodySummaryHoldsNoCopy(t *testing.T) {
	body := make([]byte, 8<<20)
	req := &agentbusv1.Request{
		RequestId: "r1", TenantId: "default", WorkflowId: "default:Echo:Supervisor Workflow:big",
		ParticipantId: "webhook", Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "echo", Body: body,
	}
	in := incomingMessage(req, body)
	out := webhookOutgoing(req, Response{StatusCode: 200, ContentType: "application/octet-stream", Content: body}, "out")
	for name, data := range map[string][]byte{"call": in.Data, "answer": out.Data} {
		assert.Contains(t, string(data), `{"size":8388608,"truncated":true}`, name)
		assert.Less(t, cap(data), 1<<10, "%s: the buffer's capacity", name)
	}
}
