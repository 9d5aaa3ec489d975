package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

type streamEvent struct{ name, data string }

// readStream reads Server-Sent Events until the stream ends; comments are left out.
func readStream(t *testing.T, resp *http.Response) []streamEvent {
	t.Helper()
	var out []streamEvent
	scanEvents(resp.Body, func(ev sseEvent) bool {
		if ev.Event != "" || ev.Data != "" {
			out = append(out, streamEvent{name: ev.Event, data: ev.Data})
		}
		return true
	})
	return out
}

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

	stream := func(typ, text string) []streamEvent {
		t.Helper()
		req := newRequest(t, context.Background(), http.MethodPost, s.URL+"/api/user/rest/converse?"+q("workflow", "Teller", "type", typ, "text", text, "apikey", s.Key).Encode(), nil,
			"Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "stream answer")
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"), "stream answer")
		return readStream(t, resp)
	}

	events := stream("Chat", "tell me")
	require.Len(t, events, 5, "four deltas and the message: %+v", events)
	var joined strings.Builder
	for _, e := range events[:len(events)-1] {
		var d struct{ Delta string }
		require.Equal(t, "delta", e.name, "event %+v, want a delta", e)
		require.NoError(t, json.Unmarshal([]byte(e.data), &d), "event %+v, want a delta", e)
		joined.WriteString(d.Delta)
	}
	last := events[len(events)-1]
	var final syncAnswer
	require.Equal(t, "message", last.name, "last event %+v", last)
	require.NoError(t, json.Unmarshal([]byte(last.data), &final), "last event %+v", last)
	require.True(t, final.Response != nil && final.Response.Text != nil, "last event %+v", last)
	assert.Equal(t, "once upon a time", *final.Response.Text, "final text")
	assert.Equal(t, *final.Response.Text, joined.String(), "deltas add up to the final text")

	events = stream("Data", "boom")
	require.Len(t, events, 1, "error stream %+v", events)
	assert.Equal(t, "error", events[0].name, "error stream %+v", events)
	assert.Contains(t, events[0].data, `"status":418`, "error stream %+v", events)

	// Without Accept: text/event-stream the same call answers plain JSON.
	status, ct, b := converse(t, s, q("workflow", "Teller", "type", "Chat", "text", "tell me", "apikey", s.Key), "")
	a := answerOf(t, status, b)
	assert.Equal(t, "application/json", ct, "plain answer %s", b)
	require.True(t, a.Response != nil && a.Response.Text != nil, "plain answer %s", b)
	assert.Equal(t, "once upon a time", *a.Response.Text, "plain answer %s", b)
}
