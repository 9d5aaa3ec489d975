package conformance

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/sse"
)

// stream makes a converse call with Accept: text/event-stream and reads its events to the end.
func (s *suite) stream(t *testing.T, query url.Values, body []byte) (*http.Response, []sse.Event) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.target.URL+"/api/user/rest/converse?"+query.Encode(), strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.target.Key)
	req.Header.Set("Accept", "text/event-stream")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp, readEvents(resp.Body, nil)
}

// names lists the events' names.
func names(events []sse.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Event
	}
	return out
}

// deltas lists the delta events' texts.
func deltas(t *testing.T, events []sse.Event) []string {
	t.Helper()
	var out []string
	for _, e := range events {
		if e.Event == "delta" {
			d, ok := jsonOf(t, e.Data)["delta"].(string)
			assert.True(t, ok, "a delta event holds {\"delta\": text}: %s", e.Data)
			out = append(out, d)
		}
	}
	return out
}

// converseQuery is the query of a converse call to Echo's workflow.
func converseQuery(workflow, typ, text string) url.Values {
	return url.Values{"workflow": {workflow}, "type": {typ}, "text": {text}}
}

// converseCases are the cases of the converse endpoint (docs/messaging.md#converse), streamed
// and not, with Echo's Chat and Data methods, and of the listen stream that follows a thread.
func (s *suite) converseCases() []testCase {
	return []testCase{
		{"Chat answers You said", func(t *testing.T) {
			r := s.converse(t, converseQuery("Echo", "Chat", "Good morning"), nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, "application/json", r.ContentType())
			m := r.object(t)
			// The participant defaults to user; Echo is activation default of Supervisor Workflow.
			assertAccepted(t, r, m, s.workflowID("default"), "user")
			assertChatReply(t, reply(t, m), "You said: Good morning")
		}},
		{"Chat to a full workflow id, a participant and a topic", func(t *testing.T) {
			a := s.act("converse-chat")
			q := converseQuery(s.workflowID(a), "Chat", "  spaced  out  ")
			q.Set("participantId", "Carol")
			q.Set("topic", "billing")
			r := s.converse(t, q, nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			m := r.object(t)
			assertAccepted(t, r, m, s.workflowID(a), "carol")
			resp := reply(t, m)
			assertChatReply(t, resp, "You said:   spaced  out  ")
			assert.Equal(t, "billing", resp["scope"])
			s.eventually(t, a, "carol", func(msgs []map[string]any) bool { return len(msgs) >= 2 }, "the chat and its reply are stored")
			msgs := s.history(t, a, "carol", 5)
			require.Len(t, msgs, 2)
			assert.Equal(t, "billing", msgs[0]["scope"])
			assert.Equal(t, "billing", msgs[1]["scope"])
		}},
		{"Chat with the key in the apikey parameter", func(t *testing.T) {
			q := converseQuery("Echo:Conversational", "Chat", "hi")
			q.Set("apikey", s.target.Key)
			r := s.converse(t, q, nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			m := r.object(t)
			assertAccepted(t, r, m, s.target.Tenant+":Echo:Conversational:default", "user")
			assertChatReply(t, reply(t, m), "You said: hi")
		}},
		{"Data answers the method's result", func(t *testing.T) {
			a := s.workflowID(s.act("converse-data"))
			r := s.converse(t, converseQuery(a, "Data", "sum"), nil, []byte(`{"values":[4,5,6]}`))
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			m := r.object(t)
			assertAccepted(t, r, m, a, "user")
			assertDataReply(t, reply(t, m), map[string]any{"sum": float64(15)})

			// An empty body means no parameters.
			r = s.converse(t, converseQuery(a, "Data", "echo"), nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assertDataReply(t, reply(t, r.object(t)), map[string]any{})
			r = s.converse(t, converseQuery(a, "Data", "count"), nil, []byte(`{}`))
			assertDataReply(t, reply(t, r.object(t)), map[string]any{"count": float64(1), "runId": s.hook(t, s.act("converse-data"), "state").object(t)["runId"]})
		}},
		{"Data fail is a handler-error problem", func(t *testing.T) {
			q := converseQuery(s.workflowID(s.act("converse-fail")), "Data", "fail")
			r := s.converse(t, q, http.Header{"Idempotency-Key": {s.key("converse-fail")}}, []byte(`{"status":409,"message":"already done"}`))
			p := assertProblem(t, r, http.StatusConflict, "handler-error")
			assert.Equal(t, "already done", p["detail"])
			assert.Equal(t, s.key("converse-fail"), p["requestId"])
			assert.Equal(t, s.key("converse-fail"), r.Header.Get("X-Request-Id"))
			r = s.converse(t, q, nil, []byte(`{"status":418}`))
			assertProblem(t, r, http.StatusTeapot, "handler-error")
		}},
		{"a reply later than timeoutSeconds is 504 handler-timeout, and still handled", func(t *testing.T) {
			a := s.act("converse-timeout")
			q := converseQuery(s.workflowID(a), "Data", "sleep")
			q.Set("timeoutSeconds", "1")
			r := s.converse(t, q, nil, []byte(`{"ms":1600}`))
			assertProblem(t, r, http.StatusGatewayTimeout, "handler-timeout")
			s.eventually(t, a, "user", func(msgs []map[string]any) bool {
				if len(msgs) == 0 {
					return false
				}
				d, _ := msgs[0]["data"].(map[string]any)
				return msgs[0]["direction"] == float64(1) && d["slept"] == float64(1600)
			}, "the reply is stored")
		}},
		{"bad parameters", func(t *testing.T) {
			for _, q := range []url.Values{
				{"type": {"Chat"}, "text": {"hi"}},
				{"workflow": {"Echo"}, "text": {"hi"}},
				{"workflow": {"Echo"}, "type": {"Chat"}},
			} {
				assertProblem(t, s.converse(t, q, nil, nil), http.StatusBadRequest, "missing-parameter")
			}
			assertProblem(t, s.converse(t, converseQuery("Echo", "File", "hi"), nil, nil), http.StatusBadRequest, "invalid-parameter")
			assertProblem(t, s.converse(t, converseQuery("Echo", "Data", "echo"), nil, []byte(`[1,2]`)), http.StatusBadRequest, "invalid-json")
			assertProblem(t, s.converse(t, converseQuery("Echo", "Data", "echo"), nil, []byte(`{"a":`)), http.StatusBadRequest, "invalid-json")
			assertProblem(t, s.converse(t, converseQuery("Echo", "Data", "nosuchmethod"), nil, nil), http.StatusNotFound, "unknown-method")
			assertProblem(t, s.converse(t, converseQuery("NoSuchAgent"+s.nonce, "Chat", "hi"), nil, nil), http.StatusNotFound, "unknown-agent")
			assertProblem(t, s.converse(t, converseQuery("a:b:c", "Chat", "hi"), nil, nil), http.StatusBadRequest, "invalid-workflow")
		}},
		{"a missing or bad key is 401, a foreign tenantId 403", func(t *testing.T) {
			r := s.converse(t, converseQuery("Echo", "Chat", "hi"), http.Header{"Authorization": {"Bearer abk_not-a-key"}}, nil)
			assertProblem(t, r, http.StatusUnauthorized, "unauthorized")
			assert.Equal(t, `Bearer realm="agentbus"`, r.Header.Get("WWW-Authenticate"))
			q := converseQuery("Echo", "Chat", "hi")
			q.Set("apikey", "")
			assertProblem(t, s.call(t, http.MethodPost, s.target.URL+"/api/user/rest/converse?"+q.Encode(), nil, nil), http.StatusUnauthorized, "unauthorized")
			q = converseQuery("Echo", "Chat", "hi")
			q.Set("tenantId", "other"+s.nonce)
			assertProblem(t, s.converse(t, q, nil, nil), http.StatusForbidden, "forbidden")
		}},
		{"a streamed Chat sends deltas, then the message", func(t *testing.T) {
			a := s.workflowID(s.act("stream"))
			resp, events := s.stream(t, converseQuery(a, "Chat", "hello there"), nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"), resp.Header.Get("Content-Type"))
			require.NotEmpty(t, events)
			last := events[len(events)-1]
			require.Equal(t, "message", last.Event, "one message event ends the stream: %v", names(events))
			assert.Equal(t, []string{"You ", "said: ", "hello ", "there"}, deltas(t, events), "the offline model's words")
			for _, e := range events[:len(events)-1] {
				assert.Equal(t, "delta", e.Event)
			}
			m := jsonOf(t, last.Data)
			assert.NotEmpty(t, m["messageId"])
			assert.NotEmpty(t, m["requestId"])
			assert.Equal(t, a, m["workflowId"])
			assert.Equal(t, threadID(a, "user"), m["threadId"])
			assertChatReply(t, reply(t, m), "You said: hello there")
		}},
		{"a streamed Chat's deltas keep every space", func(t *testing.T) {
			text := "a  b\tc\n d "
			_, events := s.stream(t, converseQuery(s.workflowID(s.act("stream-ws")), "Chat", text), nil)
			require.NotEmpty(t, events)
			assert.Equal(t, []string{"You ", "said: ", "a  ", "b\t", "c\n ", "d "}, deltas(t, events))
			assertChatReply(t, reply(t, jsonOf(t, events[len(events)-1].Data)), "You said: "+text)
		}},
		{"a streamed Data call sends only the message", func(t *testing.T) {
			_, events := s.stream(t, converseQuery(s.workflowID(s.act("stream-data")), "Data", "sum"), []byte(`{"values":[1,2]}`))
			require.Equal(t, []string{"message"}, names(events))
			assertDataReply(t, reply(t, jsonOf(t, events[0].Data)), map[string]any{"sum": float64(3)})
		}},
		{"a streamed failure is one error event", func(t *testing.T) {
			resp, events := s.stream(t, converseQuery(s.workflowID(s.act("stream-fail")), "Data", "fail"), []byte(`{"status":422,"message":"nope"}`))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, []string{"error"}, names(events))
			p := jsonOf(t, events[0].Data)
			assert.Equal(t, "urn:agentbus:problem:handler-error", p["type"])
			assert.EqualValues(t, 422, p["status"])
			assert.Equal(t, "nope", p["detail"])
			assert.NotEmpty(t, p["requestId"])
			assert.Equal(t, http.StatusText(http.StatusUnprocessableEntity), p["title"])
		}},
		{"checks before the stream answer a problem", func(t *testing.T) {
			resp, _ := s.stream(t, converseQuery("Echo", "Data", "nosuchmethod"), nil)
			assert.Equal(t, http.StatusNotFound, resp.StatusCode)
			assert.Equal(t, "application/problem+json", strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0]))
		}},
		{"a call with an Idempotency-Key is not streamed", func(t *testing.T) {
			q := converseQuery(s.workflowID(s.act("stream-idem")), "Chat", "once")
			h := http.Header{"Accept": {"text/event-stream"}, "Idempotency-Key": {s.key("stream-idem")}}
			first := s.converse(t, q, h, nil)
			require.Equal(t, http.StatusOK, first.Status, "%s", first)
			assert.Equal(t, "application/json", first.ContentType())
			assertChatReply(t, reply(t, first.object(t)), "You said: once")
			q.Set("text", "twice")
			again := s.converse(t, q, h, nil)
			require.Equal(t, http.StatusOK, again.Status, "%s", again)
			assert.Equal(t, reply(t, first.object(t)), reply(t, again.object(t)), "the retry gets the first result")
		}},
		{"a chat calls a Data method for call {method} {json}", func(t *testing.T) {
			a := s.act("tool")
			r := s.converse(t, converseQuery(s.workflowID(a), "Chat", `call sum {"values":[2,3]}`), nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assertChatReply(t, reply(t, r.object(t)), `sum returned {"sum":5}`)

			_, events := s.stream(t, converseQuery(s.workflowID(a), "Chat", `call sum {"values":[4,5]}`), nil)
			require.NotEmpty(t, events)
			assertChatReply(t, reply(t, jsonOf(t, events[len(events)-1].Data)), `sum returned {"sum":9}`)
			assert.Equal(t, `sum returned {"sum":9}`, strings.Join(deltas(t, events), ""))
			if !s.target.has(ChatToolEvents) {
				return
			}
			require.GreaterOrEqual(t, len(events), 3, "%v", names(events))
			assert.Equal(t, []string{"tool_call", "tool_result"}, names(events[:2]))
			call, result := jsonOf(t, events[0].Data), jsonOf(t, events[1].Data)
			assert.True(t, strings.HasPrefix(call["id"].(string), "call_"), "%v", call)
			assert.Equal(t, "sum", call["name"])
			assert.Equal(t, map[string]any{"values": []any{float64(4), float64(5)}}, call["arguments"])
			assert.Equal(t, call["id"], result["id"])
			assert.Equal(t, "sum", result["name"])
			assert.Equal(t, map[string]any{"sum": float64(9)}, result["data"])

			// The thread holds the chat, the call, its result and the answer.
			s.eventually(t, a, "user", func(msgs []map[string]any) bool { return len(msgs) >= 4 }, "the chat's four messages are stored")
			msgs := s.history(t, a, "user", 4)
			require.Len(t, msgs, 4)
			assert.Equal(t, `sum returned {"sum":9}`, msgs[0]["text"])
			assert.Equal(t, map[string]any{"sum": float64(9)}, msgs[1]["data"])
			assert.Equal(t, "sum", msgs[2]["text"])
			assert.Equal(t, map[string]any{"toolCallId": call["id"]}, msgs[2]["metadata"])
			assert.Equal(t, `call sum {"values":[4,5]}`, msgs[3]["text"])
		}},
		{"listen follows a thread and resumes after Last-Event-ID", func(t *testing.T) {
			a := s.act("listen")
			listen := func(lastEventID string, want int) []sse.Event {
				q := url.Values{"agentName": {"Echo"}, "activationName": {a}, "participantId": {"ada"}}
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
					s.target.URL+"/api/v1/admin/tenants/"+url.PathEscape(s.target.Tenant)+"/messaging/listen?"+q.Encode(), nil)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+s.target.Key)
				if lastEventID != "" {
					req.Header.Set("Last-Event-ID", lastEventID)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
				if lastEventID == "" {
					// The stream holds what is stored from now on, read below.
					s.sendWait(t, a, "Chat", "are you there?", nil)
				}
				got := make(chan []sse.Event, 1)
				go func() {
					n := 0
					got <- readEvents(resp.Body, func(sse.Event) bool { n++; return n == want })
				}()
				select {
				case evs := <-got:
					return evs
				case <-time.After(10 * time.Second):
					t.Fatalf("listen: %d events did not come", want)
					return nil
				}
			}
			events := listen("", 2)
			require.Len(t, events, 2)
			var msgs []map[string]any
			for _, e := range events {
				assert.Equal(t, "message", e.Event)
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(e.Data), &m))
				assert.Equal(t, m["id"], e.ID, "the event id is the message's id")
				msgs = append(msgs, m)
			}
			assert.Equal(t, "are you there?", msgs[0]["text"])
			assert.EqualValues(t, 0, msgs[0]["direction"])
			assert.Equal(t, "You said: are you there?", msgs[1]["text"])
			assert.EqualValues(t, 1, msgs[1]["direction"])

			resumed := listen(events[0].ID, 1)
			require.Len(t, resumed, 1)
			assert.Equal(t, events[1].ID, resumed[0].ID, "the messages stored after Last-Event-ID come first")
		}},
	}
}
