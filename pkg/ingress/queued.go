package ingress

import (
	"context"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/inspect"
)

// queuedRequests lists the requests the hosts hold for the instance, in each conversation's
// order, as the queue route reads them.
func (s *Server) queuedRequests(ctx context.Context, tenant string, wf ident.Workflow) ([]inspect.Waiting, error) {
	view, err := s.inspector().Instance(ctx, tenant, wf.ID())
	if err != nil {
		return nil, err
	}
	out := []inspect.Waiting{}
	for _, c := range view.Conversations {
		for _, r := range c.Requests {
			reason := r.State
			if r.Reason != "" {
				reason += ": " + r.Reason
			}
			out = append(out, inspect.Waiting{RequestID: r.RequestID, ParticipantID: c.ParticipantID, Type: r.Type, Method: r.Method, Reason: reason})
		}
	}
	return out, nil
}
