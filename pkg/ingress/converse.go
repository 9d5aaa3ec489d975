package ingress

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbus/agentbus/pkg/problem"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// converseParticipant is the participant of a converse call that names none.
const converseParticipant = "user"

// maxConverseBody bounds a Data call's parameters.
const maxConverseBody = 1 << 20

// converse serves POST /api/user/rest/converse?workflow=…&type=Chat|Data&text=…[&participantId=…]
// (docs/interface.md#42-converse-chat-and-data): the synchronous way to talk to an agent.
// With Accept: text/event-stream the reply is streamed as Server-Sent Events while the handler
// produces it. Required: workflow, type and text (the chat text or the Data method);
// participantId defaults to "user". Data takes its parameters as a
// JSON object body. Auth: Authorization: Bearer, or the apikey query parameter.
func (s *Server) converse(w http.ResponseWriter, r *http.Request) {
	c, ok := s.startUserCall(w, r, func(q url.Values) (string, []string) {
		return headerOrQueryKey, []string{r.Header.Get("Authorization"), q.Get("apikey")}
	})
	if !ok {
		return
	}
	requestID, keep, query, tenant := c.requestID, c.keep, c.query, c.tenant
	fail := func(status int, slug, detail string) {
		problem.Write(w, problem.Problem{Status: status, Slug: slug, Detail: detail, RequestID: requestID})
	}
	for _, name := range []string{"workflow", "type", "text"} {
		if strings.TrimSpace(query.Get(name)) == "" {
			fail(http.StatusBadRequest, "missing-parameter", name+" is required")
			return
		}
	}
	var kind agentbusv1.Kind
	switch query.Get("type") {
	case "Chat":
		kind = agentbusv1.Kind_KIND_CHAT
	case "Data":
		kind = agentbusv1.Kind_KIND_DATA
	default:
		fail(http.StatusBadRequest, "invalid-parameter", "type must be Chat or Data")
		return
	}
	text := query.Get("text")
	if len(text) > maxTextLen || len(query.Get("topic")) > maxTopicLen || len(query.Get("hint")) > maxHintLen {
		fail(http.StatusBadRequest, "invalid-parameter", "text, topic or hint is too long")
		return
	}
	wf, participant, p := resolveTarget(query.Get("workflow"), query.Get("participantId"), tenant, converseParticipant)
	if p != nil {
		p.RequestID = requestID
		problem.Write(w, *p)
		return
	}
	_, timeout, perr := waitParams(r)
	if perr != "" {
		fail(http.StatusBadRequest, "invalid-query", perr)
		return
	}

	var data []byte
	if kind == agentbusv1.Kind_KIND_DATA {
		raw, p := readBody(w, r, maxConverseBody)
		if p != nil {
			p.RequestID = requestID
			problem.Write(w, *p)
			return
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 {
			if !json.Valid(raw) || raw[0] != '{' {
				fail(http.StatusBadRequest, "invalid-json", "a Data call's body must be a JSON object holding the method's parameters")
				return
			}
			data = raw
		}
	}
	if p := s.checkTarget(wf, kind, text); p != nil {
		p.RequestID = requestID
		problem.Write(w, *p)
		return
	}
	req := newMessageRequest(wf, participant, kind, text, requestID, keep)
	req.Data, req.Scope, req.Hint = data, query.Get("topic"), query.Get("hint")
	ids := idsOf(req)
	if wantsEventStream(r) && !keep {
		s.streamCall(w, r, req, ids, timeout)
		return
	}
	rep, err := s.call(r.Context(), req, timeout)
	if err != nil {
		s.writeCallError(w, r, req, err)
		return
	}
	s.writeMessageReply(w, req, ids, rep)
}
