package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/problem"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// wantsEventStream reports whether the caller asked for Server-Sent Events.
func wantsEventStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, _ := strings.Cut(strings.TrimSpace(part), ";"); strings.EqualFold(mt, "text/event-stream") {
			return true
		}
	}
	return false
}

// streamCall publishes req asking for a streamed reply and relays it as Server-Sent Events:
// "delta" events ({"delta": "…"}) while the handler produces its answer, and "tool_call" and
// "tool_result" events while a chat's model has the agent's Data methods run (partialEvent), then
// one "message" event holding the same answer the JSON endpoint gives, or one "error" event
// holding a problem. A "restart" event ({"attempt": n}) says that the handler runs again (a
// retry, or a redelivery after its host stopped): the client discards the deltas and tool events
// before it, and the answer is streamed again from its beginning. Once c's key is revoked, the
// stream ends at once with an "error" event (401).
func (s *Server) streamCall(w http.ResponseWriter, r *http.Request, c caller, req *agentbusv1.Request, ids history.IDs, timeout time.Duration) {
	req.Stream = true
	waiter := s.replies.WaitFor(c.key.ID)
	defer waiter.Done()
	if _, err := s.publish(r.Context(), req, waiter.Subject); err != nil {
		s.writeCallError(w, r, req, err)
		return
	}
	es := startEventStream(w) // it lasts as long as the handler, up to timeout
	event := func(name string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		return es.write(sseNamed(name, "", b))
	}
	problemEvent := func(p problem.Problem) {
		noteStatus(r, p.Status)
		if p.Title == "" {
			p.Title = http.StatusText(p.Status)
		}
		event("error", map[string]any{"type": problem.TypePrefix + p.Slug, "title": p.Title, "status": p.Status, "detail": p.Detail, "requestId": req.RequestId})
	}

	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	for {
		rep, err := waiter.Receive(ctx)
		if errors.Is(err, errKeyRevoked) {
			problemEvent(s.callProblem(r.URL.Path, req, err))
			return
		}
		if err != nil {
			if r.Context().Err() == nil {
				s.metrics.timeouts.Inc()
				problemEvent(*problem.HandlerTimeout.New("the handler did not answer in time; the request was accepted and will still be processed"))
			}
			return
		}
		if s.revoked.revokedSince(c) {
			problemEvent(s.callProblem(r.URL.Path, req, errKeyRevoked))
			return
		}
		if rep.GetPartial() {
			name, v := partialEvent(rep)
			if !event(name, v) {
				return
			}
			continue
		}
		if err := s.resolveContent(ctx, req, rep); err != nil {
			problemEvent(*problem.ReplyUnavailable.New("the handler answered, but its reply could not be read back"))
			return
		}
		ans, p := s.messageAnswer(req, ids, rep)
		if p != nil {
			problemEvent(*p)
			return
		}
		event("message", ans)
		return
	}
}

// toolCallEvent is the data of a "tool_call" event: a Data method a chat's model asked for, sent
// before it runs. Arguments is the JSON object the model wrote, or the text as a string when it
// is not JSON.
type toolCallEvent struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// toolResultEvent is the data of a "tool_result" event: the call's reply as stored in history
// (a failed call's data is {"error":{"status":…,"message":…}}).
type toolResultEvent struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Text *string         `json:"text"`
	Data json.RawMessage `json:"data"`
}

// partialEvent is the event name and data of a partial reply.
func partialEvent(rep *agentbusv1.Reply) (string, any) {
	if rep.GetRestart() {
		return "restart", history.StreamRestart{Attempt: rep.GetAttempt()}
	}
	if tc := rep.GetToolCall(); tc != nil {
		args := json.RawMessage(tc.GetArguments())
		if !json.Valid(args) {
			args, _ = json.Marshal(tc.GetArguments())
		}
		return "tool_call", toolCallEvent{ID: tc.GetId(), Name: tc.GetName(), Arguments: args}
	}
	if tr := rep.GetToolResult(); tr != nil {
		data := json.RawMessage(tr.GetData())
		if len(data) == 0 || !json.Valid(data) {
			data = json.RawMessage("null")
		}
		return "tool_result", toolResultEvent{ID: tr.GetId(), Name: tr.GetName(), Text: tr.Text, Data: data}
	}
	return "delta", history.StreamDelta{Delta: rep.GetDelta()}
}
