package ingress_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

type syncAnswer struct {
	MessageID  string `json:"messageId"`
	RequestID  string `json:"requestId"`
	WorkflowID string `json:"workflowId"`
	ThreadID   string `json:"threadId"`
	Response   *struct {
		ID          string          `json:"id"`
		Text        *string         `json:"text"`
		Data        json.RawMessage `json:"data"`
		MessageType int             `json:"messageType"`
		CreatedAt   string          `json:"createdAt"`
		Scope       string          `json:"scope"`
		Hint        string          `json:"hint"`
	} `json:"response"`
}

func answerOf(t *testing.T, status int, b []byte) syncAnswer {
	t.Helper()
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	var a syncAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return a
}

func msg(fields ...any) map[string]any {
	m := map[string]any{"agentName": "Echo", "activationName": "default", "participantId": "Alice"}
	for i := 0; i+1 < len(fields); i += 2 {
		m[fields[i].(string)] = fields[i+1]
	}
	return m
}

func TestSendTypes(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	auth := []string{"Authorization", "Bearer " + s.Key}

	// Accepted at once: 202 with the ids.
	status, ct, b := send(t, s, "default", "", msg("type", "Chat", "text", "queued"), auth...)
	if status != 202 || ct != "application/json" {
		t.Fatalf("202: %d %s %s", status, ct, b)
	}
	var ids syncAnswer
	if err := json.Unmarshal(b, &ids); err != nil || ids.MessageID == "" || ids.RequestID == "" || ids.ThreadID == "" ||
		ids.WorkflowID != "default:Echo:Supervisor Workflow:default" {
		t.Fatalf("202 body %s", b)
	}

	a := sendWait(t, s, msg("type", "Chat", "text", "hello", "topic", "greetings", "hint", "be brief"))
	r := a.Response
	if r == nil || r.Text == nil || *r.Text != "You said: hello" || string(r.Data) != "null" && len(r.Data) != 0 || r.MessageType != 0 ||
		r.Scope != "greetings" || r.Hint != "be brief" || r.ID == "" || r.CreatedAt == "" {
		t.Fatalf("chat reply %+v", r)
	}

	a = sendWait(t, s, msg("type", "Data", "text", "SUM", "data", map[string]any{"values": []int{1, 2, 3}}))
	if a.Response == nil || a.Response.Text != nil || string(a.Response.Data) != `{"sum":6}` || a.Response.MessageType != 1 {
		t.Fatalf("data reply %s", mustJSON(a.Response))
	}

	a = sendWait(t, s, msg("type", "Webhook", "text", "echo", "data", map[string]any{"a": 1}))
	var wh struct {
		StatusCode int    `json:"statusCode"`
		Content    string `json:"content"`
	}
	if a.Response == nil || json.Unmarshal(a.Response.Data, &wh) != nil || wh.StatusCode != 200 || !strings.Contains(wh.Content, `"body":"{\"a\":1}"`) {
		t.Fatalf("webhook reply %s", mustJSON(a.Response))
	}

	status, ct, b = send(t, s, "default", "wait=true", msg("type", "Data", "text", "fail", "data", map[string]any{"status": 418, "message": "short and stout"}), auth...)
	p := problemOf(t, status, ct, b, 418)
	if p["detail"] != "short and stout" {
		t.Fatalf("fail problem %v", p)
	}
	status, ct, b = send(t, s, "default", "wait=true", msg("type", "Data", "text", "sum", "data", map[string]any{"values": "nope"}), auth...)
	problemOf(t, status, ct, b, 400)
}

// sendWait sends body to tenant default with the stack's key and wait=true, and decodes the 200.
func sendWait(t *testing.T, s *stacktest.Stack, body any) syncAnswer {
	t.Helper()
	status, _, b := send(t, s, "default", "wait=true", body, "Authorization", "Bearer "+s.Key)
	return answerOf(t, status, b)
}

func TestSendFiles(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{MaxFileBytes: 12 << 20})
	auth := []string{"Authorization", "Bearer " + s.Key}
	big := make([]byte, 10<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
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
			if a.Response == nil || a.Response.Text == nil || *a.Response.Text != tc.wantText {
				t.Fatalf("reply %s, want text %q", mustJSON(a.Response), tc.wantText)
			}
			if tc.wantName != "" {
				var d struct {
					FileName string `json:"fileName"`
					SHA256   string `json:"sha256"`
				}
				if err := json.Unmarshal(a.Response.Data, &d); err != nil || d.FileName != tc.wantName || tc.wantSHA != "" && d.SHA256 != tc.wantSHA {
					t.Fatalf("reply data %s", a.Response.Data)
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
	s := stacktest.Start(t, stacktest.Options{AdminKey: "system-admin-key-0123456789"})
	auth := []string{"Authorization", "Bearer " + s.Key}
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
		{"bad key", "default", ok, []string{"Authorization", "Bearer abk_nope"}, 401, ""},
		{"body key bad, header good", "default", msg("type", "Chat", "text", "hi", "authorization", "abk_nope"), auth, 401, ""},
		{"other tenant's path", "other", ok, auth, 403, ""},
		{"path and header differ", "default", ok, append([]string{"X-Tenant-Id", "other"}, auth...), 400, ""},
		{"no tenant at all", "", ok, auth, 400, ""},
		{"unknown tenant (system key)", "ghost", ok, []string{"Authorization", "Bearer system-admin-key-0123456789"}, 404, ""},
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
			if tc.detail != "" && !strings.Contains(p["detail"].(string), tc.detail) {
				t.Fatalf("detail %q does not name %q", p["detail"], tc.detail)
			}
		})
	}
	// The body's authorization field alone works; X-Tenant-Id works without a path tenant.
	if status, _, b := send(t, s, "default", "", msg("type", "Chat", "text", "hi", "authorization", "Bearer "+s.Key)); status != 202 {
		t.Fatalf("body authorization: %d %s", status, b)
	}
	if status, _, b := send(t, s, "", "", ok, append([]string{"X-Tenant-Id", "default"}, auth...)...); status != 202 {
		t.Fatalf("X-Tenant-Id: %d %s", status, b)
	}
	// A system key may send to any existing tenant.
	if status, _, b := send(t, s, "other", "", ok, "Authorization", "Bearer system-admin-key-0123456789"); status != 202 {
		t.Fatalf("system key: %d %s", status, b)
	}
}

func TestSendIdempotentRequestID(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	body := msg("type", "Data", "text", "count", "requestId", "req-1", "activationName", "idem")
	first := sendWait(t, s, body)
	again := sendWait(t, s, body)
	if string(first.Response.Data) != string(again.Response.Data) || first.RequestID != "req-1" {
		t.Fatalf("retry answered %s, first %s", again.Response.Data, first.Response.Data)
	}
	next := sendWait(t, s, msg("type", "Data", "text", "count", "activationName", "idem"))
	var c struct{ Count int }
	if err := json.Unmarshal(next.Response.Data, &c); err != nil || c.Count != 2 {
		t.Fatalf("count after a repeated requestId = %s, want 2", next.Response.Data)
	}
}

// What send stores, as the agent reads it back: both sides of each exchange, newest first,
// without the message being handled.
func TestSendStoresHistory(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	chat := sendWait(t, s, msg("type", "Chat", "text", "first", "topic", "t1", "hint", "h1", "requestId", "r-chat", "activationName", "hist"))
	sendWait(t, s, msg("type", "Data", "text", "sum", "data", map[string]any{"values": []int{2}}, "topic", "t2", "activationName", "hist"))
	a := sendWait(t, s, msg("type", "Data", "text", "history", "data", map[string]any{"size": 10}, "activationName", "hist"))
	var got struct {
		Messages []struct {
			ID            string          `json:"id"`
			Direction     int             `json:"direction"`
			MessageType   int             `json:"messageType"`
			Text          *string         `json:"text"`
			Data          json.RawMessage `json:"data"`
			RequestID     string          `json:"requestId"`
			ParticipantID string          `json:"participantId"`
			WorkflowID    string          `json:"workflowId"`
			Scope         string          `json:"scope"`
			Hint          string          `json:"hint"`
			CreatedAt     string          `json:"createdAt"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(a.Response.Data, &got); err != nil {
		t.Fatalf("history reply %s: %v", a.Response.Data, err)
	}
	if len(got.Messages) != 4 {
		t.Fatalf("history has %d messages, want 4 (the history call itself excluded): %s", len(got.Messages), a.Response.Data)
	}
	m := got.Messages
	// Newest first: sum out, sum in, chat out, chat in.
	if m[0].Direction != 1 || m[0].MessageType != 1 || string(m[0].Data) != `{"sum":2}` || m[0].Scope != "t2" ||
		m[1].Direction != 0 || m[1].MessageType != 1 || *m[1].Text != "sum" {
		t.Fatalf("data exchange stored as %s", mustJSON(m[:2]))
	}
	if m[2].Direction != 1 || m[2].MessageType != 0 || *m[2].Text != "You said: first" || m[2].RequestID != "r-chat" || m[2].Scope != "t1" || m[2].Hint != "h1" ||
		m[3].Direction != 0 || *m[3].Text != "first" || m[3].RequestID != "r-chat" || m[3].ID != chat.MessageID || m[3].ParticipantID != "alice" ||
		m[3].WorkflowID != "default:Echo:Supervisor Workflow:hist" || m[3].CreatedAt == "" {
		t.Fatalf("chat exchange stored as %s", mustJSON(m[2:]))
	}
	if m[2].ID != chat.Response.ID {
		t.Fatalf("reply id %s, stored %s", chat.Response.ID, m[2].ID)
	}
	// Scope filter through the SDK.
	a = sendWait(t, s, msg("type", "Data", "text", "history", "data", map[string]any{"scope": "t1"}, "activationName", "hist"))
	if err := json.Unmarshal(a.Response.Data, &got); err != nil || len(got.Messages) != 2 || got.Messages[0].Scope != "t1" {
		t.Fatalf("history by scope: %s", a.Response.Data)
	}
}

// Messages too large for one history entry are handled in full, stored shortened, and do not
// block their conversation; replies too large for one NATS message arrive whole.
func TestSendLargeMessages(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	huge := strings.Repeat("<", 200_000) // JSON-escaped six times larger
	a := sendWait(t, s, msg("type", "Chat", "text", huge, "activationName", "large"))
	if a.Response == nil || len(*a.Response.Text) <= len(huge) {
		t.Fatalf("chat of a huge text answered %d bytes", len(mustJSON(a.Response)))
	}
	big := map[string]any{"blob": strings.Repeat("x", 1_500_000)}
	a = sendWait(t, s, msg("type", "Data", "text", "echo", "data", big, "activationName", "large"))
	var got map[string]string
	if err := json.Unmarshal(a.Response.Data, &got); err != nil || len(got["blob"]) != 1_500_000 {
		t.Fatalf("1.5 MB echo came back with %d bytes", len(got["blob"]))
	}
	// The conversation goes on, and history holds shortened copies.
	a = sendWait(t, s, msg("type", "Data", "text", "history", "data", map[string]any{"size": 10}, "activationName", "large"))
	if len(a.Response.Data) > 1<<20 || !strings.Contains(string(a.Response.Data), `"truncated":true`) {
		t.Fatalf("history of large messages: %d bytes", len(a.Response.Data))
	}
}
