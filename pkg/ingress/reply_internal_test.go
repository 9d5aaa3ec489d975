package ingress

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// A message's reply reads the same to a synchronous caller whether the host sends it as the
// answer shows it (history.ReplyContentType, written as it is) or as the stored message's JSON
// (decoded and encoded again): hosts of both kinds may serve one deployment while it is upgraded.
func TestMessageReplyFormsAnswerAlike(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	text := func(s string) *string { return &s }
	ids := history.IDs{MessageID: "m-1", RequestID: "r-1", WorkflowID: "default:Echo:Supervisor Workflow:a", ThreadID: "t"}
	at := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	msgs := []history.Message{
		{ID: "x", CreatedAt: at, Direction: history.Out, MessageType: 1, Text: text("You said: <hi>"), RequestID: "r-1", ParticipantID: "ada", WorkflowID: "w"},
		{ID: "y", CreatedAt: at, Direction: history.Out, MessageType: 2, Data: json.RawMessage(`{"sum": 3}`), Scope: "s", Hint: "h"},
	}
	answer := func(req *agentbusv1.Request, rep *agentbusv1.Reply) (int, string) {
		w := httptest.NewRecorder()
		s.writeMessageReply(w, req, ids, rep)
		return w.Code, w.Body.String()
	}
	for _, kind := range []agentbusv1.Kind{agentbusv1.Kind_KIND_CHAT, agentbusv1.Kind_KIND_DATA} {
		req := &agentbusv1.Request{Kind: kind}
		for _, status := range []int32{http.StatusOK, http.StatusAccepted} {
			for _, m := range msgs {
				stored, err := m.MarshalJSON()
				require.NoError(t, err)
				r := m.Reply()
				asAnswer, err := r.AppendJSON(nil)
				require.NoError(t, err)

				oldCode, oldBody := answer(req, &agentbusv1.Reply{StatusCode: status, Content: stored, ContentType: "application/json"})
				newCode, newBody := answer(req, &agentbusv1.Reply{StatusCode: status, Content: asAnswer, ContentType: history.ReplyContentType})
				assert.Equal(t, int(status), newCode)
				assert.Equal(t, oldCode, newCode)
				assert.Equal(t, oldBody, newBody, "message %q", m.ID)
				assert.JSONEq(t, `{"messageId":"m-1","requestId":"r-1","workflowId":"default:Echo:Supervisor Workflow:a","threadId":"t","response":`+string(asAnswer)+`}`, newBody)
			}
		}
		// No reply from the handler: a null response.
		code, body := answer(req, &agentbusv1.Reply{StatusCode: http.StatusOK})
		assert.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, `"response":null`)
		// Content that is not JSON, of either type, is the host's fault, not written out.
		for _, ct := range []string{history.ReplyContentType, "application/json"} {
			code, body = answer(req, &agentbusv1.Reply{StatusCode: http.StatusOK, Content: []byte(`{"id":`), ContentType: ct})
			assert.Equal(t, http.StatusBadGateway, code, ct)
			assert.Contains(t, body, "bad-reply", ct)
		}
		// An error reply is a problem, whatever its content type says.
		code, _ = answer(req, &agentbusv1.Reply{StatusCode: http.StatusNotFound, Error: "unknown-method", Content: []byte("no method x"), ContentType: history.ReplyContentType})
		assert.Equal(t, http.StatusNotFound, code)
	}
}
