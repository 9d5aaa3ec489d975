package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// chat sends a Chat message through converse and returns the status and the reply's text or
// the problem's detail.
func chat(t *testing.T, s *stacktest.Stack, workflow, participant, text string) (int, string) {
	t.Helper()
	q := url.Values{"workflow": {workflow}, "type": {"Chat"}, "participantId": {participant}, "text": {text}, "apikey": {s.Key}}
	resp, err := http.Post(s.URL+"/api/user/rest/converse?"+q.Encode(), "", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Detail   string `json:"detail"`
		Response *struct {
			Text string `json:"text"`
		} `json:"response"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	if body.Response != nil {
		return resp.StatusCode, body.Response.Text
	}
	return resp.StatusCode, body.Detail
}

// thread reads the newest messages of a participant's thread on the agent's default workflow
// instance, through the history endpoint.
func thread(t *testing.T, s *stacktest.Stack, agentName, participant string) []history.Message {
	t.Helper()
	return threadAt(t, s, agentName, "default", participant)
}

// A tool call runs inside the chat's turn, as a Data call of the same conversation: it reads
// the thread up to itself (the chat message included) and is not queued behind the chat.
func TestToolCallSeesTheChat(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	status, got := chat(t, s, "Echo", "eve", `call history {"size":1}`)
	require.Equal(t, http.StatusOK, status, got)
	prefix := "history returned "
	require.True(t, strings.HasPrefix(got, prefix), got)
	var res struct {
		Messages []struct {
			Text string `json:"text"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(got, prefix)), &res))
	require.Len(t, res.Messages, 1)
	assert.Equal(t, `call history {"size":1}`, res.Messages[0].Text)
}

// A tool that panics or fails with an internal error is answered to the model with the
// client-safe message; the chat itself succeeds and is not retried.
func TestToolFailureGoesToTheModel(t *testing.T) {
	a := agent.New("Fragile")
	agent.Method(a, "boom", func(context.Context, struct{}) (int, error) { panic("kaboom") })
	agent.Method(a, "oops", func(context.Context, struct{}) (int, error) { return 0, errSecret })
	a.Chat(agent.ChatWithTools(llm.Offline()))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a, echo.New()}})

	status, got := chat(t, s, "Fragile", "fay", "call boom")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, `boom returned {"error":{"message":"the handler failed","status":500}}`, got)
	status, got = chat(t, s, "Fragile", "fay", "call oops")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, `oops returned {"error":{"message":"the handler failed","status":500}}`, got)
	assert.NotContains(t, got, "secret")
}

var errSecret = &secretError{}

type secretError struct{}

func (*secretError) Error() string { return "secret database password in error" }

// scripted is a model that answers with its turns in order and records what it was asked.
type scripted struct {
	turns []llm.Answer
	mu    sync.Mutex
	reqs  []llm.Request
}

func (m *scripted) Name() string                                          { return "scripted" }
func (m *scripted) Complete(context.Context, llm.Request) (string, error) { return "", errSecret }
func (m *scripted) Stream(context.Context, llm.Request, func(string) error) (string, error) {
	return "", errSecret
}
func (m *scripted) Generate(_ context.Context, req llm.Request, onDelta func(string) error) (llm.Answer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	a := m.turns[0]
	m.turns = m.turns[1:]
	if a.Text != "" {
		_ = onDelta(a.Text)
	}
	return a, nil
}

// A call without an id (some servers leave it out) gets one, so that its result can name it;
// text from several turns is joined.
func TestToolCallWithoutID(t *testing.T) {
	model := &scripted{turns: []llm.Answer{
		{Text: "Let me add.", ToolCalls: []llm.ToolCall{{Name: "sum", Arguments: `{"values":[1,2]}`}}},
		{Text: "It is 3."},
	}}
	a := agent.New("Adder")
	agent.Method(a, "sum", func(_ context.Context, in struct {
		Values []int `json:"values"`
	}) (int, error) {
		return in.Values[0] + in.Values[1], nil
	})
	a.Chat(agent.ChatWithTools(model, agent.HistorySize(-1)))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}})

	status, got := chat(t, s, "Adder", "hal", "add 1 and 2")
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "Let me add.\n\nIt is 3.", got)
	require.Len(t, model.reqs, 2)
	msgs := model.reqs[1].Messages
	require.Len(t, msgs, 3, "no system prompt, no history: the chat, the call, its result")
	require.Len(t, msgs[1].ToolCalls, 1)
	id := msgs[1].ToolCalls[0].ID
	assert.Regexp(t, `^call_[0-9a-f-]{36}_1_0$`, id, "the chat message's id, the round, the place")
	assert.Equal(t, llm.Message{Role: llm.RoleAssistant, Content: "Let me add.", ToolCalls: []llm.ToolCall{{ID: id, Name: "sum", Arguments: `{"values":[1,2]}`}}}, msgs[1])
	assert.Equal(t, llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: "3"}, msgs[2])
	assert.Equal(t, "call_"+model.reqs[0].ID+"_1_0", id, "the model is told the chat message's id")
}

// alwaysTool is a model that asks for the tool "ping" on every turn and never answers.
type alwaysTool struct{ turns atomic.Int32 }

func (m *alwaysTool) Name() string                                          { return "always-tool" }
func (m *alwaysTool) Complete(context.Context, llm.Request) (string, error) { return "", errSecret }
func (m *alwaysTool) Stream(context.Context, llm.Request, func(string) error) (string, error) {
	return "", errSecret
}
func (m *alwaysTool) Generate(context.Context, llm.Request, func(string) error) (llm.Answer, error) {
	n := m.turns.Add(1)
	return llm.Answer{ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("ping-%d", n), Name: "ping", Arguments: "{}"}}}, nil
}

// With the default bound, a model that always asks for a tool is asked DefaultMaxRounds times;
// the calls of the first DefaultMaxRounds-1 turns run, and those of the last do not: no turn is
// left to show the model their results.
func TestToolRoundsDefaultBound(t *testing.T) {
	model := &alwaysTool{}
	var pings atomic.Int32
	a := agent.New("Pinger")
	agent.Method(a, "ping", func(context.Context, struct{}) (int32, error) { return pings.Add(1), nil })
	a.Chat(agent.ChatWithTools(model))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}})

	status, got := chat(t, s, "Pinger", "pat", "ping away")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Equal(t, "the language model did not answer within 8 rounds of tool calls", got)
	assert.EqualValues(t, agent.DefaultMaxRounds, model.turns.Load(), "the model's turns")
	assert.EqualValues(t, agent.DefaultMaxRounds-1, pings.Load(), "the tool calls that ran")

	thread := thread(t, s, "Pinger", "pat")
	require.Len(t, thread, 1+2*(agent.DefaultMaxRounds-1)+1, "the chat, each call run and its result, the error")
	for _, m := range thread {
		assert.NotEqual(t, fmt.Sprintf("ping-%d", agent.DefaultMaxRounds), m.Metadata[history.MetaToolCallID], "the last turn's call is not stored")
	}
}

// The offline model's call ids come from the chat message, so a thread's calls never share one,
// even when the model sees the same conversation every turn (no history here).
func TestToolCallIDsUniqueInThread(t *testing.T) {
	a := agent.New("Adder")
	agent.Method(a, "sum", func(_ context.Context, in struct {
		Values []int `json:"values"`
	}) (int, error) {
		return in.Values[0] + in.Values[1], nil
	})
	a.Chat(agent.ChatWithTools(llm.Offline(), agent.HistorySize(-1)))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}})

	for range 3 {
		status, got := chat(t, s, "Adder", "ida", `call sum {"values":[1,2]}`)
		require.Equal(t, http.StatusOK, status, got)
		assert.Equal(t, "sum returned 3", got)
	}
	ids := map[string]int{}
	for _, m := range thread(t, s, "Adder", "ida") {
		if id := m.Metadata[history.MetaToolCallID]; id != "" {
			ids[id]++
		}
	}
	assert.Len(t, ids, 3, "one id per call: %v", ids)
	for id, n := range ids {
		assert.Equal(t, 2, n, "%s names one call and its result", id)
	}
}
