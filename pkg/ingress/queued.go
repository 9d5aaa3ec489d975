package ingress

import (
	"context"

	"github.com/agentbus/agentbus/pkg/ident"
)

// queuedRequest is a request waiting for a workflow instance, and why it waits.
type queuedRequest struct {
	RequestID     string `json:"requestId"`
	ParticipantID string `json:"participantId"`
	Type          string `json:"type"`
	Method        string `json:"method,omitempty"`
	// Reason says why it waits (behind another request of its conversation, for a host, ...).
	Reason string `json:"reason"`
}

// queuedRequests lists the requests waiting in the inbox for the instance, and why they wait.
// It is the place the inspector's queue view goes; it lists nothing yet.
func (s *Server) queuedRequests(_ context.Context, _ string, _ ident.Workflow) ([]queuedRequest, error) {
	return []queuedRequest{}, nil
}
