package ingress

import (
	"context"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// checkTarget refuses at once what no host could handle: an agent, workflow type or method no
// agent registered (404), or an agent no live host runs (503). It returns nil when the request
// may go on. A request whose caller chose its requestId (keep) and finds no live host is held
// while one may come back (awaitLive) before it is refused.
func (s *Server) checkTarget(ctx context.Context, wf ident.Workflow, kind agentbusv1.Kind, method string, keep bool) *problem.Problem {
	agent, ok := s.dir.Agent(wf.Agent)
	if !ok || !agent.VisibleTo(wf.Tenant) {
		return problem.UnknownAgent.New("no agent named " + subject.Quote(wf.Agent) + " is registered")
	}
	if !agent.HasWorkflowType(wf.WorkflowType) {
		return problem.UnknownWorkflowType.New("agent " + subject.Quote(wf.Agent) + " has no workflow type " + subject.Quote(wf.WorkflowType))
	}
	switch kind {
	case agentbusv1.Kind_KIND_WEBHOOK:
		if !agent.HasWebhook(method) {
			return problem.UnknownMethod.New("agent " + subject.Quote(wf.Agent) + " has no webhook method " + subject.Quote(method))
		}
	case agentbusv1.Kind_KIND_DATA:
		if !agent.HasDataMethod(method) {
			return problem.UnknownMethod.New("agent " + subject.Quote(wf.Agent) + " has no data method " + subject.Quote(method))
		}
	case agentbusv1.Kind_KIND_CHAT:
		if !agent.Chat {
			return problem.UnknownMethod.New("agent " + subject.Quote(wf.Agent) + " does not take chat messages")
		}
	case agentbusv1.Kind_KIND_FILE:
		if !agent.File {
			return problem.UnknownMethod.New("agent " + subject.Quote(wf.Agent) + " does not take files")
		}
	}
	if !s.dir.Live(wf.Agent) && (!keep || !s.awaitLive(ctx, wf.Agent)) {
		return problem.NoHost.New("no workflow host running agent " + subject.Quote(wf.Agent) + " is alive; try again later")
	}
	return nil
}

// noHostHold is how long a request with a caller-chosen requestId waits for a live host of its
// agent before it is refused with no-host: as long as a NATS cluster may take to elect the
// hosts bucket's leader, while the hosts' heartbeats do not reach the ingress (the ingress
// also holds publishes that long, publishTimeout). A host that is really gone is then still
// reported, only later.
const noHostHold = publishTimeout

// awaitLive waits up to noHostHold, or until ctx ends, for a live host of the agent, and
// reports whether one came.
func (s *Server) awaitLive(ctx context.Context, agent string) bool {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	giveUp := time.Now().Add(noHostHold)
	for time.Now().Before(giveUp) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if s.dir.Live(agent) {
			return true
		}
	}
	return false
}

// resolveTarget resolves a call's workflow reference within tenant and reads its participant,
// def when the call names none: the checks every call addressing an instance by reference makes.
func resolveTarget(ref, participantParam, tenant, def string) (ident.Workflow, string, *problem.Problem) {
	wf, err := ident.Resolve(ref, tenant)
	if err != nil {
		return ident.Workflow{}, "", problem.InvalidWorkflow.New(err.Error())
	}
	if wf.Tenant != tenant {
		return ident.Workflow{}, "", problem.Forbidden.New("the workflow belongs to another tenant")
	}
	participant, err := ident.SenderParticipant(participantParam)
	if err != nil {
		return ident.Workflow{}, "", problem.InvalidParticipant.New(err.Error())
	}
	if participant == "" {
		participant = def
	}
	return wf, participant, nil
}

// readQuery parses r's query string. Every name and value must be valid UTF-8: they reach
// handlers and the bus as text, which the bus's encoding refuses otherwise, so such a request is
// refused here, naming the parameter, before anything is published. Each parameter the route
// takes (its OpenAPI operation's) must also pass its rule (params.go); the others, a webhook's
// own parameters, are the handler's.
func readQuery(r *http.Request) (url.Values, *problem.Problem) {
	bad := func(detail string) (url.Values, *problem.Problem) {
		return nil, problem.InvalidQuery.New(detail)
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return bad("the query string is not valid URL encoding")
	}
	for name, values := range query {
		if !utf8.ValidString(name) {
			return bad("the query parameter name " + subject.Quote(name) + " is not valid UTF-8")
		}
		for _, v := range values {
			if !utf8.ValidString(v) {
				return bad("the query parameter " + subject.Quote(name) + " is not valid UTF-8")
			}
		}
	}
	for _, name := range paramsOf(r.Method, r.Pattern).query {
		for _, v := range query[name] {
			if p := checkParam("query", name, r.Pattern, v); p != nil {
				return nil, p
			}
		}
	}
	return query, nil
}
