package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Peer names another workflow instance of the same tenant, the callee of Tell and Call
// (the interface's Agent2Agent scenario).
type Peer struct {
	// Agent is the callee's agent name.
	Agent string
	// WorkflowType is its workflow type; empty means "Supervisor Workflow".
	WorkflowType string
	// Activation is the instance's activation name; empty means "default".
	Activation string
	// WorkflowID names the instance instead, as {tenantId}:{agent}:{workflowType}:{activation}.
	// Its tenant must be the caller's.
	WorkflowID string
}

// Letter is what Tell sends: a Data message to Method with Data as its parameters, or, without
// a Method, a Chat message with Text.
type Letter struct {
	Method string
	Text   string
	Data   any
	Scope  string
	Hint   string
}

// Agent2Agent errors. A Call's error wraps one of them; errors.Is tells them apart.
var (
	// ErrPeerNotFound: no such agent, workflow type or Data method, or the agent does not serve
	// the tenant.
	ErrPeerNotFound = errors.New("agent: no such agent or method")
	// ErrCallTimeout: the callee did not answer before the deadline. The call may still run.
	ErrCallTimeout = errors.New("agent: the call timed out")
	// ErrCallFailed: the callee's handler failed; CallError holds its status and message.
	ErrCallFailed = errors.New("agent: the called handler failed")
	// ErrCallParams: the parameters do not match the schema of the callee's method, which did
	// not run; CallError's message says where they fail.
	ErrCallParams = errors.New("agent: the call's parameters do not match the method's schema")
	// ErrCallDeadLettered: the callee failed on every attempt and kept the call as a dead letter.
	ErrCallDeadLettered = errors.New("agent: the call was dead-lettered")
	// ErrCallWaits: the called request waits for an event (Wait), or is queued behind a request
	// of its conversation that does; its answer goes to the callee's thread when it comes.
	// CallError's message is the callee's 202 answer.
	ErrCallWaits = errors.New("agent: the called request waits")
	// ErrCallCycle: the callee's instance is already waiting in the chain of calls that led
	// here, directly or through other agents: the call could never be answered.
	ErrCallCycle = errors.New("agent: call cycle")
	// ErrCallDepth: the chain of calls that led here is MaxCallDepth long already.
	ErrCallDepth = errors.New("agent: call chain too deep")
	// ErrOtherTenant: the peer belongs to another tenant; agents reach their own tenant only.
	ErrOtherTenant = errors.New("agent: the peer belongs to another tenant")
)

// MaxCallDepth bounds a chain of Agent2Agent calls: a handler called through MaxCallDepth
// calls may not call further.
const MaxCallDepth = 8

// DefaultCallTimeout is how long Call waits when ctx has no earlier deadline.
const DefaultCallTimeout = 30 * time.Second

// CallError is a Call's failure as the callee reported it.
type CallError struct {
	// Status is the callee's HTTP-like status (404, 409, 500, …); Slug names the problem type.
	Status int
	Slug   string
	// Message is the client-safe message of the failure.
	Message string
	kind    error
}

// callError is a failed call of problem type t; kind is the sentinel errors.Is finds.
func callError(t problem.Type, kind error, message string) *CallError {
	return &CallError{Status: t.Status, Slug: t.Slug, Message: message, kind: kind}
}

func (e *CallError) Error() string {
	return fmt.Sprintf("%v: %d %s: %s", e.kind, e.Status, e.Slug, e.Message)
}

// Unwrap returns the sentinel the failure is (ErrPeerNotFound, ErrCallFailed, …).
func (e *CallError) Unwrap() error { return e.kind }

// CallerPrefix begins the participant id a callee sees as the sender of an Agent2Agent message:
// "agent:" and the calling agent's name, lowercased. Clients may not send as such a participant.
const CallerPrefix = ident.AgentParticipantPrefix

// Tell sends a Chat or Data message to another instance of the tenant (Agent2Agent) without
// waiting for its handling; it returns once the message is durable. The callee's conversation
// is the one with participant "agent:{caller agent}". A handler run again that tells the same
// letters in the same order tells each once.
func (i *Instance) Tell(ctx context.Context, to Peer, l Letter) error {
	fx := i.fx
	if fx == nil {
		return errors.New("agent: Tell needs a running handler")
	}
	req, err := fx.peerRequest(to, fx.next("tell"), l.Method)
	if err != nil {
		return err
	}
	if req.Data, err = encodeData(l.Data); err != nil {
		return err
	}
	req.Scope, req.Hint = l.Scope, l.Hint
	if l.Method == "" {
		req.Kind, req.Text = agentbusv1.Kind_KIND_CHAT, l.Text
	}
	return fx.publish(ctx, req)
}

// Call calls a Data method of another instance of the tenant (Agent2Agent) and waits for its
// reply, at most until ctx's deadline or DefaultCallTimeout. The reply's data is decoded into
// out (when not nil). Failures wrap ErrPeerNotFound, ErrCallParams, ErrCallTimeout,
// ErrCallFailed, ErrCallDeadLettered, ErrCallWaits, ErrCallCycle or ErrCallDepth.
//
// A handler run again after a crash or a retry that makes the same calls in the same order
// reaches each callee with the same request id: the callee runs once, and the caller gets its
// first result.
func (i *Instance) Call(ctx context.Context, to Peer, method string, params any, out any) error {
	fx := i.fx
	if fx == nil {
		return errors.New("agent: Call needs a running handler")
	}
	if method == "" {
		return fmt.Errorf("%w: Call needs a method", ErrPeerNotFound)
	}
	req, err := fx.peerRequest(to, fx.next("call"), method)
	if err != nil {
		return err
	}
	if req.Data, err = encodeData(params); err != nil {
		return err
	}
	req.KeepResult = true
	req.Fingerprint = bus.Fingerprint(req)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCallTimeout)
		defer cancel()
	}
	done := fx.h.calling(heldKey{fx.agent, fx.seq}, req)
	rep, err := fx.h.call(ctx, req)
	done()
	if err != nil {
		return err
	}
	return decodeCallReply(rep, out)
}

// peerRequest is a Data request (Kind and Method set) from the handler's instance to the peer,
// checked against the tenant's agents and the chain of calls that led here.
func (fx *effects) peerRequest(to Peer, id, method string) (*agentbusv1.Request, error) {
	from := fx.req
	wf, err := to.workflow(from.GetTenantId())
	if err != nil {
		return nil, err
	}
	if err := fx.h.checkPeer(wf, method); err != nil {
		return nil, err
	}
	chain := append(slices.Clone(from.GetCallChain()), from.GetWorkflowId())
	switch {
	case slices.Contains(chain, wf.ID()):
		return nil, callError(problem.CallCycle, ErrCallCycle, fmt.Sprintf("%s is already waiting in this chain of calls", wf.ID()))
	case len(chain) > MaxCallDepth:
		return nil, callError(problem.CallDepth, ErrCallDepth, fmt.Sprintf("a chain of calls is at most %d deep", MaxCallDepth))
	}
	return &agentbusv1.Request{
		RequestId: id, TenantId: wf.Tenant, WorkflowId: wf.ID(), AgentName: wf.Agent, WorkflowType: wf.WorkflowType,
		ActivationName: wf.Activation, ParticipantId: strings.ToLower(CallerPrefix + from.GetAgentName()),
		Kind: agentbusv1.Kind_KIND_DATA, Method: method, CallChain: chain, CreatedAtMs: time.Now().UnixMilli(),
	}, nil
}

// workflow is the peer's workflow instance, which must be of the tenant.
func (to Peer) workflow(tenant string) (ident.Workflow, error) {
	wf := ident.Workflow{Tenant: tenant, Agent: to.Agent, WorkflowType: to.WorkflowType, Activation: to.Activation}
	if to.WorkflowID != "" {
		parsed, err := ident.ParseWorkflowID(to.WorkflowID)
		if err != nil {
			return wf, callError(problem.InvalidWorkflowID, ErrPeerNotFound, err.Error())
		}
		if parsed.Tenant != tenant {
			return wf, callError(problem.OtherTenant, ErrOtherTenant, "an agent reaches the instances of its own tenant only")
		}
		wf = parsed
	}
	if wf.WorkflowType == "" {
		wf.WorkflowType = ident.DefaultWorkflowType
	}
	if wf.Activation == "" {
		wf.Activation = ident.DefaultActivation
	}
	for _, name := range []string{wf.Agent, wf.WorkflowType, wf.Activation} {
		if err := ident.ValidName(name); err != nil {
			return wf, callError(problem.InvalidPeer, ErrPeerNotFound, fmt.Sprintf("%s %v", subject.Quote(name), err))
		}
	}
	return wf, nil
}

// checkPeer refuses a peer the tenant cannot reach: an agent no host registered, one restricted
// to other tenants, a workflow type or Data method it does not have.
func (h *Host) checkPeer(wf ident.Workflow, method string) error {
	reg, ok := h.dir.Agent(wf.Agent)
	if !ok || !reg.VisibleTo(wf.Tenant) || !slices.Contains(reg.WorkflowTypes, wf.WorkflowType) {
		return callError(problem.UnknownAgent, ErrPeerNotFound, fmt.Sprintf("no agent %s with workflow type %s", subject.Quote(wf.Agent), subject.Quote(wf.WorkflowType)))
	}
	if method != "" && !slices.Contains(reg.DataMethods, strings.ToLower(method)) {
		return callError(problem.UnknownMethod, ErrPeerNotFound, fmt.Sprintf("agent %s has no Data method %s", subject.Quote(wf.Agent), subject.Quote(method)))
	}
	return nil
}

// call publishes a call's request and waits for its reply. A request id the inbox saw before (a
// handler run again) is answered from the result the first run kept.
func (h *Host) call(ctx context.Context, req *agentbusv1.Request) (*agentbusv1.Reply, error) {
	w := h.replies.Wait()
	defer w.Done()
	if h.dir.AllLiveHave(req.GetAgentName(), registry.FeatureReplyTo) {
		req.ReplyTo = w.Subject
	}
	msg, err := bus.DedupedRequest(req)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if req.ReplyTo == "" {
		msg.Header.Set(subject.HeaderReplyTo, w.Subject)
	}
	if err := w.Send(msg); err != nil {
		return nil, Retryable(fmt.Errorf("publishing a call: %w", err))
	}
	timeout := time.Until(deadline(ctx))
	rep, err := w.Await(ctx, min(timeout, 10*time.Second), timeout)
	if errors.Is(err, bus.ErrDuplicate) {
		rep, err = bus.AwaitResult(ctx, h.res.Results, req.GetTenantId(), req.GetRequestId())
	}
	switch {
	case err == nil:
	case errors.Is(err, bus.ErrNotAccepted):
		return nil, Retryable(fmt.Errorf("publishing a call: %w", err))
	default:
		return nil, callError(problem.CallTimeout, ErrCallTimeout, fmt.Sprintf("%s did not answer %s in time; the call may still run", req.GetAgentName(), req.GetMethod()))
	}
	if ref := rep.GetContentRef(); ref != nil {
		if rep.Content, err = h.claims.Get(ctx, ref); err != nil {
			return nil, fmt.Errorf("reading a call's large reply: %w", err)
		}
	}
	return rep, nil
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// decodeCallReply turns a callee's reply into Call's result: the reply's data decoded into out,
// or the failure it reports.
func decodeCallReply(rep *agentbusv1.Reply, out any) error {
	if slug := rep.GetError(); slug != "" {
		e := &CallError{Status: int(rep.GetStatusCode()), Slug: slug, Message: string(rep.GetContent()), kind: ErrCallFailed}
		switch slug {
		case problem.UnknownAgent.Slug, problem.UnknownMethod.Slug:
			e.kind = ErrPeerNotFound
		case problem.DeadLettered.Slug:
			e.kind = ErrCallDeadLettered
		case problem.InvalidMethodParameters.Slug:
			e.kind = ErrCallParams
		}
		return e
	}
	if rep.GetStatusCode() == http.StatusAccepted {
		return &CallError{Status: http.StatusAccepted, Message: string(rep.GetContent()), kind: ErrCallWaits}
	}
	var stored struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(rep.GetContent(), &stored); err != nil {
		return fmt.Errorf("agent: decoding a call's reply: %w", err)
	}
	if data := stored.Data; out != nil && len(data) > 0 && string(data) != "null" {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("agent: decoding a call's result: %w", err)
		}
	}
	return nil
}
