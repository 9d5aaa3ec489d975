package ingress_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

func TestConverseStreams(t *testing.T) {
	teller := agent.New("Teller")
	teller.ChatFunc(func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		words := []string{"once ", "upon ", "a ", "time"}
		for _, w := range words {
			m.Delta(w)
		}
		return agent.Say(strings.Join(words, "")), nil
	})
	teller.DataFunc("boom", func(context.Context, *agent.Message) (agent.Reply, error) {
		return agent.NoReply, agent.Errorf(http.StatusTeapot, "no tea")
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{teller, echo.New()}})

	stream := func(typ, text string) []sseEvent {
		t.Helper()
		return streamConverse(t, s, q("workflow", "Teller", "type", typ, "text", text, "apikey", s.Key))
	}

	events := stream("Chat", "tell me")
	require.Len(t, events, 5, "four deltas and the message: %+v", events)
	joined := deltaText(t, events[:len(events)-1])
	final := finalText(t, events[len(events)-1])
	assert.Equal(t, "once upon a time", final, "final text")
	assert.Equal(t, final, joined, "deltas add up to the final text")

	events = stream("Data", "boom")
	require.Len(t, events, 1, "error stream %+v", events)
	assert.Equal(t, "error", events[0].Event, "error stream %+v", events)
	assert.Contains(t, events[0].Data, `"status":418`, "error stream %+v", events)

	// Without Accept: text/event-stream the same call answers plain JSON.
	status, ct, b := converse(t, s, q("workflow", "Teller", "type", "Chat", "text", "tell me", "apikey", s.Key), "")
	a := answerOf(t, status, b)
	assert.Equal(t, "application/json", ct, "plain answer %s", b)
	require.True(t, a.Response != nil && a.Response.Text != nil, "plain answer %s", b)
	assert.Equal(t, "once upon a time", *a.Response.Text, "plain answer %s", b)
}
