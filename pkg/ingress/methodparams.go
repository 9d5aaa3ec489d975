package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"

	"github.com/agentbus/agentbus/pkg/fairshare"
	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
)

// methodParams holds the schemas of Data methods' parameters, each compiled when its method is
// first called through this ingress (once for each registration of the method), so that a
// call's parameters are checked against the schema its method advertises before anything is
// published (send, converse, MCP). The workflow host checks them again before the handler runs,
// which also covers the calls that never pass an ingress (a chat model's tool calls, Agent2Agent
// calls, timers). Its zero value is ready.
type methodParams struct {
	mu sync.RWMutex
	// compiled keeps what the schemas compiled to within a budget of memory, the tenants (or
	// the agents several tenants share) holding the most giving way.
	compiled *jsonschema.Cache
	// m holds the schemas by agent and method name; n counts them.
	m map[string]map[string]methodSchema
	n int
}

// methodSchema is one method's schema as registered, compiled when first used.
type methodSchema struct {
	schema json.RawMessage
	lazy   *jsonschema.Lazy
}

// anyObject is the schema registered for a method without one of its own, which has nothing to
// check.
const anyObject = `{"type":"object"}`

// maxCompiledParams bounds the schemas known (their compiled forms are bounded by the cache's
// budget): registrations come and go (remote agents), and past it the agent with the most loses
// them rather than the map grow; each is compiled again when next called. One agent, not all: a
// tenant calling the many methods of its remote agents in turn (up to 256 each) makes its own
// schemas compiled again, not every agent's.
const maxCompiledParams = 4096

// check refuses a call of agent's Data method method whose parameters (JSON, possibly empty) do
// not match the method's registered schema. A registration without schemas, or whose schema
// does not compile, has nothing checked here.
func (c *methodParams) check(log *slog.Logger, a registry.Agent, method string, params []byte) *problem.Problem {
	m, ok := a.Method(method)
	if !ok || len(m.InputSchema) == 0 || string(m.InputSchema) == anyObject {
		return nil
	}
	err := c.schema(a, m).Validate(params)
	if ce, ok := errors.AsType[*jsonschema.CompileError](err); ok {
		// The host that registered it does not check its calls either (pkg/remote refuses such
		// schemas at registration; this one was stored before).
		log.Warn("a Data method's schema does not compile; its calls are not checked", "agent", a.Name, "method", m.Name, "err", ce.Err)
		return nil
	}
	if err != nil {
		return problem.InvalidMethodParameters.New(jsonschema.ParamsDetail(m.Name, err))
	}
	return nil
}

// schema is a's method m's schema, made anew when its registration is new.
func (c *methodParams) schema(a registry.Agent, m registry.Method) *jsonschema.Lazy {
	c.mu.RLock()
	got, ok := c.m[a.Name][m.Name]
	c.mu.RUnlock()
	if ok && bytes.Equal(got.schema, m.InputSchema) {
		return got.lazy
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got, ok := c.m[a.Name][m.Name]; ok && bytes.Equal(got.schema, m.InputSchema) {
		return got.lazy
	}
	if c.m == nil {
		c.m = make(map[string]map[string]methodSchema)
		c.compiled = jsonschema.NewCache(jsonschema.DefaultCacheBudget)
	}
	if _, ok := c.m[a.Name][m.Name]; !ok {
		if c.n >= maxCompiledParams {
			c.dropLargest()
		}
		if c.m[a.Name] == nil {
			c.m[a.Name] = make(map[string]methodSchema)
		}
		c.n++
	}
	l := c.compiled.Lazy(a.Owner(), m.InputSchema)
	c.m[a.Name][m.Name] = methodSchema{schema: m.InputSchema, lazy: l}
	return l
}

// dropLargest forgets the schemas of the agent with the most kept; c.mu is held.
func (c *methodParams) dropLargest() {
	c.n -= fairshare.DropMost(c.m)
}

// checkParams refuses a Data call of agent's method whose parameters (JSON, possibly empty) do
// not match the schema the method registered. It runs after checkTarget, which found both.
func (s *Server) checkParams(agent, method string, params []byte) *problem.Problem {
	a, ok := s.dir.Agent(agent)
	if !ok {
		return nil
	}
	return s.params.check(s.log, a, method, params)
}
