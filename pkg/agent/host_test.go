package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

func post(t *testing.T, s *stacktest.Stack, workflow, method, query string) (int, http.Header, []byte) {
	t.Helper()
	u := s.URL + "/api/user/webhooks/" + url.PathEscape(workflow) + "/" + method + "?apikey=" + s.Key + "&" + query
	resp, err := http.Post(u, "application/json", nil)
	if err != nil {
		t.Error(err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

type countReply struct {
	Count int    `json:"count"`
	RunID string `json:"runId"`
}

func countOf(t *testing.T, b []byte) countReply {
	t.Helper()
	var c countReply
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("count reply %q: %v", b, err)
	}
	return c
}

func TestContinueAsNewCarriesState(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{ContinueAsNewEvents: 3})
	wf := "Echo:Conversational"
	var runs []string
	for i := 1; i <= 4; i++ {
		_, _, b := post(t, s, wf, "count", "")
		c := countOf(t, b)
		if c.Count != i {
			t.Fatalf("count %d = %d: state was not carried over", i, c.Count)
		}
		runs = append(runs, c.RunID)
	}
	// The third event ends the run; the fourth call runs on its continuation.
	if runs[0] != runs[1] || runs[1] != runs[2] || runs[3] == runs[2] {
		t.Fatalf("run ids %v: want the same three, then a new one", runs)
	}
}

func TestConcurrentStartersShareOneRun(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	const n = 20
	var wg sync.WaitGroup
	runs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			// Different participants: different conversations, handled concurrently.
			_, _, b := post(t, s, "default:Echo:Supervisor Workflow:race", "count", fmt.Sprintf("participantId=p%d", i))
			runs[i] = countOf(t, b).RunID
		})
	}
	wg.Wait()
	for _, r := range runs {
		if r != runs[0] {
			t.Fatalf("concurrent first calls started several runs: %v", runs)
		}
	}
	_, _, b := post(t, s, "default:Echo:Supervisor Workflow:race", "count", "")
	if c := countOf(t, b); c.Count != n+1 {
		t.Fatalf("count after %d concurrent increments = %d: an update was lost", n, c.Count)
	}
}

func TestHandlerFailuresAndLargeReplies(t *testing.T) {
	a := agent.New("Edge")
	a.WebhookFunc("panic", func(context.Context, *agent.WebhookRequest) agent.Response { panic("secret internal detail") })
	a.WebhookFunc("badstatus", func(context.Context, *agent.WebhookRequest) agent.Response { return agent.Status(99) })
	a.WebhookFunc("big", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Bytes(http.StatusOK, "application/octet-stream", bytes.Repeat([]byte("x"), 3<<20))
	})
	a.WebhookFunc("twice", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		r.Respond(agent.Text(http.StatusCreated, "first"))
		r.Respond(agent.Text(http.StatusOK, "second"))
		return agent.Text(http.StatusOK, "returned")
	})
	a.WebhookFunc("default", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Response{Content: []byte(`{"ok":true}`)}
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a, echo.New()}})

	status, h, b := post(t, s, "Edge", "panic", "")
	if status != 500 || h.Get("Content-Type") != "application/problem+json" || strings.Contains(string(b), "secret") {
		t.Fatalf("panic: %d %s %s", status, h.Get("Content-Type"), b)
	}
	status, h, _ = post(t, s, "Edge", "badstatus", "")
	if status != 502 || h.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status 99: %d", status)
	}
	status, _, b = post(t, s, "Edge", "big", "")
	if status != 200 || len(b) != 3<<20 {
		t.Fatalf("big reply: %d, %d bytes", status, len(b))
	}
	status, _, b = post(t, s, "Edge", "twice", "")
	if status != 201 || string(b) != "first" {
		t.Fatalf("respond twice: %d %s", status, b)
	}
	status, h, b = post(t, s, "Edge", "default", "")
	if status != 200 || h.Get("Content-Type") != "application/json" || string(b) != `{"ok":true}` {
		t.Fatalf("defaults: %d %s %s", status, h.Get("Content-Type"), b)
	}
	// The host goes on serving after a panic.
	if status, _, _ = post(t, s, "Echo", "echo", ""); status != 200 {
		t.Fatalf("echo after panic: %d", status)
	}
}
