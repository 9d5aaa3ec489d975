// Package ident validates and builds the identifiers agentbus passes around: tenant ids,
// workflow ids and participant ids, following docs/identifiers.md.
//
// It knows nothing of the bus or of HTTP; callers turn its errors into responses.
package ident

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
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

const maxIDLen = 256

// ValidTenant reports whether id is a valid tenant id.
func ValidTenant(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

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

// ValidName checks one segment of a workflow id: non-empty, at most 256 bytes, valid UTF-8
// printable text without ':' (the separator) or control characters.
func ValidName(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > maxIDLen {
		return fmt.Errorf("is longer than %d bytes", maxIDLen)
	}
	for _, r := range s {
		if r == ':' {
			return errors.New("contains ':'")
		}
		if unicode.IsControl(r) || r == utf8.RuneError {
			return errors.New("contains a control or invalid character")
		}
	}
	return nil
}

// Participant normalises a participant id: trimmed and lowercased, since participants are
// compared case-insensitively. It returns an error for ids that are too long or not text.
func Participant(id string) (string, error) {
	id = strings.ToLower(strings.TrimSpace(id))
	if len(id) > maxIDLen {
		return "", fmt.Errorf("participantId is longer than %d bytes", maxIDLen)
	}
	for _, r := range id {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return "", errors.New("participantId contains a control or invalid character")
		}
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
