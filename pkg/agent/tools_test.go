package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
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
	assert.Equal(t, llm.Message{Role: llm.RoleAssistant, Content: "Let me add.", ToolCalls: []llm.ToolCall{{ID: "call_1_0", Name: "sum", Arguments: `{"values":[1,2]}`}}}, msgs[1])
	assert.Equal(t, llm.Message{Role: llm.RoleTool, ToolCallID: "call_1_0", Content: "3"}, msgs[2])
}
