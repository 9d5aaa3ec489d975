package ingress

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/msgkind"
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
	c, ok := s.startUserCall(w, r, converseAccess)
	if !ok {
		return
	}
	req, timeout, p := s.converseRequest(w, r, c)
	if p != nil {
		p.RequestID = c.requestID
		problem.Write(w, *p)
		return
	}
	ids := idsOf(req)
	if wantsEventStream(r) && !c.keep {
		s.streamCall(w, r, c.caller, req, ids, timeout)
		return
	}
	rep, err := s.call(r.Context(), c.caller, req, timeout)
	if err != nil {
		s.writeCallError(w, r, req, err)
		return
	}
	s.writeMessageReply(w, req, ids, rep)
}

// converseRequest checks a converse call and builds its request. Checks go: workflow, type and
// text present, type, lengths, workflow, participant, timeoutSeconds, the Data body, the
// target's registration and host, then the Data body against the method's schema.
func (s *Server) converseRequest(w http.ResponseWriter, r *http.Request, c userCall) (*agentbusv1.Request, time.Duration, *problem.Problem) {
	query := c.query
	for _, name := range []string{"workflow", "type", "text"} {
		if strings.TrimSpace(query.Get(name)) == "" {
			return nil, 0, problem.MissingParameter.New(name + " is required")
		}
	}
	// Converse takes the kinds clients send as text and JSON data: Chat and Data.
	k, ok := msgkind.Named(query.Get("type"))
	if !ok || !k.Sent || k.Payload != msgkind.JSONData {
		return nil, 0, problem.InvalidParameter.New("type must be Chat or Data")
	}
	text := query.Get("text")
	if len(text) > maxTextLen || len(query.Get("topic")) > maxTopicLen || len(query.Get("hint")) > maxHintLen {
		return nil, 0, problem.InvalidParameter.New("text, topic or hint is too long")
	}
	wf, participant, p := resolveTarget(query.Get("workflow"), query.Get("participantId"), c.tenant, converseParticipant)
	if p != nil {
		return nil, 0, p
	}
	_, timeout, perr := waitParams(query)
	if perr != "" {
		return nil, 0, problem.InvalidQuery.New(perr)
	}
	var data []byte
	if k.Method {
		if data, p = s.readDataBody(w, r); p != nil {
			return nil, 0, p
		}
	}
	if p := s.checkAgent(r, wf, k.Wire, text, c.keep); p != nil {
		return nil, 0, p
	}
	if k.Method {
		if p := s.checkParams(wf.Agent, text, data); p != nil {
			return nil, 0, p
		}
	}
	req := newMessageRequest(wf, participant, k.Wire, text, c.requestID, c.keep)
	req.Data, req.Scope, req.Hint = data, query.Get("topic"), query.Get("hint")
	return req, timeout, nil
}

// readDataBody reads the body of a Data call: nothing, or a JSON object of its parameters.
func (s *Server) readDataBody(w http.ResponseWriter, r *http.Request) ([]byte, *problem.Problem) {
	raw, p := s.readBody(w, r, maxConverseBody)
	if p != nil {
		return nil, p
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) || raw[0] != '{' {
		return nil, problem.InvalidJSON.New("a Data call's body must be a JSON object holding the method's parameters")
	}
	return raw, nil
}
