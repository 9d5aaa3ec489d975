package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// A Data call's parameters are checked against the schema its method advertises before anything
// is published. Echo's sum takes {"values":[numbers]}, values required (derived from its Go
// type): a call without them is refused on every path, and leaves nothing in the thread.

// missingValues is the detail of a sum call without values.
const missingValues = "the parameters of sum do not match its schema: missing property 'values'"

// paramsRefused checks a 400 invalid-method-parameters problem and returns its detail.
func paramsRefused(t *testing.T, status int, ct string, b []byte) string {
	t.Helper()
	p := problemOf(t, status, ct, b, http.StatusBadRequest)
	assert.Equal(t, "urn:agentbus:problem:invalid-method-parameters", p["type"], "%s", b)
	detail, _ := p["detail"].(string)
	return detail
}

// assertOnlyValidCall checks that the thread holds the valid call and its answer, nothing else:
// the refused calls were not stored as handled requests.
func assertOnlyValidCall(t *testing.T, s *stacktest.Stack, workflowID, participant, sum string) {
	t.Helper()
	msgs := threadOf(t, s, workflowID, participant, 10)
	require.Len(t, msgs, 2, "the valid call and its answer, nothing of the refused ones: %+v", msgs)
	assert.Equal(t, history.Out, msgs[0].Direction)
	assert.JSONEq(t, sum, string(msgs[0].Data))
	assert.Equal(t, history.In, msgs[1].Direction)
	assert.Equal(t, "sum", text(msgs[1]))
}

func TestSendChecksParamsAgainstSchema(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	body := func(data any) map[string]any {
		return map[string]any{"agentName": "Echo", "activationName": "params", "participantId": "ada", "type": "Data", "text": "sum", "data": data}
	}
	for _, tc := range []struct {
		name, query string
		data        any
		detail      string
	}{
		{"{} waiting", "wait=true", map[string]any{}, missingValues},
		{"no data waiting", "wait=true", nil, missingValues},
		{"{} not waiting: refused, not accepted", "", map[string]any{}, missingValues},
		{"a value of the wrong type", "wait=true", map[string]any{"values": "1,2"}, "the parameters of sum do not match its schema: at /values: got string, want array"},
		{"an item of the wrong type", "wait=true", map[string]any{"values": []any{1, "2"}}, "the parameters of sum do not match its schema: at /values/1: got string, want number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := send(t, s, "default", tc.query, body(tc.data), bearerHeader(s.Key)...)
			assert.Equal(t, tc.detail, paramsRefused(t, status, ct, b))
		})
	}
	status, _, b := send(t, s, "default", "wait=true", body(map[string]any{"values": []float64{1, 2}}), bearerHeader(s.Key)...)
	a := answerOf(t, status, b)
	assert.JSONEq(t, `{"sum":3}`, string(a.Response.Data))
	assertOnlyValidCall(t, s, "default:Echo:Supervisor Workflow:params", "ada", `{"sum":3}`)
}

func TestConverseChecksParamsAgainstSchema(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	const wf = "default:Echo:Supervisor Workflow:params"
	query := q("workflow", wf, "type", "Data", "text", "sum", "participantId", "bo", "apikey", s.Key)
	for _, tc := range []struct{ name, body, detail string }{
		{"{}", `{}`, missingValues},
		{"no body", ``, missingValues},
		{"a value of the wrong type", `{"values":{"a":1}}`, "the parameters of sum do not match its schema: at /values: got object, want array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := converse(t, s, query, tc.body)
			assert.Equal(t, tc.detail, paramsRefused(t, status, ct, b))
		})
	}
	// Streamed, the refusal comes before the stream starts: an ordinary problem answer.
	status, ct, b := doCT(t, http.MethodPost, s.URL+"/api/user/rest/converse?"+query.Encode(), strings.NewReader(`{}`),
		"Content-Type", "application/json", "Accept", "text/event-stream")
	assert.Equal(t, missingValues, paramsRefused(t, status, ct, b))

	status, _, b = converse(t, s, query, `{"values":[4,5]}`)
	a := answerOf(t, status, b)
	assert.JSONEq(t, `{"sum":9}`, string(a.Response.Data))
	assertOnlyValidCall(t, s, wf, "bo", `{"sum":9}`)
}

// MCP: arguments that do not match the tool's inputSchema are a tool execution error (a result
// with isError), which a model can read and correct, not a protocol error.
func TestMCPChecksArgumentsAgainstSchema(t *testing.T) {
	t.Parallel()
	st := mcpStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session := mcpSession(t, ctx, st, st.Key)
	const wf = "default:Echo:Supervisor Workflow:mcp-params"
	for _, args := range []map[string]any{
		{"workflow": wf},
		{"workflow": wf, "values": []any{"one"}},
	} {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "Echo.sum", Arguments: args})
		require.NoError(t, err, "not a JSON-RPC error")
		require.True(t, res.IsError, "%+v", res)
		require.Len(t, res.Content, 1)
		got := res.Content[0].(*mcp.TextContent).Text
		assert.Contains(t, got, "the parameters of sum do not match its schema: ")
		assert.True(t, strings.HasSuffix(got, " (400 invalid-method-parameters)"), got)
		assert.Nil(t, res.StructuredContent)
	}

	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "Echo.sum", Arguments: map[string]any{"workflow": wf, "values": []int{2, 3}}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%+v", res.Content)
	assertOnlyValidCall(t, st, wf, "user", `{"sum":5}`)
}

// badArgsModel is an OpenAI-compatible server whose model first calls Echo's sum with arguments
// that do not match its schema, reads the failure in the tool's result, calls again correctly,
// and then answers with the result. It records the request bodies.
type badArgsModel struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (f *badArgsModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, req)
	f.mu.Unlock()
	msgs := req["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	callSum := func(id, args string) {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
			"function": map[string]any{"name": "sum", "arguments": args}}}}, nil)
		chunk(map[string]any{}, "tool_calls")
	}
	switch content, _ := last["content"].(string); {
	case last["role"] != "tool":
		callSum("call_bad", `{"values":"2 and 3"}`)
	case strings.Contains(content, `"error"`):
		callSum("call_good", `{"values":[2,3]}`)
	default:
		chunk(map[string]any{"content": "The sum is " + content}, nil)
		chunk(map[string]any{}, "stop")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// A chat model's tool call whose arguments do not match the method's schema does not run the
// method: the model gets the failure as the tool's result, and may call again.
func TestChatToolCallArgumentsCheckedAgainstSchema(t *testing.T) {
	t.Parallel()
	fake := &badArgsModel{}
	s := modelStack(t, fake, "m", 5*time.Second)

	assert.Equal(t, `The sum is {"sum":5}`, chatText(t, s, "Echo", "gus", "what is 2 plus 3?"))

	fake.mu.Lock()
	bodies := fake.bodies
	fake.mu.Unlock()
	require.Len(t, bodies, 3)
	msgs := bodies[1]["messages"].([]any)
	const refusal = `{"error":{"message":"the parameters of sum do not match its schema: at /values: got string, want array","status":400}}`
	assert.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_bad", "content": refusal}, msgs[len(msgs)-1])

	// The thread keeps both calls and their results: the refusal is the first call's result.
	thread := threadOf(t, s, "default:Echo:Supervisor Workflow:default", "gus", 10)
	require.Len(t, thread, 6, "chat, two calls and their results, answer")
	assert.Equal(t, "call_bad", thread[4].Metadata[history.MetaToolCallID])
	assert.JSONEq(t, `{"values":"2 and 3"}`, string(thread[4].Data))
	assert.Equal(t, "call_bad", thread[3].Metadata[history.MetaToolCallID])
	assert.JSONEq(t, refusal, string(thread[3].Data))
	assert.JSONEq(t, `{"sum":5}`, string(thread[1].Data))
}
