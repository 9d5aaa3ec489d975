package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// flaky is an agent whose handlers fail on purpose: always (boom), the first few times (flaky),
// or until told to mend (mendable).
type flaky struct {
	flakyCalls atomic.Int32
	tallyCalls atomic.Int32
	mended     atomic.Bool
	mendedRuns atomic.Int32
}

func (f *flaky) agent() *agent.Agent {
	a := agent.New("Flaky")
	a.WebhookFunc("boom", func(context.Context, *agent.WebhookRequest) agent.Response { panic("boom: internal detail") })
	a.WebhookFunc("flaky", func(context.Context, *agent.WebhookRequest) agent.Response {
		if n := f.flakyCalls.Add(1); n < 3 {
			return agent.Retry(errors.New("upstream not ready"))
		}
		return agent.JSON(http.StatusOK, map[string]int32{"calls": f.flakyCalls.Load()})
	})
	a.WebhookFunc("mendable", func(context.Context, *agent.WebhookRequest) agent.Response {
		if !f.mended.Load() {
			return agent.Retry(errors.New("not mended yet"))
		}
		f.mendedRuns.Add(1)
		return agent.Text(http.StatusOK, "mended")
	})
	// tally counts in the state, and fails after counting on its first two attempts.
	a.WebhookFunc("tally", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		s, err := agent.UpdateState(ctx, r.Instance(), func(s *struct{ Tally int }) error { s.Tally++; return nil })
		if err != nil {
			return agent.Status(http.StatusInternalServerError)
		}
		if f.tallyCalls.Add(1)%3 != 0 {
			return agent.Retry(errors.New("failed after counting"))
		}
		return agent.JSON(http.StatusOK, map[string]int{"tally": s.Tally})
	})
	a.WebhookFunc("ok", func(context.Context, *agent.WebhookRequest) agent.Response { return agent.Text(http.StatusOK, "ok") })
	agent.Method(a, "boom", func(context.Context, struct{}) (struct{}, error) {
		return struct{}{}, agent.Retryable(errors.New("model unavailable"))
	})
	return a
}

type problemBody struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func problemOf(t *testing.T, b []byte) problemBody {
	t.Helper()
	var p problemBody
	require.NoError(t, json.Unmarshal(b, &p), "problem %s", b)
	return p
}

// A handler that keeps failing is tried MaxDeliveries times, then kept as a dead letter with its
// last error; the caller gets a problem saying so, the thread records it, and the conversation's
// next call runs at once. A handler that fails twice and then answers is answered normally.
func TestRetriesThenDeadLetter(t *testing.T) {
	f := &flaky{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{f.agent()}, Host: agent.HostConfig{MaxDeliveries: 3}})
	dead := deadletter.NewStore(s.Res, bus.NewBlobs(s.Res.Claims, 1<<20))
	ctx := context.Background()

	status, h, b := post(t, s, "Flaky", "boom", "")
	require.Equal(t, http.StatusInternalServerError, status, "%s", b)
	assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
	p := problemOf(t, b)
	assert.Equal(t, "urn:agentbus:problem:dead-lettered", p.Type)
	assert.Contains(t, p.Detail, "all 3 attempts")
	assert.NotContains(t, string(b), "internal detail", "the panic's text reached the caller")

	start := time.Now()
	status, _, b = post(t, s, "Flaky", "ok", "")
	assert.Equal(t, http.StatusOK, status, "%s", b)
	assert.Less(t, time.Since(start), 2*time.Second, "the dead letter held up its conversation")

	letters, next, err := dead.List(ctx, "default", deadletter.ListOptions{})
	require.NoError(t, err)
	require.Len(t, letters, 1)
	assert.Zero(t, next)
	l := letters[0]
	assert.Equal(t, "Flaky", l.AgentName)
	assert.Equal(t, "Webhook", l.Type)
	assert.Equal(t, "boom", l.Method)
	assert.Equal(t, 3, l.Attempts)
	assert.Contains(t, l.Error, "panic: boom")
	assert.Equal(t, "default:Flaky:Supervisor Workflow:default", l.WorkflowID)
	assert.Contains(t, p.Detail, "dead letter "+jsonNumber(l.ID))

	// Another tenant does not see it.
	others, _, err := dead.List(ctx, "other", deadletter.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, others)
	_, err = dead.Get(ctx, "other", l.ID)
	assert.ErrorIs(t, err, deadletter.ErrNotFound)

	// The thread shows the call and its dead letter.
	js := natstest.JetStream(t, s.NATS)
	msgs, _, err := history.NewStore(s.Res.Messages, s.Res.Topics, js).Page(ctx, "default", l.WorkflowID, "webhook", history.PageOptions{Size: 10})
	require.NoError(t, err)
	var sawDead bool
	for _, m := range msgs {
		if m.RequestID == l.RequestID && m.Direction == history.Out && strings.Contains(string(m.Data), "dead letter") {
			sawDead = true
		}
	}
	assert.True(t, sawDead, "history has no dead-letter answer: %+v", msgs)

	status, _, b = post(t, s, "Flaky", "flaky", "")
	assert.Equal(t, http.StatusOK, status, "%s", b)
	assert.JSONEq(t, `{"calls":3}`, string(b))

	// A Data method's retryable error ends the same way.
	q := url.Values{"workflow": {"Flaky"}, "type": {"Data"}, "text": {"boom"}, "apikey": {s.Key}}
	resp, err := http.Post(s.URL+"/api/user/rest/converse?"+q.Encode(), "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	var dp problemBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&dp))
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Equal(t, "urn:agentbus:problem:dead-lettered", dp.Type)
}

// A request that changed the state and then failed is run again from the state it found: its
// change counts once however often it is tried.
func TestRetriedRequestChangesStateOnce(t *testing.T) {
	f := &flaky{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{f.agent()}, Host: agent.HostConfig{MaxDeliveries: 3}})
	for want := 1; want <= 3; want++ {
		status, _, b := post(t, s, "Flaky", "tally", "")
		require.Equal(t, http.StatusOK, status, "%s", b)
		assert.JSONEq(t, fmt.Sprintf(`{"tally":%d}`, want), string(b), "call %d after two failed attempts", want)
	}
	assert.EqualValues(t, 9, f.tallyCalls.Load())
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// A dead letter replayed once its handler is mended runs again and leaves the dead letters; a
// discarded one is gone.
func TestDeadLetterReplayAndDiscard(t *testing.T) {
	f := &flaky{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{f.agent(), echo.New()}, Host: agent.HostConfig{MaxDeliveries: 2}})
	dead := deadletter.NewStore(s.Res, bus.NewBlobs(s.Res.Claims, 1<<20))
	ctx := context.Background()

	status, _, b := post(t, s, "default:Flaky:Supervisor Workflow:replay", "mendable", "")
	require.Equal(t, http.StatusInternalServerError, status, "%s", b)
	status, _, _ = post(t, s, "default:Flaky:Supervisor Workflow:discard", "mendable", "")
	require.Equal(t, http.StatusInternalServerError, status)
	letters, _, err := dead.List(ctx, "default", deadletter.ListOptions{Agent: "Flaky"})
	require.NoError(t, err)
	require.Len(t, letters, 2)
	none, _, err := dead.List(ctx, "default", deadletter.ListOptions{Agent: "Echo"})
	require.NoError(t, err)
	assert.Empty(t, none)

	f.mended.Store(true)
	replayed, err := dead.Replay(ctx, "default", letters[0].ID)
	require.NoError(t, err)
	assert.Equal(t, letters[0].RequestID, replayed.RequestID)
	waitFor(t, 10*time.Second, "the replayed request ran", func() bool { return f.mendedRuns.Load() == 1 })
	_, err = dead.Get(ctx, "default", letters[0].ID)
	assert.ErrorIs(t, err, deadletter.ErrNotFound)

	require.NoError(t, dead.Discard(ctx, "default", letters[1].ID))
	assert.ErrorIs(t, dead.Discard(ctx, "default", letters[1].ID), deadletter.ErrNotFound)
	left, _, err := dead.List(ctx, "default", deadletter.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, left)
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, int32(1), f.mendedRuns.Load(), "the discarded request ran")
}

// A dead-lettered request with a caller-chosen id runs when it is replayed: the answer kept for
// its id (the dead letter's) does not stand for the replay, whose answer is kept in its place.
func TestDeadLetterReplayOfARequestWithAnID(t *testing.T) {
	f := &flaky{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{f.agent()}, Host: agent.HostConfig{MaxDeliveries: 2}})
	dead := deadletter.NewStore(s.Res, bus.NewBlobs(s.Res.Claims, 1<<20))
	send := func() (int, string) {
		status, _, b := postWith(t, s, "default:Flaky:Supervisor Workflow:replay-id", "mendable", "",
			http.Header{"Idempotency-Key": {"replay-id-1"}})
		return status, string(b)
	}
	status, _ := send()
	require.Equal(t, http.StatusInternalServerError, status)
	letters, _, err := dead.List(t.Context(), "default", deadletter.ListOptions{Agent: "Flaky"})
	require.NoError(t, err)
	require.Len(t, letters, 1)

	f.mended.Store(true)
	_, err = dead.Replay(t.Context(), "default", letters[0].ID)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the replayed request ran", func() bool { return f.mendedRuns.Load() == 1 })
	waitFor(t, 5*time.Second, "the replay's answer is kept for the id", func() bool {
		status, body := send()
		return status == http.StatusOK && body == "mended"
	})
	assert.Equal(t, int32(1), f.mendedRuns.Load(), "runs of the mended request")
}

// An instance with no message for the idle timeout is completed: the next message starts a new
// run with fresh state.
func TestIdleInstanceStartsANewRun(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Host: agent.HostConfig{IdleTimeout: 700 * time.Millisecond}})
	wf := "default:Echo:Supervisor Workflow:idle"
	_, _, b := post(t, s, wf, "count", "")
	first := countOf(t, b)
	_, _, b = post(t, s, wf, "count", "")
	second := countOf(t, b)
	assert.Equal(t, 2, second.Count)
	assert.Equal(t, first.RunID, second.RunID)

	time.Sleep(time.Second)
	_, _, b = post(t, s, wf, "count", "")
	third := countOf(t, b)
	assert.Equal(t, 1, third.Count, "the idle run's state carried over")
	assert.NotEqual(t, first.RunID, third.RunID, "the idle run was not completed")
}

// A request of a tenant an agent is not for is refused by the host too, however it reached the
// inbox (here published directly, as a dead letter replayed after the agent was restricted
// would be), and its handler does not run.
func TestHostRefusesTenantsTheAgentIsNotFor(t *testing.T) {
	var calls atomic.Int32
	vault := agent.New("Vault", agent.Tenants("default"))
	vault.WebhookFunc("open", func(context.Context, *agent.WebhookRequest) agent.Response {
		calls.Add(1)
		return agent.Status(http.StatusOK)
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{vault}})
	nc := natstest.Conn(t, s.NATS)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	send := func(tenant string) *agentbusv1.Reply {
		t.Helper()
		reply := nats.NewInbox()
		sub, err := nc.SubscribeSync(reply)
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		wf := tenant + ":Vault:Supervisor Workflow:a"
		req := &agentbusv1.Request{RequestId: "r-" + tenant, TenantId: tenant, WorkflowId: wf, AgentName: "Vault",
			WorkflowType: "Supervisor Workflow", ActivationName: "a", ParticipantId: "webhook",
			Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "open"}
		enqueue(t, js, req, nats.Header{subject.HeaderReplyTo: {reply}})
		return nextReply(t, sub)
	}
	assert.EqualValues(t, http.StatusNotFound, send("other").GetStatusCode(), "the other tenant's request")
	assert.Zero(t, calls.Load(), "the handler ran for the other tenant")
	assert.EqualValues(t, http.StatusOK, send("default").GetStatusCode(), "the agent's tenant's request")
	assert.EqualValues(t, 1, calls.Load())
}

// A webhook handler that returns Fail is answered at once with the problem its cause chooses,
// not retried, and not kept as a dead letter; one that Responds with Fail is answered the same.
func TestWebhookFailIsAnswered(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	a := agent.New("Failing")
	a.WebhookFunc("order", func(context.Context, *agent.WebhookRequest) agent.Response {
		calls.Add(1)
		return agent.Fail(&agent.Error{Status: http.StatusUnprocessableEntity, Message: "unknown order 41", Err: errors.New("no row 41")})
	})
	a.WebhookFunc("db", func(context.Context, *agent.WebhookRequest) agent.Response {
		calls.Add(1)
		return agent.Fail(errors.New("dialing db-7.internal:5432: refused"))
	})
	a.WebhookFunc("early", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		calls.Add(1)
		r.Respond(agent.Fail(agent.Errorf(http.StatusConflict, "already shipped")))
		return agent.Status(http.StatusOK)
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}})
	for _, c := range []struct {
		method, detail string
		status         int
	}{
		{"order", "unknown order 41", http.StatusUnprocessableEntity},
		{"db", "the handler failed", http.StatusInternalServerError},
		{"early", "already shipped", http.StatusConflict},
	} {
		status, header, body := post(t, s, "Failing", c.method, "")
		assert.Equal(t, c.status, status, c.method)
		assert.Equal(t, "application/problem+json", header.Get("Content-Type"), c.method)
		var p problemBody
		assert.NoError(t, json.Unmarshal(body, &p), c.method)
		assert.Equal(t, "urn:agentbus:problem:handler-error", p.Type, c.method)
		assert.Equal(t, c.detail, p.Detail, c.method)
		assert.NotContains(t, string(body), "db-7", c.method)
	}
	assert.EqualValues(t, 3, calls.Load(), "each ran once: a Fail is not retried")
}
