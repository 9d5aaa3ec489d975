// Package ident validates and builds the identifiers agentbus passes around: tenant ids,
// workflow ids and participant ids, following docs/identifiers.md.
//
// The limits on length and characters are package subject's (subject.CheckTenant,
// subject.CheckName), which bounds every caller value that becomes part of a subject; ident adds
// the rules of each identifier's shape. It knows nothing of HTTP; callers turn its errors into
// responses.
package ident

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/subject"
)

// DefaultWorkflowType is the workflow type used when none is given.
const DefaultWorkflowType = "Supervisor Workflow"

// DefaultActivation is the activation addressed by a workflow type without an activation name.
const DefaultActivation = "default"

// Errors callers test for.
var (
	ErrInvalidTenant   = errors.New("tenant id must be 1-64 characters of A-Z, a-z, 0-9, _ and -")
	ErrInvalidWorkflow = errors.New("workflow must be {agent}, {agent}:{workflowType} or {tenantId}:{agent}:{workflowType}:{activation}")
)

// ValidTenant reports whether id is a valid tenant id (subject.CheckTenant).
func ValidTenant(id string) bool { return subject.CheckTenant("tenantId", id) == nil }

// Workflow identifies one workflow instance.
type Workflow struct {
	Tenant       string
	Agent        string
	WorkflowType string
	Activation   string
}

// ID is the workflow id {tenantId}:{agentName}:{workflowType}:{activationName}.
func (w Workflow) ID() string {
	return w.Tenant + ":" + w.Agent + ":" + w.WorkflowType + ":" + w.Activation
}

// TypeName is the workflow type {agentName}:{workflowType}.
func (w Workflow) TypeName() string { return w.Agent + ":" + w.WorkflowType }

// ParseWorkflowID parses a four-segment workflow id.
func ParseWorkflowID(id string) (Workflow, error) {
	parts := strings.Split(id, ":")
	if len(parts) != 4 {
		return Workflow{}, fmt.Errorf("%w: %d segments", ErrInvalidWorkflow, len(parts))
	}
	w := Workflow{Tenant: parts[0], Agent: parts[1], WorkflowType: parts[2], Activation: parts[3]}
	if !ValidTenant(w.Tenant) {
		return Workflow{}, ErrInvalidTenant
	}
	if err := w.validNames(); err != nil {
		return Workflow{}, err
	}
	return w, nil
}

// Resolve turns the workflow reference an endpoint was given into a workflow of the caller's
// tenant: a four-segment workflow id (its tenant segment is returned as is; the caller checks it
// against its own tenant), {agent}:{workflowType} (activation "default"), or a bare {agent}
// (workflow type "Supervisor Workflow", activation "default").
func Resolve(ref, tenant string) (Workflow, error) {
	parts := strings.Split(ref, ":")
	var w Workflow
	switch len(parts) {
	case 4:
		return ParseWorkflowID(ref)
	case 2:
		w = Workflow{Tenant: tenant, Agent: parts[0], WorkflowType: parts[1], Activation: DefaultActivation}
	case 1:
		w = Workflow{Tenant: tenant, Agent: parts[0], WorkflowType: DefaultWorkflowType, Activation: DefaultActivation}
	default:
		return Workflow{}, fmt.Errorf("%w: %d segments", ErrInvalidWorkflow, len(parts))
	}
	if err := w.validNames(); err != nil {
		return Workflow{}, err
	}
	return w, nil
}

func (w Workflow) validNames() error {
	for _, f := range []struct{ name, v string }{
		{"agent name", w.Agent}, {"workflow type", w.WorkflowType}, {"activation name", w.Activation},
	} {
		if err := ValidName(f.v); err != nil {
			return fmt.Errorf("%w: %s %v", ErrInvalidWorkflow, f.name, err)
		}
	}
	return nil
}

// ValidName checks one segment of a workflow id: a name (subject.CheckName: 1 to 256 bytes of
// valid UTF-8 without control characters) without ':' (the separator). The error reads after
// the segment's name ("is empty").
func ValidName(s string) error {
	if err := subject.CheckName("", s); err != nil {
		return err
	}
	if strings.IndexByte(s, ':') >= 0 {
		return errors.New("contains ':'")
	}
	return nil
}

// Participant normalises a participant id: trimmed and lowercased, since participants are
// compared case-insensitively. It returns an error for ids that are too long or not text.
func Participant(id string) (string, error) {
	id = strings.TrimSpace(id)
	// Checked before lowercasing, which turns invalid UTF-8 into U+FFFD.
	if err := subject.CheckText("participantId", id, subject.MaxNameBytes); err != nil {
		return "", err
	}
	// Lowercasing may lengthen it (İ is 2 bytes, i̇ 3).
	id = strings.ToLower(id)
	if err := subject.CheckText("participantId", id, subject.MaxNameBytes); err != nil {
		return "", err
	}
	return id, nil
}

// AgentParticipantPrefix begins the participant ids of the conversations in which agents call each
// other (Agent2Agent): "agent:" and the calling agent's name.
const AgentParticipantPrefix = "agent:"

// SenderParticipant is Participant for a participant id a client sends as: one that begins with
// AgentParticipantPrefix is refused, so that a callee can trust that such a sender is an agent.
func SenderParticipant(id string) (string, error) {
	p, err := Participant(id)
	if err == nil && strings.HasPrefix(p, AgentParticipantPrefix) {
		return "", ErrAgentParticipant
	}
	return p, err
}

// ErrAgentParticipant refuses a client's participant id that begins with AgentParticipantPrefix.
var ErrAgentParticipant = errors.New(`participantId may not begin with "agent:": those conversations belong to agents calling each other`)
