package ingress

import (
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/problem"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// webhookParticipant is the participant of a webhook call that names none, so that webhooks to
// one instance are handled one at a time, in arrival order.
const webhookParticipant = "webhook"

// webhook serves POST /api/user/webhooks/{workflow}/{method}?apikey=…[&tenantId=…][&name=value…]
// (docs/interface.md#43-webhook): the caller receives the handler's own status, content and content type.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	c, ok := s.startUserCall(w, r, webhookAccess)
	if !ok {
		return
	}
	requestID, keep, query, tenant := c.requestID, c.keep, c.query, c.tenant
	method := r.PathValue("method")
	contentType := r.Header.Get("Content-Type")
	wf, participant, p := resolveTarget(r.PathValue("workflow"), query.Get("participantId"), tenant, webhookParticipant)
	if p == nil && !utf8.ValidString(contentType) {
		// The handler reads it as text; the other headers travel as bytes.
		p = problem.InvalidHeader.New("the Content-Type header is not valid UTF-8")
	}
	if p == nil {
		p = s.checkAgent(r, wf, agentbusv1.Kind_KIND_WEBHOOK, method, keep)
	}
	var body []byte
	if p == nil {
		body, p = s.readBody(w, r, s.cfg.MaxBodyBytes)
	}
	if p != nil {
		p.RequestID = requestID
		problem.Write(w, *p)
		return
	}

	params := webhookParams(query)
	req := &agentbusv1.Request{
		RequestId:      requestID,
		TenantId:       tenant,
		WorkflowId:     wf.ID(),
		AgentName:      wf.Agent,
		WorkflowType:   wf.WorkflowType,
		ActivationName: wf.Activation,
		ParticipantId:  participant,
		Kind:           agentbusv1.Kind_KIND_WEBHOOK,
		Method:         method,
		Params:         params,
		Body:           body,
		Headers:        headerBlock(r.Header),
		ContentType:    contentType,
		KeepResult:     keep,
	}
	rep, err := s.call(r.Context(), c.caller, req, s.cfg.WebhookTimeout)
	if err != nil {
		s.writeCallError(w, r, req, err)
		return
	}
	s.writeReply(w, rep)
}

// webhookParams are the parameters a webhook handler receives (docs/webhooks.md): every query parameter
// but apikey, and but tenantId when given; a repeated parameter's first value.
func webhookParams(query url.Values) map[string]string {
	params := make(map[string]string, len(query))
	for name, values := range query {
		if name == "apikey" || name == "tenantId" {
			continue
		}
		params[name] = values[0]
	}
	return params
}

// headerBlock passes the caller's headers to the handler, less credentials, as the envelope
// carries them (bus.AppendHeader).
func headerBlock(h http.Header) []byte {
	size := 0
	for name, values := range h {
		size += len(name) + 3
		for _, v := range values {
			size += len(v) + 2
		}
	}
	block := make([]byte, 0, size)
	for name, values := range h {
		switch name {
		case "Authorization", "Cookie", "Proxy-Authorization":
			continue
		}
		block = bus.AppendHeader(block, name, strings.Join(values, ", ")) // one value: no copy
	}
	return block
}
