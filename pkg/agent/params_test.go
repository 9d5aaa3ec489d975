package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// An Agent2Agent call never passes an ingress: the callee's host checks its parameters against
// the method's schema before the handler runs. The caller gets a CallError that wraps
// ErrCallParams and says where they fail; the callee's thread keeps nothing of the call.
func TestCallParamsCheckedAgainstSchema(t *testing.T) {
	type outcome struct {
		Params  bool   `json:"params"`
		Status  int    `json:"status"`
		Slug    string `json:"slug"`
		Message string `json:"message"`
		Sum     any    `json:"sum"`
	}
	a := agent.New("Caller")
	agent.Method(a, "sum", func(ctx context.Context, in struct {
		Params json.RawMessage `json:"params"`
	}) (outcome, error) {
		var got map[string]any
		err := agent.MessageFrom(ctx).Instance().Call(ctx, agent.Peer{Agent: echo.Name, Activation: "callee"}, "sum", in.Params, &got)
		var ce *agent.CallError
		if errors.As(err, &ce) {
			return outcome{Params: errors.Is(err, agent.ErrCallParams), Status: ce.Status, Slug: ce.Slug, Message: ce.Message}, nil
		}
		return outcome{Sum: got["sum"]}, err
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a, echo.New()}})

	status, body := sendData(t, s, "Caller", "c", "ada", "sum", map[string]any{"params": map[string]any{"values": "1,2"}})
	require.Equal(t, http.StatusOK, status, "%s", body)
	var rep struct {
		Response struct {
			Data outcome `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(body, &rep))
	assert.Equal(t, outcome{Params: true, Status: http.StatusBadRequest, Slug: "invalid-method-parameters",
		Message: "the parameters of sum do not match its schema: at /values: got string, want array"}, rep.Response.Data)
	assert.Empty(t, threadAt(t, s, echo.Name, "callee", "agent:caller"), "nothing is stored of a call that did not run")

	status, body = sendData(t, s, "Caller", "c", "ada", "sum", map[string]any{"params": map[string]any{"values": []int{1, 2}}})
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NoError(t, json.Unmarshal(body, &rep))
	assert.EqualValues(t, 3, rep.Response.Data.Sum)
	assert.Len(t, threadAt(t, s, echo.Name, "callee", "agent:caller"), 2, "the valid call and its answer")
}

// A Data method registered with DataFunc and a Schema is checked as a typed Method is: the
// handler never sees parameters that do not match.
func TestDataFuncSchemaChecked(t *testing.T) {
	var ran atomic.Int32
	a := agent.New("Strict")
	a.DataFunc("greet", func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		ran.Add(1)
		return agent.Answer(map[string]string{"hello": string(m.Data)}), nil
	}, agent.Schema(json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","minLength":1}},"required":["name"],"additionalProperties":false}`)))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a, echo.New()}})

	for _, tc := range []struct {
		data   any
		detail string
	}{
		{map[string]any{"name": ""}, `at /name: minLength: got 0, want 1`},
		{map[string]any{"name": "ada", "age": 3}, `additional properties 'age' not allowed`},
	} {
		status, body := sendData(t, s, "Strict", "s", "ada", "greet", tc.data)
		assert.Equal(t, http.StatusBadRequest, status, "%s", body)
		assert.Contains(t, string(body), `"detail":"the parameters of greet do not match its schema: `+tc.detail+`"`)
	}
	assert.Zero(t, ran.Load(), "the handler did not run")
	status, body := sendData(t, s, "Strict", "s", "ada", "greet", map[string]any{"name": "ada"})
	assert.Equal(t, http.StatusOK, status, "%s", body)
	assert.EqualValues(t, 1, ran.Load())
}

// A schema that is not a valid JSON Schema cannot check calls: registering it panics, as a bad
// pattern does for http.ServeMux.
func TestDataPanicsOnInvalidSchema(t *testing.T) {
	a := agent.New("Broken")
	assert.PanicsWithValue(t, `agent Broken: data method "m": the schema is not a valid JSON Schema: at /properties/a/type: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'; at /properties/a/type: got string, want array`, func() {
		a.DataFunc("m", func(context.Context, *agent.Message) (agent.Reply, error) { return agent.NoReply, nil },
			agent.Schema(json.RawMessage(`{"type":"object","properties":{"a":{"type":"text"}}}`)))
	})
}

// A LazySchema is compiled when the method is first called, not by Data: a valid one checks the
// calls as Schema's does; one that does not compile does not panic, and leaves the calls
// unchecked.
func TestLazySchema(t *testing.T) {
	var ran atomic.Int32
	a := agent.New("Registered")
	handler := func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		ran.Add(1)
		return agent.Answer(map[string]string{"got": string(m.Data)}), nil
	}
	a.DataFunc("strict", handler, agent.LazySchema(json.RawMessage(`{"type":"object","required":["name"]}`)))
	a.DataFunc("broken", handler, agent.LazySchema(json.RawMessage(`{"type":"object","properties":{"a":{"type":"text"}}}`)))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a, echo.New()}})

	status, body := sendData(t, s, "Registered", "s", "ada", "strict", map[string]any{})
	assert.Equal(t, http.StatusBadRequest, status, "%s", body)
	assert.Contains(t, string(body), `"detail":"the parameters of strict do not match its schema: missing property 'name'"`)
	assert.Zero(t, ran.Load())
	status, body = sendData(t, s, "Registered", "s", "ada", "strict", map[string]any{"name": "ada"})
	assert.Equal(t, http.StatusOK, status, "%s", body)
	for range 2 {
		status, body = sendData(t, s, "Registered", "s", "ada", "broken", map[string]any{"a": 1})
		assert.Equal(t, http.StatusOK, status, "%s", body)
	}
	assert.EqualValues(t, 3, ran.Load())
}
