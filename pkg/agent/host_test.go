package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// enqueue stores req in the inbox as the ingress does, at its agent's, tenant's, workflow's and
// participant's subject, with header (a reply subject, a de-duplication id; nil for none).
func enqueue(t *testing.T, js jetstream.JetStream, req *agentbusv1.Request, header nats.Header) {
	t.Helper()
	data, err := proto.Marshal(req)
	require.NoError(t, err)
	msg := &nats.Msg{Subject: subject.Inbox(req.GetAgentName(), req.GetTenantId(), req.GetWorkflowId(), req.GetParticipantId()),
		Data: data, Header: header}
	_, err = js.PublishMsg(t.Context(), msg)
	require.NoError(t, err)
}

// post may run on goroutines other than the test's: it reports a failed request with assert.
func post(t *testing.T, s *stacktest.Stack, workflow, method, query string) (int, http.Header, []byte) {
	t.Helper()
	return postWith(t, s, workflow, method, query, nil)
}

// postWith is post with the request headers header.
func postWith(t *testing.T, s *stacktest.Stack, workflow, method, query string, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	u := s.URL + "/api/user/webhooks/" + url.PathEscape(workflow) + "/" + method + "?apikey=" + s.Key + "&" + query
	req, err := http.NewRequest(http.MethodPost, u, nil)
	if !assert.NoError(t, err) {
		return 0, nil, nil
	}
	maps.Copy(req.Header, header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if !assert.NoError(t, err) {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// nextReply waits up to 10 s for the next bus reply on sub.
func nextReply(t *testing.T, sub *nats.Subscription) *agentbusv1.Reply {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err, "no reply")
	rep := new(agentbusv1.Reply)
	require.NoError(t, proto.Unmarshal(m.Data, rep))
	return rep
}

type countReply struct {
	Count int    `json:"count"`
	RunID string `json:"runId"`
}

func countOf(t *testing.T, b []byte) countReply {
	t.Helper()
	var c countReply
	require.NoError(t, json.Unmarshal(b, &c), "count reply %q", b)
	return c
}

func TestContinueAsNewCarriesState(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{ContinueAsNewEvents: 3})
	wf := "Echo:Conversational"
	var runs []string
	for i := 1; i <= 4; i++ {
		_, _, b := post(t, s, wf, "count", "")
		c := countOf(t, b)
		require.Equal(t, i, c.Count, "count %d: state was not carried over", i)
		runs = append(runs, c.RunID)
	}
	// The third event ends the run; the fourth call runs on its continuation.
	require.Equal(t, runs[0], runs[1], "run ids %v: want the same three, then a new one", runs)
	require.Equal(t, runs[1], runs[2], "run ids %v: want the same three, then a new one", runs)
	require.NotEqual(t, runs[2], runs[3], "run ids %v: want the same three, then a new one", runs)
}

func TestConcurrentStartersShareOneRun(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	const n = 20
	var wg sync.WaitGroup
	bodies := make([][]byte, n)
	for i := range n {
		wg.Go(func() {
			// Different participants: different conversations, handled concurrently.
			_, _, bodies[i] = post(t, s, "default:Echo:Supervisor Workflow:race", "count", fmt.Sprintf("participantId=p%d", i))
		})
	}
	wg.Wait()
	// The replies are decoded here: countOf stops the test, which only the test's goroutine may do.
	runs := make([]string, n)
	for i, b := range bodies {
		runs[i] = countOf(t, b).RunID
	}
	for _, r := range runs {
		require.Equal(t, runs[0], r, "concurrent first calls started several runs: %v", runs)
	}
	_, _, b := post(t, s, "default:Echo:Supervisor Workflow:race", "count", "")
	require.Equal(t, n+1, countOf(t, b).Count, "count after %d concurrent increments: an update was lost", n)
}

func TestHandlerFailuresAndLargeReplies(t *testing.T) {
	t.Parallel()
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
	require.Equal(t, 500, status, "panic: %s", b)
	require.Equal(t, "application/problem+json", h.Get("Content-Type"), "panic")
	require.NotContains(t, string(b), "secret", "panic")
	status, h, _ = post(t, s, "Edge", "badstatus", "")
	require.Equal(t, 502, status, "status 99")
	require.Equal(t, "application/problem+json", h.Get("Content-Type"), "status 99")
	status, _, b = post(t, s, "Edge", "big", "")
	require.Equal(t, 200, status, "big reply")
	require.Equal(t, 3<<20, len(b), "big reply: bytes")
	status, _, b = post(t, s, "Edge", "twice", "")
	require.Equal(t, 201, status, "respond twice: %s", b)
	require.Equal(t, "first", string(b), "respond twice")
	status, h, b = post(t, s, "Edge", "default", "")
	require.Equal(t, 200, status, "defaults: %s", b)
	require.Equal(t, "application/json", h.Get("Content-Type"), "defaults")
	require.Equal(t, `{"ok":true}`, string(b), "defaults")
	// The host goes on serving after a panic.
	status, _, _ = post(t, s, "Echo", "echo", "")
	require.Equal(t, 200, status, "echo after panic")
}
