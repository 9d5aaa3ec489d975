package ingress

import (
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

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
	if msgkind.Of(kind).Method {
		req.Method = text
	}
	return req
}

// idsOf names what a message request is, as the answers show it.
func idsOf(req *agentbusv1.Request) history.IDs {
	return history.IDs{MessageID: req.MessageId, RequestID: req.RequestId, WorkflowID: req.WorkflowId, ThreadID: subject.ThreadID(req.WorkflowId, req.ParticipantId)}
}

// writeMessageReply answers a synchronous send (or converse) with the handler's reply, or with a
// problem when the handler failed.
func (s *Server) writeMessageReply(w http.ResponseWriter, req *agentbusv1.Request, ids history.IDs, rep *agentbusv1.Reply) {
	ans := &history.SyncAnswer{IDs: ids, ResponseJSON: answerJSON(req, rep)}
	if ans.ResponseJSON == nil {
		var p *problem.Problem
		if ans, p = s.messageAnswer(req, ids, rep); p != nil {
			problem.Write(w, *p)
			return
		}
	}
	// Not writeJSON: encoding/json would check and compact AppendJSON's output once more.
	b, err := ans.AppendJSON(make([]byte, 0, 512+len(rep.GetContent())))
	if err != nil {
		s.log.Error("encoding the answer", "err", err)
	}
	status := http.StatusOK
	if rep.GetStatusCode() == http.StatusAccepted && msgkind.Of(req.GetKind()).Payload != msgkind.HTTPBody {
		// The request waits, or is queued behind one that does. (A webhook's status, 202 or any
		// other, is in the answer's data.)
		status = http.StatusAccepted
	}
	writeJSONBody(w, status, b, err)
}

// answerJSON is the content of rep when it is a message's reply as the answer shows it
// (history.ReplyContentType), which the answer takes as it is instead of decoding and encoding
// it again; nil for any other reply (an error, a webhook's, or one from a host that sends the
// stored message), which messageAnswer decodes.
func answerJSON(req *agentbusv1.Request, rep *agentbusv1.Reply) json.RawMessage {
	if rep.GetError() != "" || rep.GetContentType() != history.ReplyContentType ||
		msgkind.Of(req.GetKind()).Payload == msgkind.HTTPBody || !json.Valid(rep.GetContent()) {
		return nil
	}
	return rep.GetContent()
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
func (s *Server) messageAnswer(req *agentbusv1.Request, ids history.IDs, rep *agentbusv1.Reply) (*history.SyncAnswer, *problem.Problem) {
	status := int(rep.GetStatusCode())
	if rep.GetError() != "" {
		p := hostProblem(rep)
		return nil, &p
	}
	ans := &history.SyncAnswer{IDs: ids}
	switch k := msgkind.Of(req.GetKind()); {
	case k.Payload == msgkind.HTTPBody:
		content := any(string(rep.GetContent()))
		if !utf8.Valid(rep.GetContent()) {
			content = map[string]any{"base64": rep.GetContent()}
		}
		data, _ := json.Marshal(map[string]any{"statusCode": status, "contentType": rep.GetContentType(), "content": content})
		ans.Response = &history.Reply{Data: data, MessageType: int(k.History), CreatedAt: timefmt.Format(time.Now()),
			Scope: req.GetScope(), Hint: req.GetHint()}
	case len(rep.GetContent()) > 0:
		var m history.Reply
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
