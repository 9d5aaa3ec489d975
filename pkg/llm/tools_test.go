package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/llm"
)

var sumTool = llm.Tool{
	Name:        "sum",
	Description: "Adds numbers",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"required":["values"]}`),
}

var echoTool = llm.Tool{Name: "echo"}

func user(text string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: text} }

func TestOfflineToolRule(t *testing.T) {
	t.Parallel()
	tools := []llm.Tool{sumTool, echoTool}
	call := llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_2", Name: "sum", Arguments: `{"values":[2,3]}`}}}
	tests := []struct {
		name  string
		msgs  []llm.Message
		tools []llm.Tool
		want  llm.Answer
	}{
		{
			"call with arguments",
			[]llm.Message{{Role: llm.RoleSystem, Content: "be brief"}, user(`call sum {"values":[2,3]}`)},
			tools,
			llm.Answer{ToolCalls: []llm.ToolCall{{ID: "call_2", Name: "sum", Arguments: `{"values":[2,3]}`}}},
		},
		{"call without arguments", []llm.Message{user("call echo")}, tools, llm.Answer{ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "echo", Arguments: "{}"}}}},
		{"extra spaces", []llm.Message{user("  call echo   {\"a\": 1}  ")}, tools, llm.Answer{ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "echo", Arguments: `{"a": 1}`}}}},
		{"tool not offered", []llm.Message{user("call count {}")}, tools, llm.Answer{Text: "You said: call count {}"}},
		{"no tools", []llm.Message{user(`call sum {"values":[1]}`)}, nil, llm.Answer{Text: `You said: call sum {"values":[1]}`}},
		{"arguments not an object", []llm.Message{user("call sum [1,2]")}, tools, llm.Answer{Text: "You said: call sum [1,2]"}},
		{"arguments not JSON", []llm.Message{user("call echo me maybe")}, tools, llm.Answer{Text: "You said: call echo me maybe"}},
		{"not a call", []llm.Message{user("recall sum {}")}, tools, llm.Answer{Text: "You said: recall sum {}"}},
		{
			"result",
			[]llm.Message{{Role: llm.RoleSystem, Content: "be brief"}, user(`call sum {"values":[2,3]}`), call, {Role: llm.RoleTool, ToolCallID: "call_2", Content: `{"sum":5}`}},
			tools,
			llm.Answer{Text: `sum returned {"sum":5}`},
		},
		{
			"two results",
			[]llm.Message{
				user("do both"),
				{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "sum"}, {ID: "b", Name: "echo"}}},
				{Role: llm.RoleTool, ToolCallID: "a", Content: `{"sum":1}`},
				{Role: llm.RoleTool, ToolCallID: "b", Content: `{}`},
			},
			tools,
			llm.Answer{Text: `sum returned {"sum":1}; echo returned {}`},
		},
		{
			"results of an earlier turn are not repeated",
			[]llm.Message{user(`call sum {"values":[2,3]}`), call, {Role: llm.RoleTool, ToolCallID: "call_2", Content: `{"sum":5}`}, {Role: llm.RoleAssistant, Content: "5"}, user("thanks")},
			tools,
			llm.Answer{Text: "You said: thanks"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := llm.Request{Messages: tt.msgs, Tools: tt.tools}
			got, err := llm.Offline().Generate(t.Context(), req, nil)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)

			// Streamed, the text comes in pieces that make up the answer; tool calls whole.
			var deltas strings.Builder
			got, err = llm.Offline().Generate(t.Context(), req, func(d string) error { deltas.WriteString(d); return nil })
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want.Text, deltas.String())
		})
	}
}

// A caller that sends a window of the newest messages sends the message to answer at the same
// position every turn: the call ids come from the request's ID, so the turns' calls differ.
func TestOfflineToolCallIDsFollowTheRequest(t *testing.T) {
	t.Parallel()
	window := []llm.Message{user("earlier"), {Role: llm.RoleAssistant, Content: "You said: earlier"}, user("call echo")}
	ids := map[string]bool{}
	for _, id := range []string{"msg-1", "msg-2"} {
		got, err := llm.Offline().Generate(t.Context(), llm.Request{ID: id, Messages: window, Tools: []llm.Tool{echoTool}}, nil)
		require.NoError(t, err)
		require.Len(t, got.ToolCalls, 1)
		assert.Equal(t, "call_"+id, got.ToolCalls[0].ID)
		ids[got.ToolCalls[0].ID] = true
	}
	assert.Len(t, ids, 2, "two turns, two ids")

	// Without an ID, the id is the message's position, as before.
	got, err := llm.Offline().Generate(t.Context(), llm.Request{Messages: window, Tools: []llm.Tool{echoTool}}, nil)
	require.NoError(t, err)
	require.Len(t, got.ToolCalls, 1)
	assert.Equal(t, "call_3", got.ToolCalls[0].ID)
}

// Complete and Stream are unchanged by tools: they answer text.
func TestOfflineCompleteIgnoresTools(t *testing.T) {
	t.Parallel()
	req := llm.Request{Messages: []llm.Message{user("call echo {}")}, Tools: []llm.Tool{echoTool}}
	got, err := llm.Offline().Complete(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, "You said: call echo {}", got)
}

// textOnly is a Model that is not a ToolModel.
type textOnly struct{ llm.Model }

func TestGenerateWithoutToolSupport(t *testing.T) {
	t.Parallel()
	req := llm.Request{Messages: []llm.Message{user("call echo {}")}, Tools: []llm.Tool{echoTool}}
	got, err := llm.Generate(t.Context(), textOnly{llm.Offline()}, req, nil)
	require.NoError(t, err)
	assert.Equal(t, llm.Answer{Text: "You said: call echo {}"}, got)
	var deltas []string
	got, err = llm.Generate(t.Context(), textOnly{llm.Offline()}, req, func(d string) error { deltas = append(deltas, d); return nil })
	require.NoError(t, err)
	assert.Equal(t, llm.Answer{Text: "You said: call echo {}"}, got)
	assert.Equal(t, []string{"You ", "said: ", "call ", "echo ", "{}"}, deltas)
}

// toolRound answers the first request with a call of sum and the second with text, as
// OpenAI does: as JSON, or streamed with the call's arguments split across chunks.
func toolRound() func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
	return func(w http.ResponseWriter, _ *http.Request, n int, req chatRequest) {
		if n > 1 {
			answerText(w, req.Stream, "The sum is 5.")
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": testModelName,
				"choices": []any{map[string]any{
					"index": 0,
					"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
						map[string]any{"id": "call_abc", "type": "function", "function": map[string]any{"name": "sum", "arguments": `{"values":[2,3]}`}},
						map[string]any{"id": "call_def", "type": "function", "function": map[string]any{"name": "echo", "arguments": `{}`}},
					}},
					"finish_reason": "tool_calls",
				}},
			})
			return
		}
		startStream(w)
		writeToolChunk(w, map[string]any{"index": 0, "id": "call_abc", "type": "function", "function": map[string]any{"name": "sum", "arguments": ""}})
		writeToolChunk(w, map[string]any{"index": 0, "function": map[string]any{"arguments": `{"values"`}})
		writeToolChunk(w, map[string]any{"index": 1, "id": "call_def", "type": "function", "function": map[string]any{"name": "echo", "arguments": "{"}})
		writeToolChunk(w, map[string]any{"index": 0, "function": map[string]any{"arguments": `:[2,3]}`}})
		writeToolChunk(w, map[string]any{"index": 1, "function": map[string]any{"arguments": "}"}})
		writeChunk(w, "", "tool_calls")
		writeDone(w)
	}
}

func answerText(w http.ResponseWriter, stream bool, text string) {
	if !stream {
		writeCompletion(w, text)
		return
	}
	startStream(w)
	for _, piece := range strings.SplitAfter(text, " ") {
		writeChunk(w, piece, "")
	}
	writeChunk(w, "", "stop")
	writeDone(w)
}

func writeToolChunk(w http.ResponseWriter, call map[string]any) {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": testModelName,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": []any{call}}, "finish_reason": nil}},
	})
	fmt.Fprintf(w, "data: %s\n\n", b)
	w.(http.Flusher).Flush()
}

// TestRemoteToolsWireFormat runs two rounds of a tool call against the fake server and checks
// the requests as the OpenAI API defines them: the tools array of function tools, then the
// assistant message with tool_calls and one role "tool" message per call with its tool_call_id.
func TestRemoteToolsWireFormat(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, toolRound())
			m, ok := f.model().(llm.ToolModel)
			require.True(t, ok, "the remote model is a ToolModel")
			var deltas []string
			onDelta := func(d string) error { deltas = append(deltas, d); return nil }
			if !mode.stream {
				onDelta = nil
			}

			req := llm.Request{
				Messages: []llm.Message{{Role: llm.RoleSystem, Content: "be brief"}, user("add 2 and 3")},
				Tools:    []llm.Tool{sumTool, echoTool},
			}
			first, err := m.Generate(t.Context(), req, onDelta)
			require.NoError(t, err)
			wantCalls := []llm.ToolCall{
				{ID: "call_abc", Name: "sum", Arguments: `{"values":[2,3]}`},
				{ID: "call_def", Name: "echo", Arguments: `{}`},
			}
			assert.Equal(t, llm.Answer{ToolCalls: wantCalls}, first)
			assert.Empty(t, deltas)

			req.Messages = append(req.Messages,
				llm.Message{Role: llm.RoleAssistant, ToolCalls: first.ToolCalls},
				llm.Message{Role: llm.RoleTool, ToolCallID: "call_abc", Content: `{"sum":5}`},
				llm.Message{Role: llm.RoleTool, ToolCallID: "call_def", Content: `{}`},
			)
			second, err := m.Generate(t.Context(), req, onDelta)
			require.NoError(t, err)
			assert.Equal(t, llm.Answer{Text: "The sum is 5."}, second)
			if mode.stream {
				assert.Equal(t, []string{"The ", "sum ", "is ", "5."}, deltas)
			}

			reqs := f.requests()
			require.Len(t, reqs, 2)
			wantTools := `[
				{"type":"function","function":{"name":"sum","description":"Adds numbers",
					"parameters":{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"required":["values"]}}},
				{"type":"function","function":{"name":"echo","parameters":{"type":"object"}}}]`
			for i, r := range reqs {
				var body map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(r.Raw, &body))
				assert.JSONEq(t, wantTools, string(body["tools"]), "request %d tools", i+1)
				assert.Equal(t, mode.stream, r.Body.Stream)
			}
			var second2 struct {
				Messages []json.RawMessage `json:"messages"`
			}
			require.NoError(t, json.Unmarshal(reqs[1].Raw, &second2))
			require.Len(t, second2.Messages, 5)
			assert.JSONEq(t, `{"role":"system","content":"be brief"}`, string(second2.Messages[0]))
			assert.JSONEq(t, `{"role":"user","content":"add 2 and 3"}`, string(second2.Messages[1]))
			assert.JSONEq(t, `{"role":"assistant","tool_calls":[
				{"id":"call_abc","type":"function","function":{"name":"sum","arguments":"{\"values\":[2,3]}"}},
				{"id":"call_def","type":"function","function":{"name":"echo","arguments":"{}"}}]}`, string(second2.Messages[2]))
			assert.JSONEq(t, `{"role":"tool","tool_call_id":"call_abc","content":"{\"sum\":5}"}`, string(second2.Messages[3]))
			assert.JSONEq(t, `{"role":"tool","tool_call_id":"call_def","content":"{}"}`, string(second2.Messages[4]))
		})
	}
}

// Complete and Stream send no tools, even when the request has some.
func TestRemoteCompleteSendsNoTools(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, nil)
	req := llm.Request{Messages: hello().Messages, Tools: []llm.Tool{sumTool}}
	for _, mode := range modes {
		_, _, err := call(t.Context(), f.model(), mode.stream, req)
		require.NoError(t, err)
	}
	for _, r := range f.requests() {
		var body map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(r.Raw, &body))
		assert.NotContains(t, body, "tools")
	}
}

func TestRemoteInvalidTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tools []llm.Tool
		want  string
	}{
		{"name with a dot", []llm.Tool{{Name: "echo.sum"}}, `name "echo.sum"`},
		{"empty name", []llm.Tool{{Name: ""}}, `name ""`},
		{"long name", []llm.Tool{{Name: strings.Repeat("a", 65)}}, "want ^[a-zA-Z0-9_-]{1,64}$"},
		{"twice", []llm.Tool{echoTool, echoTool}, `"echo" is offered twice`},
		{"parameters not an object", []llm.Tool{{Name: "x", Parameters: json.RawMessage(`[1]`)}}, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, nil)
			m := f.model().(llm.ToolModel)
			_, err := m.Generate(t.Context(), llm.Request{Messages: hello().Messages, Tools: tt.tools}, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Empty(t, f.requests())
		})
	}
	assert.True(t, llm.ValidToolName(strings.Repeat("a", 64)))
	assert.True(t, llm.ValidToolName("sum_all-2"))
}

// A tool call cut short by the end of the stream is an upstream failure, not a call.
func TestRemoteToolStreamCutShort(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ chatRequest) {
		startStream(w)
		writeToolChunk(w, map[string]any{"index": 0, "id": "call_abc", "type": "function", "function": map[string]any{"name": "sum", "arguments": `{"val`}})
	})
	m := f.model(func(c *llm.Config) { c.MaxRetries = -1 }).(llm.ToolModel)
	_, err := m.Generate(context.Background(), llm.Request{Messages: hello().Messages, Tools: []llm.Tool{sumTool}}, func(string) error { return nil })
	require.ErrorIs(t, err, llm.ErrUpstream)
}
