package ingress

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
)

// methodParams holds the compiled schemas of Data methods' parameters, each compiled once for
// each registration of its method, so that a call's parameters are checked against the schema
// its method advertises before anything is published (send, converse, MCP). The workflow host
// checks them again before the handler runs, which also covers the calls that never pass an
// ingress (a chat model's tool calls, Agent2Agent calls, timers). Its zero value is ready.
type methodParams struct {
	mu sync.RWMutex
	// m holds the compiled schemas by agent and method name; n counts them.
	m map[string]map[string]compiledParams
	n int
}

// compiledParams is one method's schema as registered and what it compiled to.
type compiledParams struct {
	schema json.RawMessage
	v      *jsonschema.Validator // nil: nothing to check, or a schema that does not compile
}

// anyObject is the schema registered for a method without one of its own, which has nothing to
// check.
const anyObject = `{"type":"object"}`

// maxCompiledParams bounds the schemas kept: registrations come and go (remote agents), and past
// it the agent with the most schemas kept loses them rather than the cache grow; each is compiled
// again when next called. One agent, not all: a tenant calling the many methods of its remote
// agents in turn (up to 256 each) makes its own schemas compiled again, not every agent's.
const maxCompiledParams = 4096

// check refuses a call of agent's Data method method whose parameters (JSON, possibly empty) do
// not match the method's registered schema. A registration without schemas, or whose schema
// does not compile, has nothing checked here.
func (c *methodParams) check(log *slog.Logger, a registry.Agent, method string, params []byte) *problem.Problem {
	m, ok := a.Method(method)
	if !ok || len(m.InputSchema) == 0 || string(m.InputSchema) == anyObject {
		return nil
	}
	if err := c.validator(log, a.Name, m).Validate(params); err != nil {
		return problem.InvalidMethodParameters.New(jsonschema.ParamsDetail(m.Name, err))
	}
	return nil
}

// validator is the compiled schema of a's method m, compiled now when its registration is new.
func (c *methodParams) validator(log *slog.Logger, agent string, m registry.Method) *jsonschema.Validator {
	c.mu.RLock()
	got, ok := c.m[agent][m.Name]
	c.mu.RUnlock()
	if ok && bytes.Equal(got.schema, m.InputSchema) {
		return got.v
	}
	v, err := jsonschema.Compile(m.InputSchema)
	if err != nil {
		// The host that registered it does not check its calls either (pkg/remote refuses such
		// schemas at registration; this one was stored before).
		log.Warn("a Data method's schema does not compile; its calls are not checked", "agent", agent, "method", m.Name, "err", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]map[string]compiledParams)
	}
	if _, ok := c.m[agent][m.Name]; !ok {
		if c.n >= maxCompiledParams {
			c.dropLargest()
		}
		if c.m[agent] == nil {
			c.m[agent] = make(map[string]compiledParams)
		}
		c.n++
	}
	c.m[agent][m.Name] = compiledParams{schema: m.InputSchema, v: v}
	return v
}

// dropLargest forgets the schemas of the agent with the most kept; c.mu is held.
func (c *methodParams) dropLargest() {
	largest := ""
	for a, ms := range c.m {
		if len(ms) > len(c.m[largest]) {
			largest = a
		}
	}
	c.n -= len(c.m[largest])
	delete(c.m, largest)
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
