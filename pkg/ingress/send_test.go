package ingress_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

func TestSendTypes(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	auth := bearerHeader(s.Key)

	// Accepted at once: 202 with the ids.
	status, ct, b := send(t, s, "default", "", msg("type", "Chat", "text", "queued"), auth...)
	require.Equal(t, http.StatusAccepted, status, "%s", b)
	assert.Equal(t, "application/json", ct, "202")
	var ids history.SyncAnswer
	require.NoError(t, json.Unmarshal(b, &ids), "202 body %s", b)
	assert.NotEmpty(t, ids.MessageID, "202 body %s", b)
	assert.NotEmpty(t, ids.RequestID, "202 body %s", b)
	assert.NotEmpty(t, ids.ThreadID, "202 body %s", b)
	assert.Equal(t, "default:Echo:Supervisor Workflow:default", ids.WorkflowID, "202 body %s", b)

	a := sendWait(t, s, msg("type", "Chat", "text", "hello", "topic", "greetings", "hint", "be brief"))
	r := a.Response
	require.True(t, r != nil && r.Text != nil, "chat reply %+v", r)
	assert.Equal(t, "You said: hello", *r.Text, "chat reply")
	assert.True(t, string(r.Data) == "null" || len(r.Data) == 0, "chat reply data %s, want none", r.Data)
	assert.Equal(t, 0, r.MessageType, "chat reply")
	assert.Equal(t, "greetings", r.Scope, "chat reply")
	assert.Equal(t, "be brief", r.Hint, "chat reply")
	assert.NotEmpty(t, r.ID, "chat reply")
	assert.NotEmpty(t, r.CreatedAt, "chat reply")

	a = sendWait(t, s, msg("type", "Data", "text", "SUM", "data", map[string]any{"values": []int{1, 2, 3}}))
	require.NotNil(t, a.Response, "data reply")
	assert.Nil(t, a.Response.Text, "data reply %s", mustJSON(a.Response))
	assert.Equal(t, `{"sum":6}`, string(a.Response.Data), "data reply")
	assert.Equal(t, 1, a.Response.MessageType, "data reply %s", mustJSON(a.Response))

	a = sendWait(t, s, msg("type", "Webhook", "text", "echo", "data", map[string]any{"a": 1}))
	var wh struct {
		StatusCode int    `json:"statusCode"`
		Content    string `json:"content"`
	}
	require.NotNil(t, a.Response, "webhook reply")
	require.NoError(t, json.Unmarshal(a.Response.Data, &wh), "webhook reply %s", mustJSON(a.Response))
	assert.Equal(t, http.StatusOK, wh.StatusCode, "webhook reply %s", mustJSON(a.Response))
	assert.Contains(t, wh.Content, `"body":"{\"a\":1}"`, "webhook reply")

	status, ct, b = send(t, s, "default", "wait=true", msg("type", "Data", "text", "fail", "data", map[string]any{"status": 418, "message": "short and stout"}), auth...)
	p := problemOf(t, status, ct, b, 418)
	assert.Equal(t, "short and stout", p["detail"], "fail problem %v", p)
	status, ct, b = send(t, s, "default", "wait=true", msg("type", "Data", "text", "sum", "data", map[string]any{"values": "nope"}), auth...)
	problemOf(t, status, ct, b, 400)
}

// sendWait sends body to tenant default with the stack's key and wait=true, and decodes the 200.
func sendWait(t *testing.T, s *stacktest.Stack, body any) history.SyncAnswer {
	t.Helper()
	status, _, b := send(t, s, "default", "wait=true", body, bearerHeader(s.Key)...)
	return answerOf(t, status, b)
}

func TestSendFiles(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{MaxFileBytes: 12 << 20})
	auth := bearerHeader(s.Key)
	big := make([]byte, 10<<20)
	_, err := rand.Read(big)
	require.NoError(t, err)
	sum := sha256.Sum256(big)
	for _, tc := range []struct {
		name     string
		body     map[string]any
		wantText string
		wantName string
		wantSHA  string
	}{
		{"string form", msg("type", "File", "text", "notes.txt", "data", base64.StdEncoding.EncodeToString([]byte("hello file"))),
			"Received notes.txt (10 bytes)", "notes.txt", ""},
		{"object form", msg("type", "File", "data", map[string]any{"content": base64.StdEncoding.EncodeToString([]byte("{}")), "fileName": "a.json", "contentType": "application/json", "fileSize": 2}),
			"Received a.json (2 bytes)", "a.json", ""},
		{"10 MB", msg("type", "File", "text", "big.bin", "data", base64.StdEncoding.EncodeToString(big)),
			"Received big.bin (10485760 bytes)", "big.bin", hex.EncodeToString(sum[:])},
		{"empty", msg("type", "File", "text", "e.txt", "data", ""), "No file data received.", "", ""},
		{"missing", msg("type", "File", "text", "e.txt"), "No file data received.", "", ""},
		{"empty object", msg("type", "File", "data", map[string]any{"fileName": "x"}), "No file data received.", "", ""},
		{"invalid base64", msg("type", "File", "text", "x.bin", "data", "not*base64!"), "Invalid file format. Please ensure the file is base64 encoded.", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := sendWait(t, s, tc.body)
			require.True(t, a.Response != nil && a.Response.Text != nil, "reply %s, want text %q", mustJSON(a.Response), tc.wantText)
			assert.Equal(t, tc.wantText, *a.Response.Text, "reply text")
			if tc.wantName != "" {
				var d struct {
					FileName string `json:"fileName"`
					SHA256   string `json:"sha256"`
				}
				require.NoError(t, json.Unmarshal(a.Response.Data, &d), "reply data %s", a.Response.Data)
				assert.Equal(t, tc.wantName, d.FileName, "reply data %s", a.Response.Data)
				if tc.wantSHA != "" {
					assert.Equal(t, tc.wantSHA, d.SHA256, "file changed in transit")
				}
			}
		})
	}
	t.Run("over the limit", func(t *testing.T) {
		huge := base64.StdEncoding.EncodeToString(make([]byte, 13<<20))
		status, ct, b := send(t, s, "default", "wait=true", msg("type", "File", "text", "huge", "data", huge), auth...)
		problemOf(t, status, ct, b, 413)
	})
}

func TestSendRefusals(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	auth := bearerHeader(s.Key)
	ok := msg("type", "Chat", "text", "hi")
	for _, tc := range []struct {
		name   string
		tenant string
		body   any
		hdr    []string
		want   int
		detail string
	}{
		{"no key", "default", ok, nil, 401, ""},
		{"bad key", "default", ok, bearerHeader("abk_nope"), 401, ""},
		{"body key bad, header good", "default", msg("type", "Chat", "text", "hi", "authorization", "abk_nope"), auth, 401, ""},
		{"other tenant's path", "other", ok, auth, 403, ""},
		{"path and header differ", "default", ok, append([]string{"X-Tenant-Id", "other"}, auth...), 400, ""},
		{"no tenant at all", "", ok, auth, 400, ""},
		{"unknown tenant (system key)", "ghost", ok, bearerHeader(systemKey), 404, ""},
		{"invalid JSON", "default", `{"agentName":`, auth, 400, ""},
		{"missing agentName", "default", map[string]any{"activationName": "a", "participantId": "p", "type": "Chat"}, auth, 400, "agentName"},
		{"missing participantId", "default", map[string]any{"agentName": "Echo", "activationName": "a", "type": "Chat"}, auth, 400, "participantId"},
		{"bad type", "default", msg("type", "Video"), auth, 400, "Chat, Data, File, Webhook"},
		{"data without method", "default", msg("type", "Data"), auth, 400, "text"},
		{"unknown agent", "default", msg("type", "Chat", "agentName", "Nobody"), auth, 404, ""},
		{"unknown workflow type", "default", msg("type", "Chat", "workflowType", "Batch"), auth, 404, ""},
		{"unknown data method", "default", msg("type", "Data", "text", "nope"), auth, 404, ""},
		{"bad timeout", "default", ok, auth, 400, "timeoutSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			query := "wait=true"
			if tc.name == "bad timeout" {
				query = "wait=true&timeoutSeconds=0"
			}
			status, ct, b := send(t, s, tc.tenant, query, tc.body, tc.hdr...)
			p := problemOf(t, status, ct, b, tc.want)
			if tc.detail != "" {
				assert.Contains(t, p["detail"], tc.detail, "the detail does not name it")
			}
		})
	}
	// The body's authorization field alone works; X-Tenant-Id works without a path tenant.
	status, _, b := send(t, s, "default", "", msg("type", "Chat", "text", "hi", "authorization", "Bearer "+s.Key))
	assert.Equal(t, http.StatusAccepted, status, "body authorization: %s", b)
	status, _, b = send(t, s, "", "", ok, append([]string{"X-Tenant-Id", "default"}, auth...)...)
	assert.Equal(t, http.StatusAccepted, status, "X-Tenant-Id: %s", b)
	// A system key may send to any existing tenant.
	status, _, b = send(t, s, "other", "", ok, bearerHeader(systemKey)...)
	assert.Equal(t, http.StatusAccepted, status, "system key: %s", b)
}

func TestSendIdempotentRequestID(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	body := msg("type", "Data", "text", "count", "requestId", "req-1", "activationName", "idem")
	first := sendWait(t, s, body)
	again := sendWait(t, s, body)
	assert.Equal(t, "req-1", first.RequestID)
	require.NotNil(t, first.Response)
	require.NotNil(t, again.Response)
	assert.Equal(t, string(first.Response.Data), string(again.Response.Data), "the retry's answer differs from the first's")
	next := sendWait(t, s, msg("type", "Data", "text", "count", "activationName", "idem"))
	var c struct{ Count int }
	require.NotNil(t, next.Response)
	require.NoError(t, json.Unmarshal(next.Response.Data, &c), "%s", next.Response.Data)
	assert.Equal(t, 2, c.Count, "count after a repeated requestId: %s", next.Response.Data)
}

// What send stores, as the agent reads it back: both sides of each exchange, newest first,
// without the message being handled.
func TestSendStoresHistory(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	chat := sendWait(t, s, msg("type", "Chat", "text", "first", "topic", "t1", "hint", "h1", "requestId", "r-chat", "activationName", "hist"))
	sendWait(t, s, msg("type", "Data", "text", "sum", "data", map[string]any{"values": []int{2}}, "topic", "t2", "activationName", "hist"))
	a := sendWait(t, s, msg("type", "Data", "text", "history", "data", map[string]any{"size": 10}, "activationName", "hist"))
	var got struct {
		Messages []storedMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(a.Response.Data, &got), "history reply %s", a.Response.Data)
	require.Len(t, got.Messages, 4, "history, the history call itself excluded: %s", a.Response.Data)
	m := got.Messages
	text := func(p *string) string {
		if p == nil {
			return "<none>"
		}
		return *p
	}
	// Newest first: sum out, sum in, chat out, chat in.
	data := mustJSON(m[:2])
	assert.Equal(t, 1, m[0].Direction, "data exchange stored as %s", data)
	assert.Equal(t, 1, m[0].MessageType, "data exchange stored as %s", data)
	assert.Equal(t, `{"sum":2}`, string(m[0].Data), "data exchange stored as %s", data)
	assert.Equal(t, "t2", m[0].Scope, "data exchange stored as %s", data)
	assert.Equal(t, 0, m[1].Direction, "data exchange stored as %s", data)
	assert.Equal(t, 1, m[1].MessageType, "data exchange stored as %s", data)
	assert.Equal(t, "sum", text(m[1].Text), "data exchange stored as %s", data)

	chats := mustJSON(m[2:])
	assert.Equal(t, 1, m[2].Direction, "chat exchange stored as %s", chats)
	assert.Equal(t, 0, m[2].MessageType, "chat exchange stored as %s", chats)
	assert.Equal(t, "You said: first", text(m[2].Text), "chat exchange stored as %s", chats)
	assert.Equal(t, "r-chat", m[2].RequestID, "chat exchange stored as %s", chats)
	assert.Equal(t, "t1", m[2].Scope, "chat exchange stored as %s", chats)
	assert.Equal(t, "h1", m[2].Hint, "chat exchange stored as %s", chats)
	assert.Equal(t, 0, m[3].Direction, "chat exchange stored as %s", chats)
	assert.Equal(t, "first", text(m[3].Text), "chat exchange stored as %s", chats)
	assert.Equal(t, "r-chat", m[3].RequestID, "chat exchange stored as %s", chats)
	assert.Equal(t, chat.MessageID, m[3].ID, "chat exchange stored as %s", chats)
	assert.Equal(t, "alice", m[3].ParticipantID, "chat exchange stored as %s", chats)
	assert.Equal(t, "default:Echo:Supervisor Workflow:hist", m[3].WorkflowID, "chat exchange stored as %s", chats)
	assert.NotEmpty(t, m[3].CreatedAt, "chat exchange stored as %s", chats)
	require.NotNil(t, chat.Response)
	assert.Equal(t, chat.Response.ID, m[2].ID, "the stored reply's id is the one answered")
	// Scope filter through the SDK.
	a = sendWait(t, s, msg("type", "Data", "text", "history", "data", map[string]any{"scope": "t1"}, "activationName", "hist"))
	require.NoError(t, json.Unmarshal(a.Response.Data, &got), "history by scope: %s", a.Response.Data)
	require.Len(t, got.Messages, 2, "history by scope: %s", a.Response.Data)
	assert.Equal(t, "t1", got.Messages[0].Scope, "history by scope: %s", a.Response.Data)
}

// Messages too large for one history entry are handled in full, stored shortened, and do not
// block their conversation; replies too large for one NATS message arrive whole.
func TestSendLargeMessages(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	huge := strings.Repeat("<", 200_000) // JSON-escaped six times larger
	a := sendWait(t, s, msg("type", "Chat", "text", huge, "activationName", "large"))
	require.True(t, a.Response != nil && a.Response.Text != nil, "chat of a huge text answered %d bytes", len(mustJSON(a.Response)))
	assert.Greater(t, len(*a.Response.Text), len(huge), "chat of a huge text: the reply is shorter than the text")
	big := map[string]any{"blob": strings.Repeat("x", 1_500_000)}
	a = sendWait(t, s, msg("type", "Data", "text", "echo", "data", big, "activationName", "large"))
	var got map[string]string
	require.NotNil(t, a.Response)
	require.NoError(t, json.Unmarshal(a.Response.Data, &got), "1.5 MB echo")
	assert.Len(t, got["blob"], 1_500_000, "1.5 MB echo came back changed")
	// The conversation goes on, and history holds shortened copies.
	a = sendWait(t, s, msg("type", "Data", "text", "history", "data", map[string]any{"size": 10}, "activationName", "large"))
	require.NotNil(t, a.Response)
	assert.LessOrEqual(t, len(a.Response.Data), 1<<20, "history of large messages: too large")
	assert.Contains(t, string(a.Response.Data), `"truncated":true`, "history of large messages: not shortened")
}
