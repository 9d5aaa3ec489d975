package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Whole-stack tests of a chat whose model calls the agent's Data methods as tools
// (agent.ChatWithTools), with the offline model's rule "call {tool} {json}".

// threadOf reads a thread's newest messages (newest first) through the history endpoint.
func threadOf(t *testing.T, s *stacktest.Stack, workflowID, participant string, size int) []history.Message {
	t.Helper()
	status, _, b := doGet(t, s.URL, "/api/v1/admin/tenants/default/messaging/history",
		q("workflowId", workflowID, "participantId", participant, "pageSize", fmt.Sprint(size)), bearerHeader(s.Key)...)
	require.Equal(t, http.StatusOK, status, "%s", b)
	var page struct {
		Messages []history.Message `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(b, &page))
	return page.Messages
}

func text(m history.Message) string {
	if m.Text == nil {
		return "<nil>"
	}
	return *m.Text
}

// Echo's tool example (docs/echo.md#chat): converse Chat on Echo with the offline model,
// `call sum {"values":[2,3]}`.
// History holds the chat, the tool call, its result 5 and the final answer naming 5, in order.
func TestChatCallsTool(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	const wf = "default:Echo:Supervisor Workflow:default"

	got := chatText(t, s, "Echo", "ada", `call sum {"values":[2,3]}`)
	assert.Equal(t, `sum returned {"sum":5}`, got)

	msgs := threadOf(t, s, wf, "ada", 10)
	require.Len(t, msgs, 4, "chat, tool call, tool result, answer")
	slices.Reverse(msgs) // oldest first
	chat, call, result, answer := msgs[0], msgs[1], msgs[2], msgs[3]

	assert.Equal(t, history.In, chat.Direction)
	assert.Equal(t, history.Chat, chat.MessageType)
	assert.Equal(t, `call sum {"values":[2,3]}`, text(chat))

	assert.Equal(t, history.In, call.Direction)
	assert.Equal(t, history.Data, call.MessageType)
	assert.Equal(t, "sum", text(call))
	assert.JSONEq(t, `{"values":[2,3]}`, string(call.Data))
	callID := call.Metadata[history.MetaToolCallID]
	assert.NotEmpty(t, callID)

	assert.Equal(t, history.Out, result.Direction)
	assert.Equal(t, history.Data, result.MessageType)
	assert.Nil(t, result.Text)
	assert.JSONEq(t, `{"sum":5}`, string(result.Data))
	assert.Equal(t, callID, result.Metadata[history.MetaToolCallID])

	assert.Equal(t, history.Out, answer.Direction)
	assert.Equal(t, history.Chat, answer.MessageType)
	assert.Contains(t, text(answer), "5")
	assert.Empty(t, answer.Metadata)

	for _, m := range msgs {
		assert.Equal(t, chat.RequestID, m.RequestID, "every message of the call has its requestId")
		assert.Equal(t, "ada", m.ParticipantID)
		assert.Equal(t, wf, m.WorkflowID)
	}
	assert.Len(t, map[string]bool{chat.ID: true, call.ID: true, result.ID: true, answer.ID: true}, 4, "ids are unique")

	// The next chat turn sees the earlier exchange, not the tool messages, and still works.
	assert.Equal(t, "You said: thanks", chatText(t, s, "Echo", "ada", "thanks"))
}

// A tool call is an ordinary Data call of the same instance: it changes the instance's state as
// the Data method called through converse does, and a failing call's error goes back to the
// model as its result instead of failing the chat.
func TestChatToolsShareInstanceState(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	assert.Contains(t, chatText(t, s, "Echo:Conversational", "bob", "call count"), `count returned {"count":1,`)

	status, _, b := converse(t, s, q("workflow", "Echo:Conversational", "type", "Data", "text", "count", "participantId", "bob", "apikey", s.Key), "{}")
	a := answerOf(t, status, b)
	assert.EqualValues(t, 2, decode(t, a.Response.Data)["count"], "%s", b)

	assert.Contains(t, chatText(t, s, "Echo:Conversational", "bob", "call count {}"), `count returned {"count":3,`)

	got := chatText(t, s, "Echo:Conversational", "bob", `call fail {"status":422,"message":"not today"}`)
	assert.Equal(t, `fail returned {"error":{"message":"not today","status":422}}`, got)
	msgs := threadOf(t, s, "default:Echo:Conversational:default", "bob", 2)
	require.Len(t, msgs, 2)
	assert.JSONEq(t, `{"error":{"status":422,"message":"not today"}}`, string(msgs[1].Data), "the failed call's result is stored")
	assert.Equal(t, "not today", text(msgs[1]))
}

// Streamed, the tool call and its result come as events before the answer's text.
func TestChatToolsStream(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	events := streamConverse(t, s, q("workflow", "Echo", "type", "Chat", "participantId", "cy", "text", `call sum {"values":[2,3]}`, "apikey", s.Key))

	var names []string
	for _, e := range events {
		names = append(names, e.Event)
	}
	require.GreaterOrEqual(t, len(events), 4, "events %v", names)
	assert.Equal(t, "tool_call", events[0].Event, "events %v", names)
	assert.Equal(t, "tool_result", events[1].Event, "events %v", names)
	assert.Equal(t, "message", events[len(events)-1].Event)

	var call struct {
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	require.NoError(t, json.Unmarshal([]byte(events[0].Data), &call))
	assert.Equal(t, "sum", call.Name)
	assert.NotEmpty(t, call.ID)
	assert.JSONEq(t, `{"values":[2,3]}`, string(call.Arguments))
	assert.JSONEq(t, fmt.Sprintf(`{"id":%q,"name":"sum","text":null,"data":{"sum":5}}`, call.ID), events[1].Data)

	final := finalText(t, events[len(events)-1])
	assert.Equal(t, `sum returned {"sum":5}`, final)
	assert.Equal(t, final, deltaText(t, events[2:len(events)-1]))
}

// loopModel asks for a tool call on every turn, never answering.
type loopModel struct{ calls atomic.Int32 }

func (m *loopModel) Name() string { return "loop" }
func (m *loopModel) Complete(context.Context, llm.Request) (string, error) {
	return "", fmt.Errorf("loopModel: only Generate")
}
func (m *loopModel) Stream(context.Context, llm.Request, func(string) error) (string, error) {
	return "", fmt.Errorf("loopModel: only Generate")
}
func (m *loopModel) Generate(_ context.Context, req llm.Request, _ func(string) error) (llm.Answer, error) {
	n := m.calls.Add(1)
	return llm.Answer{ToolCalls: []llm.ToolCall{
		{ID: fmt.Sprintf("c%d", n), Name: "ping", Arguments: "{}"},
		{ID: fmt.Sprintf("u%d", n), Name: "nope", Arguments: "{}"},
	}}, nil
}

// A model that keeps calling tools is stopped after MaxRounds turns with a clear error; the
// calls of every round but the last were run and stored, an unknown tool was answered to the
// model, not run, and the last round's calls, whose results the model could not see, were not.
func TestChatToolRoundsBound(t *testing.T) {
	t.Parallel()
	model := &loopModel{}
	var pings atomic.Int32
	looper := agent.New("Looper")
	agent.Method(looper, "ping", func(context.Context, struct{}) (map[string]int32, error) {
		return map[string]int32{"pings": pings.Add(1)}, nil
	}, agent.Describe("Answers pong."))
	looper.Chat(agent.ChatWithTools(model, agent.MaxRounds(3)))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{looper}})

	status, ct, b := converse(t, s, q("workflow", "Looper", "type", "Chat", "participantId", "dee", "text", "go", "apikey", s.Key), "")
	p := problemOf(t, status, ct, b, http.StatusBadGateway)
	assert.Equal(t, "the language model did not answer within 3 rounds of tool calls", p["detail"])
	assert.EqualValues(t, 3, model.calls.Load())
	assert.EqualValues(t, 2, pings.Load())

	msgs := threadOf(t, s, "default:Looper:Supervisor Workflow:default", "dee", 20)
	require.Len(t, msgs, 1+2*4+1, "chat, 2 rounds of two calls and two results, the error")
	slices.Reverse(msgs)
	assert.Equal(t, "go", text(msgs[0]))
	for r := range 2 {
		round := msgs[1+4*r : 5+4*r]
		assert.Equal(t, "ping", text(round[0]))
		assert.Equal(t, fmt.Sprintf("c%d", r+1), round[0].Metadata[history.MetaToolCallID])
		assert.JSONEq(t, fmt.Sprintf(`{"pings":%d}`, r+1), string(round[1].Data))
		assert.Equal(t, "nope", text(round[2]))
		assert.JSONEq(t, `{"error":{"status":404,"message":"no tool named \"nope\""}}`, string(round[3].Data))
	}
	last := msgs[len(msgs)-1]
	assert.Equal(t, history.Out, last.Direction)
	assert.Equal(t, "the language model did not answer within 3 rounds of tool calls", text(last))
}

// Echo registers its Data methods with descriptions and parameter schemas, for the model and
// for other readers of the registry.
func TestEchoRegistersMethodDescriptions(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	e, err := s.Res.Registry.Get(t.Context(), subject.AgentKey(echo.Name))
	require.NoError(t, err)
	var reg registry.Agent
	require.NoError(t, json.Unmarshal(e.Value(), &reg))
	require.Len(t, reg.Methods, len(reg.DataMethods))
	for i, m := range reg.Methods {
		assert.Equal(t, reg.DataMethods[i], strings.ToLower(m.Name))
		assert.NotEmpty(t, m.Description, m.Name)
		assert.True(t, json.Valid(m.InputSchema), m.Name)
	}
	sum, ok := reg.Method("sum")
	require.True(t, ok)
	assert.JSONEq(t, `{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"},"description":"the numbers to add"}},"required":["values"]}`,
		string(sum.InputSchema))
	echoM, ok := reg.Method("echo")
	require.True(t, ok)
	assert.JSONEq(t, `{"type":"object"}`, string(echoM.InputSchema))
}

// toolServer is an OpenAI-compatible server whose model calls Echo's sum once, streamed in
// pieces, and then answers with the tool's result. It records the request bodies.
type toolServer struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (f *toolServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	if last["role"] == "tool" {
		chunk(map[string]any{"content": "The sum is "}, nil)
		chunk(map[string]any{"content": last["content"].(string)}, nil)
		chunk(map[string]any{}, "stop")
	} else {
		tc := func(m map[string]any) map[string]any { return map[string]any{"tool_calls": []any{m}} }
		chunk(tc(map[string]any{"index": 0, "id": "call_x1", "type": "function", "function": map[string]any{"name": "sum", "arguments": `{"values":`}}), nil)
		chunk(tc(map[string]any{"index": 0, "function": map[string]any{"arguments": `[20,22]}`}}), nil)
		chunk(map[string]any{}, "tool_calls")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Echo with a model behind an OpenAI-compatible server: the tools are offered on the wire, the
// call streamed in pieces runs, and its result goes back as a role "tool" message.
func TestChatToolsThroughRemoteModel(t *testing.T) {
	t.Parallel()
	fake := &toolServer{}
	s := modelStack(t, fake, "m", 5*time.Second)

	assert.Equal(t, `The sum is {"sum":42}`, chatText(t, s, "Echo", "gus", "what is 20 plus 22?"))

	fake.mu.Lock()
	bodies := fake.bodies
	fake.mu.Unlock()
	require.Len(t, bodies, 2)
	var names []string
	for _, tool := range bodies[0]["tools"].([]any) {
		tool := tool.(map[string]any)
		assert.Equal(t, "function", tool["type"])
		fn := tool["function"].(map[string]any)
		names = append(names, fn["name"].(string))
		assert.NotEmpty(t, fn["description"])
		assert.Equal(t, "object", fn["parameters"].(map[string]any)["type"])
	}
	assert.Equal(t, []string{"answer", "ask", "count", "echo", "fail", "history", "relay", "remind", "sleep", "steps", "sum", "tick"}, names)
	msgs := bodies[1]["messages"].([]any)
	assert.Equal(t, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
		"id": "call_x1", "type": "function", "function": map[string]any{"name": "sum", "arguments": `{"values":[20,22]}`}}}}, msgs[len(msgs)-2])
	assert.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_x1", "content": `{"sum":42}`}, msgs[len(msgs)-1])

	thread := threadOf(t, s, "default:Echo:Supervisor Workflow:default", "gus", 10)
	require.Len(t, thread, 4)
	assert.Equal(t, "call_x1", thread[1].Metadata[history.MetaToolCallID])
	assert.JSONEq(t, `{"sum":42}`, string(thread[1].Data))
	assert.JSONEq(t, `{"values":[20,22]}`, string(thread[2].Data))
}
