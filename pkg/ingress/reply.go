package ingress

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/jsonenc"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// responseMessage is the reply as synchronous endpoints show it (docs/interface.md#24-converse-response).
type responseMessage struct {
	ID          string          `json:"id"`
	Text        *string         `json:"text"`
	Data        json.RawMessage `json:"data"`
	MessageType int             `json:"messageType"`
	CreatedAt   string          `json:"createdAt"`
	Scope       string          `json:"scope,omitempty"`
	Hint        string          `json:"hint,omitempty"`
}

// newMessageRequest is the envelope of a Chat, Data, File or Webhook message to a workflow: a new
// message id, the workflow's routing fields, and the text as the method of Data and Webhook.
func newMessageRequest(wf ident.Workflow, participant string, kind agentbusv1.Kind, text, requestID string, keep bool) *agentbusv1.Request {
	req := &agentbusv1.Request{
		RequestId:      requestID,
		TenantId:       wf.Tenant,
		WorkflowId:     wf.ID(),
		AgentName:      wf.Agent,
		WorkflowType:   wf.WorkflowType,
		ActivationName: wf.Activation,
		ParticipantId:  participant,
		Kind:           kind,
		Text:           text,
		KeepResult:     keep,
		MessageId:      uuid.NewString(),
	}
	if kind == agentbusv1.Kind_KIND_DATA || kind == agentbusv1.Kind_KIND_WEBHOOK {
		req.Method = text
	}
	return req
}

// idsOf names what a message request is, as the answers show it.
func idsOf(req *agentbusv1.Request) sendIDs {
	return sendIDs{MessageID: req.MessageId, RequestID: req.RequestId, WorkflowID: req.WorkflowId, ThreadID: subject.ThreadID(req.WorkflowId, req.ParticipantId)}
}

// syncAnswer is the answer of send with wait=true: the ids and the handler's reply, null when
// the handler sent none.
type syncAnswer struct {
	sendIDs
	Response *responseMessage `json:"response"`
}

// MarshalJSON writes what encoding/json would write for a, without reflection (appendJSON).
func (a *syncAnswer) MarshalJSON() ([]byte, error) { return a.appendJSON(nil) }

// appendJSON appends a's JSON form, byte for byte encoding/json's for the struct: every
// synchronous send and converse call writes one, and encoding/json's reflection took about 2 %
// of such a call's CPU. It fails only on invalid JSON in the response's data.
func (a *syncAnswer) appendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"messageId":`...)
	b = jsonenc.AppendString(b, a.MessageID)
	b = append(b, `,"requestId":`...)
	b = jsonenc.AppendString(b, a.RequestID)
	b = append(b, `,"workflowId":`...)
	b = jsonenc.AppendString(b, a.WorkflowID)
	b = append(b, `,"threadId":`...)
	b = jsonenc.AppendString(b, a.ThreadID)
	b = append(b, `,"response":`...)
	m := a.Response
	if m == nil {
		return append(b, "null}"...), nil
	}
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, m.ID)
	b = append(b, `,"text":`...)
	if m.Text == nil {
		b = append(b, "null"...)
	} else {
		b = jsonenc.AppendString(b, *m.Text)
	}
	b = append(b, `,"data":`...)
	var err error
	if b, err = jsonenc.AppendRaw(b, m.Data); err != nil {
		return dst, fmt.Errorf("encoding the response's data: %w", err)
	}
	b = append(b, `,"messageType":`...)
	b = jsonenc.AppendInt(b, int64(m.MessageType))
	b = append(b, `,"createdAt":`...)
	b = jsonenc.AppendString(b, m.CreatedAt)
	if m.Scope != "" {
		b = append(b, `,"scope":`...)
		b = jsonenc.AppendString(b, m.Scope)
	}
	if m.Hint != "" {
		b = append(b, `,"hint":`...)
		b = jsonenc.AppendString(b, m.Hint)
	}
	return append(b, "}}"...), nil
}

// writeMessageReply answers a synchronous send (or converse) with the handler's reply, or with a
// problem when the handler failed.
func (s *Server) writeMessageReply(w http.ResponseWriter, req *agentbusv1.Request, ids sendIDs, rep *agentbusv1.Reply) {
	ans, p := s.messageAnswer(req, ids, rep)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	// Not writeJSON: encoding/json would check and compact appendJSON's output once more.
	b, err := ans.appendJSON(make([]byte, 0, 512+len(rep.GetContent())))
	if err != nil {
		s.log.Error("encoding the answer", "err", err)
	}
	writeJSONBody(w, http.StatusOK, b, err)
}

// hostProblem is the problem a host's error reply becomes: the host's slug with its status
// (400–599, else the type's own), or handler-error for a slug agentbus does not define.
func hostProblem(rep *agentbusv1.Reply) problem.Problem {
	t, ok := problem.Lookup(rep.GetError())
	if !ok {
		t = problem.HandlerError
	}
	p := t.New(string(rep.GetContent()))
	if status := int(rep.GetStatusCode()); status >= 400 && status <= 599 {
		p.Status = status
	}
	p.RequestID = rep.GetRequestId()
	return *p
}

// messageAnswer is what a synchronous caller gets for rep: the answer, or a problem.
func (s *Server) messageAnswer(req *agentbusv1.Request, ids sendIDs, rep *agentbusv1.Reply) (*syncAnswer, *problem.Problem) {
	status := int(rep.GetStatusCode())
	if rep.GetError() != "" {
		p := hostProblem(rep)
		return nil, &p
	}
	ans := &syncAnswer{sendIDs: ids}
	switch {
	case req.GetKind() == agentbusv1.Kind_KIND_WEBHOOK:
		content := any(string(rep.GetContent()))
		if !utf8.Valid(rep.GetContent()) {
			content = map[string]any{"base64": rep.GetContent()}
		}
		data, _ := json.Marshal(map[string]any{"statusCode": status, "contentType": rep.GetContentType(), "content": content})
		ans.Response = &responseMessage{Data: data, MessageType: int(agentbusv1.Kind_KIND_WEBHOOK), CreatedAt: timefmt.Format(time.Now()),
			Scope: req.GetScope(), Hint: req.GetHint()}
	case len(rep.GetContent()) > 0:
		var m responseMessage
		if err := json.Unmarshal(rep.GetContent(), &m); err != nil {
			s.log.Error("decoding reply message", "err", err)
			p := problem.BadReply.New("the handler's reply could not be read")
			p.RequestID = rep.GetRequestId()
			return nil, p
		}
		if string(m.Data) == "null" {
			m.Data = nil
		}
		ans.Response = &m
	}
	return ans, nil
}
