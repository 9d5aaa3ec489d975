package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// mcpStack runs Echo, which every tenant may call, and Vault, which only tenant "default" may.
func mcpStack(t *testing.T) *stacktest.Stack {
	t.Helper()
	vault := agent.New("Vault", agent.Tenants("default"))
	agent.Method(vault, "secret", func(context.Context, struct{}) (map[string]string, error) {
		return map[string]string{"secret": "42"}, nil
	})
	return stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(), vault}})
}

// bearerTransport adds an API key to every request of an MCP client.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects the official Go SDK's client to the stack's MCP endpoint with key.
func mcpSession(t *testing.T, ctx context.Context, st *stacktest.Stack, key string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agentbus-test", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   st.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{key}},
	}, nil)
	require.NoError(t, err, "connecting")
	t.Cleanup(func() { _ = session.Close() })
	return session
}

func toolNames(tools []*mcp.Tool) []string {
	names := make([]string, 0, len(tools))
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestMCPSession runs a whole session through the Go SDK's client: initialize, tools/list shows
// Echo's Data methods with their parameter schemas and the addressing arguments, and tools/call
// runs Echo.sum through the bus, into the thread's history.
func TestMCPSession(t *testing.T) {
	t.Parallel()
	st := mcpStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session := mcpSession(t, ctx, st, st.Key)
	init := session.InitializeResult()
	require.NotNil(t, init)
	assert.Equal(t, "agentbus", init.ServerInfo.Name)
	assert.NotNil(t, init.Capabilities.Tools, "the server offers tools")

	list, err := session.ListTools(ctx, nil)
	require.NoError(t, err)
	names := toolNames(list.Tools)
	assert.Subset(t, names, []string{"Echo.sum", "Echo.echo", "Echo.count", "Vault.secret"})
	i := slices.Index(names, "Echo.sum")
	require.GreaterOrEqual(t, i, 0)
	schema, err := json.Marshal(list.Tools[i].InputSchema)
	require.NoError(t, err)
	var s struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(schema, &s))
	assert.Equal(t, "object", s.Type)
	assert.NotContains(t, list.Tools[i].Description, "Calls the Data method", "Echo describes sum")
	assert.Contains(t, s.Properties, "values", "the method's own parameters, derived from its Go type")
	assert.Contains(t, s.Properties, "workflow")
	assert.Contains(t, s.Properties, "participantId")

	res, err := session.CallTool(ctx, &mcp.CallToolParams{
		Name:      "Echo.sum",
		Arguments: map[string]any{"values": []float64{2, 3}, "workflow": "default:Echo:Supervisor Workflow:mcp-test"},
	})
	require.NoError(t, err)
	require.False(t, res.IsError, "tool error: %+v", res.Content)
	got, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	assert.JSONEq(t, `{"sum":5}`, string(got))
	require.NotEmpty(t, res.Content)
	text, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "content %T", res.Content[0])
	assert.JSONEq(t, `{"sum":5}`, text.Text)

	// The call went through the bus like converse Data: the thread holds it and its answer.
	status, _, body := doGet(t, st.URL, "/api/v1/admin/tenants/default/messaging/history",
		q("workflowId", "default:Echo:Supervisor Workflow:mcp-test", "participantId", "user"), bearerHeader(st.Key)...)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"sum"`)

	// A method's failure is a tool error the model can read.
	res, err = session.CallTool(ctx, &mcp.CallToolParams{Name: "Echo.fail", Arguments: map[string]any{"status": 409, "message": "no luck"}})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	require.NotEmpty(t, res.Content)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, "no luck")
}

// TestMCPTenantIsolation: a key of another tenant does not see, nor call, an agent restricted
// to tenant "default".
func TestMCPTenantIsolation(t *testing.T) {
	t.Parallel()
	st := mcpStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := mcpSession(t, ctx, st, st.OtherKey)
	list, err := other.ListTools(ctx, nil)
	require.NoError(t, err)
	names := toolNames(list.Tools)
	assert.Contains(t, names, "Echo.sum", "Echo serves every tenant")
	for _, n := range names {
		assert.False(t, strings.HasPrefix(n, "Vault."), "tenant other sees %s", n)
	}
	_, err = other.CallTool(ctx, &mcp.CallToolParams{Name: "Vault.secret", Arguments: map[string]any{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown tool")

	// Nor through converse: the agent does not exist for that tenant.
	status, _, body := doCT(t, http.MethodPost, st.URL+"/api/user/rest/converse?"+q("workflow", "Vault", "type", "Data", "text", "secret").Encode(), nil, bearerHeader(st.OtherKey)...)
	assert.Equal(t, http.StatusNotFound, status, "%s", body)

	// Nor in the agent list; the tenant that may call it sees it, but not who else may.
	status, _, body = doGet(t, st.URL, "/api/user/agents", nil, bearerHeader(st.OtherKey)...)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.NotContains(t, string(body), `"Vault"`)
	status, _, body = doGet(t, st.URL, "/api/user/agents", nil, bearerHeader(st.Key)...)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"Vault"`)
	assert.NotContains(t, string(body), `"tenants"`)

	own := mcpSession(t, ctx, st, st.Key)
	res, err := own.CallTool(ctx, &mcp.CallToolParams{Name: "Vault.secret", Arguments: map[string]any{}})
	require.NoError(t, err)
	got, _ := json.Marshal(res.StructuredContent)
	assert.JSONEq(t, `{"secret":"42"}`, string(got))
}

// mcpPost sends one JSON-RPC message to the MCP endpoint, as the specification's examples do.
func mcpPost(t *testing.T, st *stacktest.Stack, key, body string) (int, string, map[string]any) {
	t.Helper()
	hdr := append(bearerHeader(key), "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"MCP-Protocol-Version", "2025-06-18")
	status, ct, b := doCT(t, http.MethodPost, st.URL+"/mcp", strings.NewReader(body), hdr...)
	var out map[string]any
	if len(b) > 0 && strings.HasPrefix(ct, "application/") {
		require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	}
	return status, ct, out
}

// TestMCPWire checks the JSON-RPC messages on the wire against the specification's examples
// (2025-06-18: lifecycle, tools), and the errors: unknown tool, bad arguments, no key.
func TestMCPWire(t *testing.T) {
	t.Parallel()
	st := mcpStack(t)
	t.Run("lifecycle", func(t *testing.T) { mcpWireLifecycle(t, st) })
	t.Run("tool errors", func(t *testing.T) { mcpWireToolErrors(t, st) })
	t.Run("JSON-RPC errors", func(t *testing.T) { mcpWireRPCErrors(t, st) })
	t.Run("transport refusals", func(t *testing.T) { mcpWireRefusals(t, st) })
}

// mcpWireLifecycle: initialize, tools/list and tools/call, as the specification's examples.
func mcpWireLifecycle(t *testing.T, st *stacktest.Stack) {
	status, ct, out := mcpPost(t, st, st.Key, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ExampleClient","version":"1.0.0"}}}`)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "application/json", ct)
	assert.Equal(t, "2.0", out["jsonrpc"])
	assert.EqualValues(t, 1, out["id"])
	result, _ := out["result"].(map[string]any)
	require.NotNil(t, result, "%v", out)
	assert.Equal(t, "2025-06-18", result["protocolVersion"])
	assert.Contains(t, result["capabilities"], "tools")

	_, _, out = mcpPost(t, st, st.Key, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`)
	result, _ = out["result"].(map[string]any)
	require.NotNil(t, result, "%v", out)
	tools, _ := result["tools"].([]any)
	require.NotEmpty(t, tools)
	var sum map[string]any
	for _, tool := range tools {
		if m := tool.(map[string]any); m["name"] == "Echo.sum" {
			sum = m
		}
	}
	require.NotNil(t, sum, "Echo.sum listed")
	assert.NotEmpty(t, sum["description"])
	assert.Equal(t, "object", sum["inputSchema"].(map[string]any)["type"])

	_, _, out = mcpPost(t, st, st.Key, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Echo.sum","arguments":{"values":[2,3]}}}`)
	result, _ = out["result"].(map[string]any)
	require.NotNil(t, result, "%v", out)
	assert.Equal(t, map[string]any{"sum": 5.0}, result["structuredContent"])
	assert.NotEqual(t, true, result["isError"])
}

// mcpWireToolErrors: calls of a tool that does not exist or with bad arguments are JSON-RPC
// errors in a 200.
func mcpWireToolErrors(t *testing.T, st *stacktest.Stack) {
	for _, c := range []struct {
		name, body string
		code       float64
	}{
		{"unknown tool", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"Echo.nope","arguments":{}}}`, -32602},
		{"workflow of another agent", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"Echo.sum","arguments":{"workflow":"Vault"}}}`, -32602},
		{"workflow of another tenant", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"Echo.sum","arguments":{"workflow":"other:Echo:Supervisor Workflow:x"}}}`, -32602},
		{"participant not a string", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"Echo.sum","arguments":{"participantId":7}}}`, -32602},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, _, out := mcpPost(t, st, st.Key, c.body)
			require.Equal(t, http.StatusOK, status, "%v", out)
			e, _ := out["error"].(map[string]any)
			require.NotNil(t, e, "want a JSON-RPC error, got %v", out)
			assert.Equal(t, c.code, e["code"], "%v", e)
			assert.NotEmpty(t, e["message"])
		})
	}
}

// mcpWireRPCErrors: what JSON-RPC has an error for is a JSON-RPC error: a method the server does
// not have is the request's answer (-32601); a body that is not JSON (-32700) or not a JSON-RPC
// message (-32600) has no id to answer, so it is refused (400) with the error and id null, and so
// is a notification of an unknown method, which expects no answer.
func mcpWireRPCErrors(t *testing.T, st *stacktest.Stack) {
	status, ct, out := mcpPost(t, st, st.Key, `{"jsonrpc":"2.0","id":8,"method":"nope","params":{}}`)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "application/json", ct)
	assert.Equal(t, map[string]any{"jsonrpc": "2.0", "id": 8.0, "error": map[string]any{"code": -32601.0, "message": `method not found: "nope"`}}, out)
	for _, c := range []struct {
		name, body string
		code       float64
	}{
		{"not JSON", `not json`, -32700},
		{"cut short", `{"jsonrpc":"2.0","id":9,"method":"tools/list"`, -32700},
		{"not JSON-RPC", `{"id":10,"method":"tools/list"}`, -32600},
		{"a notification of an unknown method", `{"jsonrpc":"2.0","method":"notifications/nope"}`, -32601},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, ct, out := mcpPost(t, st, st.Key, c.body)
			assert.Equal(t, http.StatusBadRequest, status, "%v", out)
			assert.Equal(t, "application/json", ct)
			assert.Equal(t, "2.0", out["jsonrpc"])
			id, hasID := out["id"]
			assert.True(t, hasID && id == nil, "id null: %v", out)
			e, _ := out["error"].(map[string]any)
			require.NotNil(t, e, "want a JSON-RPC error, got %v", out)
			assert.Equal(t, c.code, e["code"], "%v", e)
			assert.NotEmpty(t, e["message"])
		})
	}
}

// mcpWireRefusals: what the transport refuses before JSON-RPC is a problem, as on every endpoint.
func mcpWireRefusals(t *testing.T, st *stacktest.Stack) {
	// A request without the Accept header the transport requires.
	status, ct, b := doCT(t, http.MethodPost, st.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":11,"method":"tools/list"}`),
		append(bearerHeader(st.Key), "Content-Type", "application/json")...)
	problemOf(t, status, ct, b, http.StatusBadRequest)

	// Without a key: 401 problem+json, before any JSON-RPC.
	status, ct, out := mcpPost(t, st, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Equal(t, "application/problem+json", ct)
	assert.EqualValues(t, http.StatusUnauthorized, out["status"])
}

// A Data method whose parameters are not a JSON object (here an int) is no tool on any path: MCP
// neither lists nor calls it, and the chat's model is not offered it (the offline model's rule
// then does not call it). It is still a Data method; every endpoint passes a Data call's
// parameters as an object, so without any it gets its zero value.
func TestMethodsWithoutObjectParametersAreNoTools(t *testing.T) {
	t.Parallel()
	a := agent.New("Mixed")
	agent.Method(a, "double", func(_ context.Context, n int) (int, error) { return 2 * n, nil })
	agent.Method(a, "sum", func(_ context.Context, in struct {
		Values []int `json:"values"`
	}) (int, error) {
		return in.Values[0] + in.Values[1], nil
	})
	a.Chat(agent.ChatWithTools(llm.Offline()))
	st := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	session := mcpSession(t, ctx, st, st.Key)
	list, err := session.ListTools(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"Mixed.sum"}, toolNames(list.Tools))
	_, err = session.CallTool(ctx, &mcp.CallToolParams{Name: "Mixed.double", Arguments: map[string]any{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown tool")

	assert.Equal(t, "You said: call double {}", chatText(t, st, "Mixed", "max", "call double {}"))
	assert.Equal(t, "sum returned 5", chatText(t, st, "Mixed", "max", `call sum {"values":[2,3]}`))

	status, _, b := converse(t, st, q("workflow", "Mixed", "type", "Data", "text", "double", "apikey", st.Key), "")
	assert.JSONEq(t, "0", string(answerOf(t, status, b).Response.Data), "%s", b)
}
