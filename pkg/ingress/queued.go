package ingress

import (
	"context"

	"github.com/agentbus/agentbus/pkg/ident"
)

// queuedRequest is a request a workflow host holds for an instance, and what it does or waits
// for; the queue route (hosts.go) tells more: ages, times, the requests not delivered yet.
type queuedRequest struct {
	RequestID     string `json:"requestId"`
	ParticipantID string `json:"participantId"`
	Type          string `json:"type"`
	Method        string `json:"method,omitempty"`
	// Reason is the request's state (running, queued, held) and, after a colon, why it waits
	// (docs/hosts-inspection.md).
	Reason string `json:"reason"`
}

// queuedRequests lists the requests the hosts hold for the instance, in each conversation's
// order, as the queue route reads them.
func (s *Server) queuedRequests(ctx context.Context, tenant string, wf ident.Workflow) ([]queuedRequest, error) {
	view, err := s.inspector().Instance(ctx, tenant, wf.ID())
	if err != nil {
		return nil, err
	}
	out := []queuedRequest{}
	for _, c := range view.Conversations {
		for _, r := range c.Requests {
			reason := r.State
			if r.Reason != "" {
				reason += ": " + r.Reason
			}
			out = append(out, queuedRequest{RequestID: r.RequestID, ParticipantID: c.ParticipantID, Type: r.Type, Method: r.Method, Reason: reason})
		}
	}
	return out, nil
}
