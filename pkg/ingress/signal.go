package ingress

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// maxSignalBody bounds a signal's body: its data becomes the event of the wait it ends, which is
// recorded in the waiting request's journal (at most 256 KiB).
const maxSignalBody = 256 << 10

// signalBody is the body of a signal: the conversation it goes to, its name and its data.
type signalBody struct {
	AgentName      string          `json:"agentName"`
	ActivationName string          `json:"activationName"`
	WorkflowType   string          `json:"workflowType"`
	ParticipantID  string          `json:"participantId"`
	Name           string          `json:"name"`
	Data           json.RawMessage `json:"data"`
	RequestID      string          `json:"requestId"`
}

// signal serves POST /api/v1/admin/tenants/{tenantId}/messaging/signal (and the same without the
// tenant in the path, with X-Tenant-Id): it sends a named signal to a conversation, to end the
// wait of a request that waits for it (agent.For.Signals), and answers as a message that ends a
// wait is answered: the resumed request's answer, or {"resumed":…}. When nothing waits for it,
// the host answers 409 not-waiting. Checks go as send's.
func (s *Server) signal(w http.ResponseWriter, r *http.Request) {
	raw, p := s.readBody(w, r, maxSignalBody)
	var body signalBody
	if p == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&body); err != nil || dec.More() {
			p = problem.InvalidJSON.New("the body must be one JSON object: " + jsonProblem(err))
		}
	}
	var c caller
	if p == nil {
		var query map[string][]string
		if query, p = readQuery(r); p == nil {
			c, p = s.identify(r, query, sendAccess, "")
		}
	}
	if p != nil {
		problem.Write(w, *p)
		return
	}
	requestID, keep, ok := bodyRequestID(w, body.RequestID)
	if !ok {
		return
	}
	req, p := s.signalRequest(r, c.tenant, body, requestID, keep)
	if p != nil {
		p.RequestID = requestID
		problem.Write(w, *p)
		return
	}
	rep, err := s.call(r.Context(), c, req, defaultWait)
	if err != nil {
		s.writeCallError(w, r, req, err)
		return
	}
	s.writeMessageReply(w, req, idsOf(req), rep)
}

// signalRequest checks a signal's body and builds its request: a Data request to the
// conversation, with the signal's name as its method and in its signal field.
func (s *Server) signalRequest(r *http.Request, tenant string, body signalBody, requestID string, keep bool) (*agentbusv1.Request, *problem.Problem) {
	switch {
	case strings.TrimSpace(body.Name) == "":
		return nil, problem.MissingField.New("name is required: it names the signal")
	case subject.CheckName("", body.Name) != nil:
		return nil, problem.InvalidField.New("name must be 1-256 bytes of text without control characters")
	case len(body.Data) > 0 && string(body.Data) != "null" && !isJSONObject(body.Data):
		return nil, problem.InvalidField.New("data must be a JSON object")
	}
	wf, _, participant, p := sendTarget(tenant, sendBody{AgentName: body.AgentName, ActivationName: body.ActivationName,
		WorkflowType: body.WorkflowType, ParticipantID: body.ParticipantID, Type: "Data", Text: body.Name}, requestID)
	if p != nil {
		return nil, p
	}
	if p := s.holdWaiting(r, tenant); p != nil {
		return nil, p
	}
	// The agent, its workflow type and a live host: a signal names no method of the agent.
	if p := s.checkAgent(r, wf, agentbusv1.Kind_KIND_UNSPECIFIED, "", keep); p != nil {
		return nil, p
	}
	req := newMessageRequest(wf, participant, agentbusv1.Kind_KIND_DATA, body.Name, requestID, keep)
	req.Signal = body.Name
	if len(body.Data) > 0 && string(body.Data) != "null" {
		req.Data = body.Data
	}
	return req, nil
}
