package ingress_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

func TestConverseStreams(t *testing.T) {
	t.Parallel()
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

	stream := func(typ, text string) []sse.Event {
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

// A handler that streams part of its answer and then fails with a Retryable error runs again,
// and the stream says so: a restart event comes before the new attempt's deltas, so that the
// client drops the text it got from the failed attempt. The deltas after the last restart add up
// to the message's text; the deltas of all attempts do not. A handler that fails every attempt
// ends its stream, after a restart before each attempt after the first, with the dead letter's
// error.
func TestConverseStreamRestartsWhenTheHandlerRunsAgain(t *testing.T) {
	t.Parallel()
	flaky := agent.New("Flaky")
	flaky.ChatFunc(func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		m.Delta("You said: ")
		if m.Attempt == 1 {
			m.Delta("he")
			return agent.NoReply, agent.Retryable(errors.New("the model went away"))
		}
		m.Delta(m.Text)
		return agent.Say("You said: " + m.Text), nil
	})
	flaky.DataFunc("down", func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		m.Delta("trying ")
		return agent.NoReply, agent.Retryable(errors.New("still down"))
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{flaky}, Host: agent.HostConfig{MaxDeliveries: 3}})

	events := streamConverse(t, s, q("workflow", "Flaky", "type", "Chat", "text", "hello", "apikey", s.Key))
	assert.Equal(t, []string{"delta", "delta", "restart", "delta", "delta", "message"}, eventNames(events))
	require.Len(t, events, 6, "stream %+v", events)
	assert.JSONEq(t, `{"attempt":2}`, events[2].Data, "restart event")
	final := finalText(t, events[len(events)-1])
	assert.Equal(t, "You said: hello", final)
	assert.Equal(t, final, deltaText(t, events[3:len(events)-1]), "the deltas after the restart add up to the final text")
	assert.Equal(t, "You said: heYou said: hello", deltaText(t, slices.Delete(slices.Clone(events[:len(events)-1]), 2, 3)),
		"all the deltas, the failed attempt's included")

	events = streamConverse(t, s, q("workflow", "Flaky", "type", "Data", "text", "down", "apikey", s.Key))
	assert.Equal(t, []string{"delta", "restart", "delta", "restart", "delta", "error"}, eventNames(events))
	require.Len(t, events, 6, "stream %+v", events)
	assert.JSONEq(t, `{"attempt":2}`, events[1].Data, "first restart event")
	assert.JSONEq(t, `{"attempt":3}`, events[3].Data, "second restart event")
	assert.Contains(t, events[5].Data, "dead-lettered", "error event")
}

// eventNames lists the events' names.
func eventNames(events []sse.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Event
	}
	return out
}
