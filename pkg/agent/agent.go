// Package agent is the agentbus SDK: it is how an agent author writes handlers and runs them.
//
// An Agent has a name, the workflow types it runs, and handlers registered by method name, the
// way an http.ServeMux has handlers registered by pattern. A webhook handler receives the call's
// query parameters and raw body and returns the Response the HTTP caller gets:
//
//	a := agent.New("Greeter")
//	a.WebhookFunc("hello", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
//		return agent.Text(http.StatusOK, "hello "+r.Params["name"])
//	})
//
// Chat, Data and File messages (sent through the admin send endpoint, or converse) reach a
// Handler, which answers with a Reply: text, data, both, or nothing. Data methods are named and
// may be typed, decoding their parameters and encoding their result for the author:
//
//	agent.Method(a, "sum", func(ctx context.Context, in SumParams) (SumResult, error) { … })
//	a.ChatFunc(func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
//		return agent.Say("You said: " + m.Text), nil
//	})
//
// Every message in and out is kept in the conversation's history, which handlers read with
// Message.History. A handler chooses the status of a failure by returning an *Error.
//
// A chat can let a language model call the agent's own Data methods as tools. The methods are
// described with method options, their parameters' JSON Schema is derived from In (or given with
// Schema), and ChatWithTools runs the model, the calls it asks for and the rounds after them:
//
//	agent.Method(a, "sum", sum, agent.Describe("Adds numbers"))
//	a.Chat(agent.ChatWithTools(model, agent.SystemPrompt("…"), agent.MaxRounds(8)))
//
// Handlers also act on their own, through the Instance. Post stores a message in a thread of the
// instance (Agent2User: "your report is ready"); Schedule sets a durable timer whose message
// comes back to the instance once, after a delay, every interval or on a cron schedule
// (Message.Timer names it); Tell and Call reach another agent's instance of the same tenant
// (Agent2Agent), Call waiting for the callee's reply:
//
//	inst := m.Instance()
//	inst.Post(ctx, agent.Post{Text: "Your report is ready."})
//	inst.Schedule(ctx, agent.Timer{Name: "nudge", After: time.Hour, Method: "nudge"})
//	inst.Call(ctx, agent.Peer{Agent: "Billing"}, "invoice", params, &invoice)
//
// What a handler sends this way is part of its request's outcome: each post, timer, tell and call
// is numbered by its place among the request's, so a handler run again (a retry, a host that
// crashed) that makes them in the same order sends each once, and a repeated call gets the first
// result. Timers live in NATS JetStream, not in a host, and survive the restart of every process.
//
// A Host runs agents against NATS: it pulls requests from the agentbus inbox, keeps each workflow
// instance's record and state in JetStream, calls the handlers and publishes their replies. A
// program that imports this package and calls Host.Run is a workflow host; ingress needs no
// change to reach its agents.
//
// Handlers of one conversation (workflow instance and participant) are called one at a time, in
// arrival order; different conversations run concurrently, also on the same instance, in the
// host's handler slots (HostConfig.MaxConcurrent, or an agent's own: MaxConcurrent), which go to
// the tenants in turn when more requests wait than slots are free (HostConfig.Share). Delivery
// is at least once: a host that crashes after a handler ran but before the request was
// acknowledged runs it again elsewhere.
//
// The host runtime lives in this package, as http.Server lives beside http.Handler. A host calls
// handlers with an Instance and a Message whose workings (state written with compare-and-set,
// history cursors, streamed deltas, tool calls) are the runtime's; a runtime package of its own
// would need all of them exported, which would add more to what an author reads here than it
// took away. Of the runtime, an author sees Host, HostConfig, NewHost and DefaultHostID; the
// rest (partitions, dispatch, retries, metrics) is unexported.
package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/registry"
)

// Agent is a named set of handlers. Register handlers before the Host runs; an Agent is not
// safe for concurrent registration.
type Agent struct {
	name          string
	workflowTypes []string
	webhooks      map[string]WebhookHandler
	chat          Handler
	data          map[string]*dataMethod // by lowercased method name
	file          Handler
	onStart       func(ctx context.Context, inst *Instance) error
	tenants       []string // empty: every tenant
	idleAfter     time.Duration
	maxConcurrent int // handler slots of its own on each host; 0: the host's shared ones
	partitions    int // of its inbox; 0: the host's bus.Config.Partitions
}

// Option configures an Agent.
type Option func(*Agent)

// WorkflowTypes sets the workflow types the agent runs. The default is "Supervisor Workflow".
func WorkflowTypes(types ...string) Option {
	return func(a *Agent) { a.workflowTypes = slices.Clone(types) }
}

// OnStart sets a hook called once when a new run of an instance starts (update-with-start),
// before the handler of the message that started it. It may set the initial state.
func OnStart(fn func(ctx context.Context, inst *Instance) error) Option {
	return func(a *Agent) { a.onStart = fn }
}

// Tenants restricts the agent to the named tenants: callers of other tenants neither see it
// (in the agent list or the MCP tools) nor reach it (404, as for an agent that does not exist).
// By default every tenant may call an agent.
func Tenants(tenants ...string) Option {
	return func(a *Agent) { a.tenants = slices.Clone(tenants) }
}

// MaxConcurrent gives the agent n handler slots of its own on each host that runs it, in place of
// a share of the host's (HostConfig.MaxConcurrent): at most n of its requests run at once on a
// host, and when more may run, a slot that frees up goes to its tenants in turn (HostConfig.Share
// is asked with the agent's name). For an agent behind a limit of its own, such as a model
// provider's cap on concurrent calls: its slow requests then neither hold the slots of the host's
// other agents nor wait behind theirs. New panics when n is not positive.
func MaxConcurrent(n int) Option {
	return func(a *Agent) {
		if n < 1 {
			panic(fmt.Sprintf("agent %s: MaxConcurrent(%d): not positive", a.name, n))
		}
		a.maxConcurrent = n
	}
}

// Partitions sets the partition count of the agent's inbox, in place of the host's
// (bus.Config.Partitions, 16 by default). It bounds how many hosts share the agent's work, and
// each partition is a consumer the NATS servers keep and serve: an agent that one or two hosts
// serve needs few. An inbox keeps the count it was made with; a host starting alone gives an
// empty one its agent's count (docs/bus.md#partitions). New panics when n is not from 1 to 1024.
func Partitions(n int) Option {
	return func(a *Agent) {
		if n < 1 || n > 1024 {
			panic(fmt.Sprintf("agent %s: Partitions(%d): not from 1 to 1024", a.name, n))
		}
		a.partitions = n
	}
}

// partitionCount is the partition count the agent's inbox is made with under cfg.
func (a *Agent) partitionCount(cfg bus.Config) int {
	if a.partitions > 0 {
		return a.partitions
	}
	return cfg.PartitionCount()
}

// New returns an agent. It panics on an invalid name, as http.ServeMux panics on a bad pattern:
// both are programming errors.
func New(name string, opts ...Option) *Agent {
	if err := ident.ValidName(name); err != nil {
		panic(fmt.Sprintf("agent: name %q %v", name, err))
	}
	a := &Agent{name: name, workflowTypes: []string{ident.DefaultWorkflowType}, webhooks: make(map[string]WebhookHandler), data: make(map[string]*dataMethod)}
	for _, o := range opts {
		o(a)
	}
	for _, t := range a.workflowTypes {
		if err := ident.ValidName(t); err != nil {
			panic(fmt.Sprintf("agent %s: workflow type %q %v", name, t, err))
		}
	}
	for _, t := range a.tenants {
		if !ident.ValidTenant(t) {
			panic(fmt.Sprintf("agent %s: tenant %q is not a valid tenant id", name, t))
		}
	}
	return a
}

// Name returns the agent's name.
func (a *Agent) Name() string { return a.name }

// owner names whose the agent is, for the shares of the process's compiled schemas.
func (a *Agent) owner() string { return registry.Agent{Name: a.name, Tenants: a.tenants}.Owner() }

// servesTenant reports whether callers of the tenant may call the agent (see Tenants), by the
// rule the ingress applies to the agent's registration.
func (a *Agent) servesTenant(tenant string) bool {
	return registry.Agent{Tenants: a.tenants}.VisibleTo(tenant)
}

// Webhook registers the handler of a webhook method. Method names are matched exactly.
// It panics if the method is registered already or the name is empty.
func (a *Agent) Webhook(method string, h WebhookHandler) {
	if method == "" || h == nil {
		panic("agent: Webhook needs a method name and a handler")
	}
	if _, dup := a.webhooks[method]; dup {
		panic(fmt.Sprintf("agent %s: webhook %q registered twice", a.name, method))
	}
	a.webhooks[method] = h
}

// WebhookFunc registers a function as the handler of a webhook method.
func (a *Agent) WebhookFunc(method string, f func(ctx context.Context, r *WebhookRequest) Response) {
	a.Webhook(method, WebhookFunc(f))
}

func (a *Agent) registration() registry.Agent {
	reg := registry.Agent{Name: a.name, WorkflowTypes: slices.Clone(a.workflowTypes), Tenants: slices.Clone(a.tenants)}
	for m := range a.webhooks {
		reg.Webhooks = append(reg.Webhooks, m)
	}
	slices.Sort(reg.Webhooks)
	for m := range a.data {
		reg.DataMethods = append(reg.DataMethods, m)
	}
	slices.Sort(reg.DataMethods)
	for _, key := range reg.DataMethods {
		dm := a.data[key]
		reg.Methods = append(reg.Methods, registry.Method{Name: dm.name, Description: dm.description, InputSchema: dm.inputSchema()})
	}
	reg.Chat, reg.File = a.chat != nil, a.file != nil
	if a.idleAfter > 0 {
		reg.IdleAfterMs = max(a.idleAfter.Milliseconds(), 1)
	}
	return reg
}
