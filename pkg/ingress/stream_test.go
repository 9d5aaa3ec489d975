package ingress_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

type streamEvent struct{ name, data string }

// readStream reads Server-Sent Events until the stream ends.
func readStream(t *testing.T, resp *http.Response) []streamEvent {
	t.Helper()
	var (
		out []streamEvent
		cur streamEvent
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = streamEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		}
	}
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
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/user/rest/converse?"+q("workflow", "Teller", "type", typ, "text", text, "apikey", s.Key).Encode(), nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream answer %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return readStream(t, resp)
	}

	events := stream("Chat", "tell me")
	var joined strings.Builder
	for _, e := range events[:len(events)-1] {
		var d struct{ Delta string }
		if e.name != "delta" || json.Unmarshal([]byte(e.data), &d) != nil {
			t.Fatalf("event %+v, want a delta", e)
		}
		joined.WriteString(d.Delta)
	}
	last := events[len(events)-1]
	var final syncAnswer
	if last.name != "message" || json.Unmarshal([]byte(last.data), &final) != nil || final.Response == nil || final.Response.Text == nil {
		t.Fatalf("last event %+v", last)
	}
	if len(events) != 5 || joined.String() != *final.Response.Text || *final.Response.Text != "once upon a time" {
		t.Fatalf("deltas %q (%d events), final %q", joined.String(), len(events), *final.Response.Text)
	}

	events = stream("Data", "boom")
	if len(events) != 1 || events[0].name != "error" || !strings.Contains(events[0].data, `"status":418`) {
		t.Fatalf("error stream %+v", events)
	}

	// Without Accept: text/event-stream the same call answers plain JSON.
	status, ct, b := converse(t, s, q("workflow", "Teller", "type", "Chat", "text", "tell me", "apikey", s.Key), "")
	if a := answerOf(t, status, b); ct != "application/json" || *a.Response.Text != "once upon a time" {
		t.Fatalf("plain answer %s %s", ct, b)
	}
}
