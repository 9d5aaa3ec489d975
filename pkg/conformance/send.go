package conformance

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Texts of Echo's file handler (docs/echo.md#files, docs/interface.md#41-send-message-admin).
const (
	noFileText      = "No file data received."
	invalidFileText = "Invalid file format. Please ensure the file is base64 encoded."
)

// threadID is the thread id of a workflow id and a participant (docs/messaging.md#send-admin).
func threadID(workflowID, participant string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(workflowID)) + "." + base64.RawURLEncoding.EncodeToString([]byte(participant))
}

// assertAccepted checks the fields every send and converse answer has.
func assertAccepted(t *testing.T, r *response, m map[string]any, workflowID, participant string) {
	t.Helper()
	assert.NotEmpty(t, m["messageId"], "%s", r)
	assert.NotEmpty(t, m["requestId"], "%s", r)
	assert.Equal(t, m["requestId"], r.Header.Get("X-Request-Id"))
	assert.Equal(t, workflowID, m["workflowId"])
	assert.Equal(t, threadID(workflowID, participant), m["threadId"])
}

// reply is the response of a send or converse answer.
func reply(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	resp, ok := m["response"].(map[string]any)
	require.True(t, ok, "the answer has a response: %v", m)
	return resp
}

// assertChatReply checks a Chat reply: text, data null, messageType 0.
func assertChatReply(t *testing.T, resp map[string]any, text string) {
	t.Helper()
	assert.Equal(t, text, resp["text"], "%v", resp)
	assert.Contains(t, resp, "data")
	assert.Nil(t, resp["data"], "%v", resp)
	assert.EqualValues(t, 0, resp["messageType"], "%v", resp)
	assert.NotEmpty(t, resp["id"], "%v", resp)
	assertTime(t, resp["createdAt"])
}

// assertDataReply checks a Data reply: text null, data, messageType 1.
func assertDataReply(t *testing.T, resp map[string]any, data any) {
	t.Helper()
	assert.Contains(t, resp, "text")
	assert.Nil(t, resp["text"], "%v", resp)
	assert.Equal(t, data, resp["data"], "%v", resp)
	assert.EqualValues(t, 1, resp["messageType"], "%v", resp)
	assertTime(t, resp["createdAt"])
}

func assertTime(t *testing.T, v any) {
	t.Helper()
	s, _ := v.(string)
	_, err := time.Parse(time.RFC3339Nano, s)
	assert.NoError(t, err, "an ISO 8601 time: %v", v)
	assert.True(t, strings.HasSuffix(s, "Z"), "in UTC: %v", v)
}

// sendCases are the cases of the send endpoint (docs/messaging.md#send-admin) with Echo's Chat,
// Data methods and file handler (docs/echo.md).
func (s *suite) sendCases() []testCase {
	return []testCase{
		{"Chat with wait answers You said", func(t *testing.T) {
			a := s.act("chat")
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "Ada", "type": "Chat", "text": "hello there"})
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, "application/json", r.ContentType())
			m := r.object(t)
			assertAccepted(t, r, m, s.workflowID(a), "ada")
			assertChatReply(t, reply(t, m), "You said: hello there")
		}},
		{"Chat of the Conversational workflow type", func(t *testing.T) {
			a := s.act("chat-conv")
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Chat",
				"text": "hi", "workflowType": "Conversational", "topic": "billing", "hint": "short"})
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			m := r.object(t)
			assertAccepted(t, r, m, s.target.Tenant+":Echo:Conversational:"+a, "ada")
			resp := reply(t, m)
			assertChatReply(t, resp, "You said: hi")
			assert.Equal(t, "billing", resp["scope"])
			assert.Equal(t, "short", resp["hint"])
		}},
		{"Data sum, echo and count", func(t *testing.T) {
			a := s.act("data")
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "sum", map[string]any{"values": []float64{4, 5, 6}})), map[string]any{"sum": float64(15)})
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "sum", map[string]any{"values": []float64{2, 3.5}})), map[string]any{"sum": 5.5})
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "SUM", map[string]any{"values": []float64{1}})), map[string]any{"sum": float64(1)})
			params := map[string]any{"a": []any{float64(1), "b", nil, true}, "n": map[string]any{"x": "é"}}
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "echo", params)), params)
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "Echo", nil)), map[string]any{})
			first := reply(t, s.sendWait(t, a, "Data", "count", map[string]any{}))["data"].(map[string]any)
			second := reply(t, s.sendWait(t, a, "Data", "count", nil))["data"].(map[string]any)
			assert.EqualValues(t, 1, first["count"])
			assert.EqualValues(t, 2, second["count"])
			assert.NotEmpty(t, first["runId"])
			assert.Equal(t, first["runId"], second["runId"])
		}},
		{"Data count shares the webhook's counter", func(t *testing.T) {
			a := s.act("shared-count")
			assert.EqualValues(t, 1, s.hook(t, a, "count").object(t)["count"])
			assert.EqualValues(t, 2, reply(t, s.sendWait(t, a, "Data", "count", nil))["data"].(map[string]any)["count"])
			assert.EqualValues(t, 2, s.hook(t, a, "state").object(t)["state"].(map[string]any)["count"])
		}},
		{"Data sleep", func(t *testing.T) {
			start := time.Now()
			assertDataReply(t, reply(t, s.sendWait(t, s.act("sleep"), "Data", "sleep", map[string]any{"ms": 120})), map[string]any{"slept": float64(120)})
			assert.GreaterOrEqual(t, time.Since(start), 120*time.Millisecond)
		}},
		{"Data fail maps its status to a handler-error problem", func(t *testing.T) {
			a := s.act("fail")
			for _, c := range []struct {
				data   map[string]any
				status int
				detail string
			}{
				{map[string]any{"status": 409, "message": "already done"}, http.StatusConflict, "already done"},
				{map[string]any{"status": 400, "message": "bad input"}, http.StatusBadRequest, "bad input"},
				{map[string]any{"status": 503, "message": "later"}, http.StatusServiceUnavailable, "later"},
				{map[string]any{"message": "no status"}, http.StatusInternalServerError, "no status"},
				{map[string]any{}, http.StatusInternalServerError, ""},
			} {
				r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "fail", "data": c.data})
				p := assertProblem(t, r, c.status, "handler-error")
				if c.detail != "" {
					assert.Equal(t, c.detail, p["detail"])
				}
				assert.Equal(t, r.Header.Get("X-Request-Id"), p["requestId"])
			}
			// The failure is stored in the thread as the reply.
			s.eventually(t, a, "ada", func(msgs []map[string]any) bool {
				if len(msgs) < 10 {
					return false
				}
				d, _ := msgs[0]["data"].(map[string]any)
				return d["error"] != nil && msgs[0]["direction"] == float64(1)
			}, "each failure is stored with its request")
		}},
		{"unknown methods and agents are 404", func(t *testing.T) {
			a := s.act("unknown")
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "nosuchmethod"})
			assertProblem(t, r, http.StatusNotFound, "unknown-method")
			r = s.send(t, "wait=true", map[string]any{"agentName": "NoSuchAgent" + s.nonce, "activationName": a, "participantId": "ada", "type": "Chat", "text": "hi"})
			assertProblem(t, r, http.StatusNotFound, "unknown-agent")
			r = s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Chat", "text": "hi", "workflowType": "NoSuchType"})
			assertProblem(t, r, http.StatusNotFound, "unknown-workflow-type")
		}},
		{"bad requests", func(t *testing.T) {
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "participantId": "ada", "type": "Chat", "text": "hi"})
			assertProblem(t, r, http.StatusBadRequest, "missing-field")
			r = s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": "a", "participantId": "ada", "type": "chat", "text": "hi"})
			assertProblem(t, r, http.StatusBadRequest, "invalid-field")
			r = s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": "a", "participantId": "ada", "type": "Data", "text": "echo", "data": []int{1}})
			assertProblem(t, r, http.StatusBadRequest, "invalid-field")
			r = s.call(t, http.MethodPost, s.sendURL(""), s.bearer(), []byte("{not json"))
			assertProblem(t, r, http.StatusBadRequest, "invalid-json")
			r = s.send(t, "wait=maybe", map[string]any{"agentName": "Echo", "activationName": "a", "participantId": "ada", "type": "Chat", "text": "hi"})
			assertProblem(t, r, http.StatusBadRequest, "invalid-query")
		}},
		{"a missing or bad key is 401", func(t *testing.T) {
			body := []byte(`{"agentName":"Echo","activationName":"a","participantId":"ada","type":"Chat","text":"hi"}`)
			r := s.call(t, http.MethodPost, s.sendURL("wait=true"), nil, body)
			assertProblem(t, r, http.StatusUnauthorized, "unauthorized")
			assert.Equal(t, `Bearer realm="agentbus"`, r.Header.Get("WWW-Authenticate"))
			r = s.call(t, http.MethodPost, s.sendURL("wait=true"), http.Header{"Authorization": {"Bearer abk_not-a-key"}}, body)
			assertProblem(t, r, http.StatusUnauthorized, "unauthorized")
		}},
		{"the key in the body's authorization field", func(t *testing.T) {
			a := s.act("body-key")
			body, _ := json.Marshal(map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Chat", "text": "hi", "authorization": "Bearer " + s.target.Key})
			r := s.call(t, http.MethodPost, s.sendURL("wait=true"), nil, body)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assertChatReply(t, reply(t, r.object(t)), "You said: hi")
		}},
		{"without wait: 202, then the reply is in the thread", func(t *testing.T) {
			a := s.act("async")
			r := s.send(t, "", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Chat", "text": "are you there?"})
			require.Equal(t, http.StatusAccepted, r.Status, "%s", r)
			m := r.object(t)
			assertAccepted(t, r, m, s.workflowID(a), "ada")
			assert.NotContains(t, m, "response")
			s.eventually(t, a, "ada", func(msgs []map[string]any) bool { return len(msgs) >= 2 }, "the message and its reply are stored")
			msgs := s.history(t, a, "ada", 20)
			require.Len(t, msgs, 2)
			out, in := msgs[0], msgs[1]
			assert.Equal(t, m["messageId"], in["id"])
			assert.EqualValues(t, 0, in["direction"])
			assert.EqualValues(t, 0, in["messageType"])
			assert.Equal(t, "are you there?", in["text"])
			assert.EqualValues(t, 1, out["direction"])
			assert.EqualValues(t, 0, out["messageType"])
			assert.Equal(t, "You said: are you there?", out["text"])
			for _, msg := range msgs {
				assert.Equal(t, m["requestId"], msg["requestId"])
				assert.Equal(t, "ada", msg["participantId"])
				assert.Equal(t, s.workflowID(a), msg["workflowId"])
				assertTime(t, msg["createdAt"])
			}
		}},
		{"a requestId is the idempotency key", func(t *testing.T) {
			a, key := s.act("send-idem"), s.key("send-idem")
			body := map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "count", "requestId": key}
			first := s.send(t, "wait=true", body)
			require.Equal(t, http.StatusOK, first.Status, "%s", first)
			assert.Equal(t, key, first.Header.Get("X-Request-Id"))
			f := first.object(t)
			assert.Equal(t, key, f["requestId"])
			again := s.send(t, "wait=true", body)
			require.Equal(t, http.StatusOK, again.Status, "%s", again)
			g := again.object(t)
			assert.Equal(t, reply(t, f), reply(t, g), "the repeat gets the first reply")
			assert.EqualValues(t, 1, reply(t, g)["data"].(map[string]any)["count"])
			accepted := s.send(t, "", body)
			assert.Equal(t, http.StatusAccepted, accepted.Status, "%s", accepted)
			assert.EqualValues(t, 1, s.hook(t, a, "state").object(t)["state"].(map[string]any)["count"], "count ran once")

			body["text"], body["data"] = "sum", map[string]any{"values": []int{1}}
			assertProblem(t, s.send(t, "wait=true", body), http.StatusUnprocessableEntity, "request-id-reused")
		}},
		{"File with base64 content in a string", func(t *testing.T) {
			a := s.act("file")
			content := []byte("hello, file")
			m := s.sendWait(t, a, "File", "hello.txt", base64.StdEncoding.EncodeToString(content))
			resp := reply(t, m)
			assert.Equal(t, "Received hello.txt (11 bytes)", resp["text"])
			assert.Equal(t, map[string]any{"fileName": "hello.txt", "contentType": "", "size": float64(11), "sha256": sha(content)}, resp["data"])
			assert.EqualValues(t, 2, resp["messageType"])
		}},
		{"File with a file object", func(t *testing.T) {
			a := s.act("file-object")
			content := []byte{0, 1, 2, 0xff, 'x', '\n'}
			m := s.sendWait(t, a, "File", "the caption", map[string]any{"content": base64.StdEncoding.EncodeToString(content),
				"fileName": "data.bin", "contentType": "application/octet-stream", "fileSize": len(content)})
			resp := reply(t, m)
			assert.Equal(t, "Received data.bin (6 bytes)", resp["text"])
			assert.Equal(t, map[string]any{"fileName": "data.bin", "contentType": "application/octet-stream", "size": float64(6), "sha256": sha(content)}, resp["data"])
			// Standard and URL-safe base64 are accepted, padded or not, with line breaks.
			url := s.sendWait(t, a, "File", "u.bin", map[string]any{"content": base64.RawURLEncoding.EncodeToString(content) + "\n"})
			assert.Equal(t, "Received u.bin (6 bytes)", reply(t, url)["text"])

			// The stored incoming message holds the file's description, never its content.
			s.eventually(t, a, "ada", func(msgs []map[string]any) bool { return len(msgs) >= 4 }, "the files and the replies are stored")
			msgs := s.history(t, a, "ada", 4)
			require.Len(t, msgs, 4)
			in := msgs[3]
			assert.EqualValues(t, 2, in["messageType"])
			assert.Equal(t, "the caption", in["text"])
			d, _ := in["data"].(map[string]any)
			assert.Equal(t, "data.bin", d["fileName"], "%v", in)
			assert.Equal(t, sha(content), d["sha256"], "%v", in)
			assert.NotContains(t, d, "content")
		}},
		{"File without content or with invalid base64", func(t *testing.T) {
			a := s.act("file-bad")
			for _, data := range []any{"", nil, map[string]any{"fileName": "x.txt"}, map[string]any{"content": "", "fileName": "x.txt"}} {
				resp := reply(t, s.sendWait(t, a, "File", "x.txt", data))
				assert.Equal(t, noFileText, resp["text"], "data %v", data)
				assert.EqualValues(t, 2, resp["messageType"])
			}
			for _, data := range []any{"not base64!", map[string]any{"content": "%%%", "fileName": "x.txt"}} {
				resp := reply(t, s.sendWait(t, a, "File", "x.txt", data))
				assert.Equal(t, invalidFileText, resp["text"], "data %v", data)
			}
		}},
		{"Webhook through send", func(t *testing.T) {
			a := s.act("send-webhook")
			m := s.sendWait(t, a, "Webhook", "echo", map[string]any{"a": 1})
			resp := reply(t, m)
			assert.EqualValues(t, 4, resp["messageType"])
			d, _ := resp["data"].(map[string]any)
			assert.EqualValues(t, 200, d["statusCode"], "%v", resp)
			assert.Equal(t, "application/json", d["contentType"])
			content, _ := d["content"].(string)
			assert.Equal(t, map[string]any{"params": map[string]any{}, "body": `{"a":1}`, "size": float64(7), "sha256": sha([]byte(`{"a":1}`))}, jsonOf(t, content))

			m = s.sendWait(t, a, "Webhook", "status", nil)
			d, _ = reply(t, m)["data"].(map[string]any)
			assert.EqualValues(t, 400, d["statusCode"], "the handler's own status: %v", m)
		}},
		{"Data remind posts to the thread", func(t *testing.T) {
			a := s.act("remind")
			resp := reply(t, s.sendWait(t, a, "Data", "remind", map[string]any{"text": "stretch", "ms": 200}))
			d, _ := resp["data"].(map[string]any)
			assert.True(t, strings.HasPrefix(d["timer"].(string), "remind:"), "%v", d)
			due, err := time.Parse(time.RFC3339Nano, d["dueAt"].(string))
			require.NoError(t, err, "%v", d)
			assert.WithinDuration(t, time.Now().Add(200*time.Millisecond), due, 5*time.Second)
			s.eventually(t, a, "ada", func(msgs []map[string]any) bool {
				return len(msgs) > 0 && msgs[0]["text"] == "stretch" && msgs[0]["direction"] == float64(1)
			}, "the reminder is posted")
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "remind", "data": map[string]any{"ms": 5}})
			p := assertProblem(t, r, http.StatusBadRequest, "invalid-method-parameters")
			assert.Equal(t, "the parameters of remind do not match its schema: missing property 'text'", p["detail"])
			r = s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "remind", "data": map[string]any{"text": "now", "ms": -5}})
			assertProblem(t, r, http.StatusBadRequest, "handler-error")
		}},
		{"Data tick posts until stopped", func(t *testing.T) {
			a := s.act("tick")
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "tick", map[string]any{"seconds": 1})), map[string]any{"ticking": true, "every": "1s"})
			s.eventually(t, a, "ada", func(msgs []map[string]any) bool {
				return len(msgs) > 0 && msgs[0]["text"] == "tick 1"
			}, "the first tick is posted")
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "tick", map[string]any{"stop": true})), map[string]any{"ticking": false, "stopped": true})
			assertDataReply(t, reply(t, s.sendWait(t, a, "Data", "tick", map[string]any{"stop": true})), map[string]any{"ticking": false, "stopped": false})
			st := s.hook(t, a, "state").object(t)["state"].(map[string]any)
			assert.GreaterOrEqual(t, st["ticks"], float64(1))
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "tick", "data": map[string]any{"seconds": -1}})
			assertProblem(t, r, http.StatusBadRequest, "handler-error")
		}},
		{"Data history reads the thread", func(t *testing.T) {
			a := s.act("history")
			if !s.target.has(DataHistory) {
				r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "history"})
				assertProblem(t, r, http.StatusNotFound, "unknown-method")
				return
			}
			s.sendWait(t, a, "Chat", "first", nil)
			resp := reply(t, s.sendWait(t, a, "Data", "history", map[string]any{"size": 2}))
			msgs, _ := resp["data"].(map[string]any)["messages"].([]any)
			require.Len(t, msgs, 2, "%v", resp)
			assert.Equal(t, "You said: first", msgs[0].(map[string]any)["text"], "newest first, without the call itself")
			assert.Equal(t, "first", msgs[1].(map[string]any)["text"])
		}},
		{"Data relay calls another instance", func(t *testing.T) {
			a := s.act("relay")
			if !s.target.has(DataRelay) {
				r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "relay"})
				assertProblem(t, r, http.StatusNotFound, "unknown-method")
				return
			}
			b := s.act("relay-b")
			resp := reply(t, s.sendWait(t, a, "Data", "relay", map[string]any{"activation": b, "method": "count"}))
			res, _ := resp["data"].(map[string]any)["result"].(map[string]any)
			assert.EqualValues(t, 1, res["count"], "%v", resp)
			assert.EqualValues(t, 1, s.hook(t, b, "state").object(t)["state"].(map[string]any)["count"])
		}},
		{"Data steps runs and counts its steps", func(t *testing.T) {
			a := s.act("steps")
			if !s.target.has(DataSteps) {
				r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "steps", "data": map[string]any{"n": 2}})
				assertProblem(t, r, http.StatusNotFound, "unknown-method")
				return
			}
			data := reply(t, s.sendWait(t, a, "Data", "steps", map[string]any{"n": 3, "sleepMs": 1}))["data"].(map[string]any)
			assert.EqualValues(t, 3, data["steps"], "%v", data)
			assert.EqualValues(t, 1, data["attempt"], "%v", data)
			ran, _ := data["ran"].([]any)
			require.Len(t, ran, 3, "%v", data)
			for i, r := range ran {
				r, _ := r.(map[string]any)
				assert.EqualValues(t, 1, r["attempt"], "step %d: %v", i+1, r)
				assert.NotEmpty(t, r["hostId"], "step %d: %v", i+1, r)
			}
			s.sendWait(t, a, "Data", "steps", map[string]any{"n": 1})
			assert.Equal(t, []any{float64(2), float64(1), float64(1)}, s.hook(t, a, "state").object(t)["state"].(map[string]any)["steps"])
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "steps", "data": map[string]any{"n": 101}})
			assertProblem(t, r, http.StatusBadRequest, "handler-error")
			r = s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "steps", "data": map[string]any{}})
			p := assertProblem(t, r, http.StatusBadRequest, "invalid-method-parameters")
			assert.Equal(t, "the parameters of steps do not match its schema: missing property 'n'", p["detail"])
		}},
		{"Data ask waits for the participant's answer", func(t *testing.T) {
			a := s.act("ask")
			r := s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "ask",
				"data": map[string]any{"question": "Which colour?"}})
			if !s.target.has(DataAsk) {
				assertProblem(t, r, http.StatusNotFound, "unknown-method")
				return
			}
			require.Equal(t, http.StatusAccepted, r.Status, "%s", r)
			waiting, _ := reply(t, r.object(t))["data"].(map[string]any)["waiting"].(map[string]any)
			require.NotNil(t, waiting, "%s", r)
			assert.Equal(t, "answer", waiting["name"], "%s", r)
			// A message that does not answer queues behind the question.
			r = s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "echo", "data": map[string]any{"x": 1}})
			require.Equal(t, http.StatusAccepted, r.Status, "%s", r)
			assert.Contains(t, string(r.Body), `"queued"`)
			data := reply(t, s.sendWait(t, a, "Chat", "blue", nil))["data"].(map[string]any)
			assert.Equal(t, map[string]any{"question": "Which colour?", "type": "chat", "answer": "blue", "by": "ada"}, data)
			r = s.send(t, "wait=true", map[string]any{"agentName": "Echo", "activationName": a, "participantId": "ada", "type": "Data", "text": "answer", "data": map[string]any{}})
			assertProblem(t, r, http.StatusConflict, "handler-error")
		}},
	}
}
