package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// stepper is an agent whose handlers make durable steps and count how often each step's
// function ran.
type stepper struct {
	incs, checks atomic.Int32
	mismatch     atomic.Value // the error the mismatching run's second step got

	mu    sync.Mutex
	ran   map[string][]string // step name: the hosts it ran on
	doom  string              // the host whose "two" handler waits between its steps until it ends
	pause chan struct{}       // closed when the doomed host's handler waits between its steps
}

func newStepper() *stepper {
	return &stepper{ran: map[string][]string{}, pause: make(chan struct{})}
}

func (sp *stepper) agent() *agent.Agent {
	a := agent.New("Steps")
	inc := func(context.Context) (int32, error) { return sp.incs.Add(1), nil }
	// inc makes a step, and fails after it on the first attempt.
	a.DataFunc("inc", func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		v, err := agent.Step(ctx, "inc", inc)
		if err != nil {
			return agent.NoReply, err
		}
		if m.Attempt == 1 {
			return agent.NoReply, agent.Retryable(errors.New("failed after the step"))
		}
		return agent.Answer(map[string]any{"value": v, "attempt": m.Attempt}), nil
	})
	// check's step fails for good; the handler fails on the first attempt whatever it got.
	a.DataFunc("check", func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		_, err := agent.Step(ctx, "check", func(context.Context) (bool, error) {
			sp.checks.Add(1)
			return false, agent.Errorf(http.StatusConflict, "the name is taken")
		})
		if m.Attempt == 1 {
			return agent.NoReply, agent.Retryable(errors.New("failed after the step"))
		}
		return agent.NoReply, err
	})
	// renamed calls its first step by another name on its second attempt.
	a.DataFunc("renamed", func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		name := map[bool]string{true: "fetch", false: "load"}[m.Attempt == 1]
		_, err := agent.Step(ctx, name, inc)
		if m.Attempt == 1 {
			return agent.NoReply, agent.Retryable(errors.New("failed after the step"))
		}
		sp.mismatch.Store(err)
		return agent.NoReply, err
	})
	// names makes steps whose names are not names, and one whose result is too large.
	a.DataFunc("names", func(ctx context.Context, _ *agent.Message) (agent.Reply, error) {
		var refused int
		for _, name := range []string{"", strings.Repeat("n", agent.MaxStepName+1), "a\nb"} {
			if _, err := agent.Step(ctx, name, inc); err != nil {
				refused++
			}
		}
		big := func(context.Context) (string, error) { return strings.Repeat("x", agent.MaxStepResult), nil }
		if _, err := agent.Step(ctx, "big", big); err != nil && strings.Contains(err.Error(), "more than") {
			refused++
		}
		return agent.Answer(refused), nil
	})
	// tally changes the state and posts in its step; it fails after the step on the first
	// attempt, and posts again on the second.
	a.DataFunc("tally", func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		inst := m.Instance()
		_, err := agent.Step(ctx, "count", func(ctx context.Context) (int, error) {
			sp.incs.Add(1)
			s, err := agent.UpdateState(ctx, inst, func(s *tallyState) error { s.N++; return nil })
			if err != nil {
				return 0, err
			}
			return s.N, inst.Post(ctx, agent.Post{Text: "tally: in the step"})
		})
		if err != nil {
			return agent.NoReply, err
		}
		if m.Attempt == 1 {
			return agent.NoReply, agent.Retryable(errors.New("failed after the step"))
		}
		if err := inst.Post(ctx, agent.Post{Text: "tally: after the step"}); err != nil {
			return agent.NoReply, err
		}
		var s tallyState
		if err := inst.State(&s); err != nil {
			return agent.NoReply, err
		}
		return agent.Answer(s.N), nil
	})
	a.DataFunc("plain", func(context.Context, *agent.Message) (agent.Reply, error) { return agent.Say("plain"), nil })
	a.DataFunc("two", sp.two)
	a.WebhookFunc("inc", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		v, err := agent.Step(ctx, "inc", inc)
		if err != nil {
			return agent.Fail(err)
		}
		if r.Attempt == 1 {
			return agent.Retry(errors.New("failed after the step"))
		}
		return agent.JSON(http.StatusOK, map[string]any{"value": v, "attempt": r.Attempt})
	})
	return a
}

// two makes two steps; on the doomed host it waits between them until its context ends.
func (sp *stepper) two(ctx context.Context, m *agent.Message) (agent.Reply, error) {
	host := m.Instance().HostID()
	run := func(name string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			sp.mu.Lock()
			defer sp.mu.Unlock()
			sp.ran[name] = append(sp.ran[name], host)
			return name + " on " + host, nil
		}
	}
	first, err := agent.Step(ctx, "first", run("first"))
	if err != nil {
		return agent.NoReply, err
	}
	if host == sp.doomed() {
		close(sp.pause)
		<-ctx.Done()
		return agent.NoReply, agent.Retryable(ctx.Err())
	}
	second, err := agent.Step(ctx, "second", run("second"))
	if err != nil {
		return agent.NoReply, err
	}
	return agent.Say(first + ", " + second), nil
}

// tallyState is the state of the tally method: how often its step changed it.
type tallyState struct {
	N int `json:"n"`
}

// doomed returns the host whose handler waits between its steps.
func (sp *stepper) doomed() string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.doom
}

// ranOn returns the hosts a step of two ran on.
func (sp *stepper) ranOn(name string) []string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return slices.Clone(sp.ran[name])
}

// journalWatch counts, on a stack's NATS, the records published to the steps journal and the
// JetStream API calls that read or purge it. The counts follow the order in which the server
// sent the watch the messages: once a purge is counted, so is every record the purging host
// published before it.
type journalWatch struct {
	records, reads, purges atomic.Int32
	nc                     *nats.Conn // the watch's connection: closing it ends the watch
}

func watchJournal(t testing.TB, s *stacktest.Stack) *journalWatch {
	t.Helper()
	nc := natstest.Conn(t, s.NATS)
	w := &journalWatch{nc: nc}
	// One channel for every subscription, filled by the connection's reader in arrival order
	// (a callback per subscription would run in a goroutine of its own, in no common order).
	msgs := make(chan *nats.Msg, 4096)
	counters := map[*nats.Subscription]*atomic.Int32{}
	for subj, n := range map[string]*atomic.Int32{
		subject.StepsSubjects():                            &w.records,
		"$JS.API.STREAM.MSG.GET." + subject.StepsStream:    &w.reads,
		"$JS.API.DIRECT.GET." + subject.StepsStream + ".>": &w.reads,
		"$JS.API.STREAM.PURGE." + subject.StepsStream:      &w.purges,
	} {
		sub, err := nc.ChanSubscribe(subj, msgs)
		require.NoError(t, err)
		counters[sub] = n
	}
	require.NoError(t, nc.Flush())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-msgs:
				counters[m.Sub].Add(1)
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return w
}

// journalSize is how many records the steps journal holds.
func journalSize(t *testing.T, s *stacktest.Stack) uint64 {
	t.Helper()
	info, err := s.Res.Steps.Info(t.Context())
	require.NoError(t, err)
	return info.State.Msgs
}

func startStepper(t *testing.T, sp *stepper) *stacktest.Stack {
	t.Helper()
	return stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{sp.agent()}, Host: agent.HostConfig{MaxDeliveries: 3}})
}

// stepReply is the data of a Data reply of inc.
type stepReply struct {
	Response struct {
		Data struct {
			Value   int `json:"value"`
			Attempt int `json:"attempt"`
		} `json:"data"`
	} `json:"response"`
}

// A step's result is recorded: the attempt after a Retryable failure gets it back without
// running the step again. The request's journal is purged once it is answered.
func TestStepResultSurvivesARetry(t *testing.T) {
	t.Parallel()
	sp := newStepper()
	s := startStepper(t, sp)
	w := watchJournal(t, s)

	status, body := sendData(t, s, "Steps", "default", "ada", "inc", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	var rep stepReply
	require.NoError(t, json.Unmarshal(body, &rep), "%s", body)
	assert.Equal(t, 2, rep.Response.Data.Attempt, "the handler failed once")
	assert.Equal(t, 1, rep.Response.Data.Value, "the second attempt got the first one's result")
	assert.EqualValues(t, 1, sp.incs.Load(), "the step ran again")

	// The purge request is seen here before the server has applied it: wait for both.
	waitFor(t, 5*time.Second, "the journal is purged", func() bool { return w.purges.Load() == 1 && journalSize(t, s) == 0 })
	assert.EqualValues(t, 1, w.records.Load(), "records written")
	assert.EqualValues(t, 1, w.reads.Load(), "journal reads: the retry's (a first attempt has recorded nothing and reads nothing)")
	assert.Zero(t, journalSize(t, s), "the answered request's journal")
}

// A step's permanent error is recorded: the next attempt gets it back, with its status and
// message, without running the step.
func TestStepErrorIsRecorded(t *testing.T) {
	t.Parallel()
	sp := newStepper()
	s := startStepper(t, sp)

	status, body := sendData(t, s, "Steps", "default", "ada", "check", map[string]any{})
	assert.Equal(t, http.StatusConflict, status, "%s", body)
	assert.Contains(t, string(body), "the name is taken")
	assert.EqualValues(t, 1, sp.checks.Load(), "the step ran again")
}

// An attempt whose step has another name than the one recorded gets ErrStepMismatch naming
// both; the caller gets a handler error that names neither.
func TestStepMismatch(t *testing.T) {
	t.Parallel()
	sp := newStepper()
	s := startStepper(t, sp)

	status, body := sendData(t, s, "Steps", "default", "ada", "renamed", map[string]any{})
	assert.Equal(t, http.StatusInternalServerError, status, "%s", body)
	assert.NotContains(t, string(body), "fetch")
	err, _ := sp.mismatch.Load().(error)
	require.Error(t, err)
	assert.ErrorIs(t, err, agent.ErrStepMismatch)
	assert.Contains(t, err.Error(), `"load"`)
	assert.Contains(t, err.Error(), `"fetch"`)
	assert.EqualValues(t, 1, sp.incs.Load(), "the renamed step ran")
}

// A request whose handler makes no step does no journal work: no record, no read, no purge.
func TestNoStepNoJournalWork(t *testing.T) {
	t.Parallel()
	sp := newStepper()
	s := startStepper(t, sp)
	w := watchJournal(t, s)

	status, body := sendData(t, s, "Steps", "default", "ada", "plain", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	// A request with steps after it: once it is answered, the plain one is long done.
	status, body = sendData(t, s, "Steps", "default", "ada", "inc", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	waitFor(t, 5*time.Second, "the stepping request's journal is purged", func() bool { return w.purges.Load() == 1 && journalSize(t, s) == 0 })
	assert.EqualValues(t, 1, w.records.Load(), "records: the stepping request's one")
	assert.EqualValues(t, 1, w.reads.Load(), "reads: the stepping request's retry's one")
	assert.Zero(t, journalSize(t, s))
}

// A host dies while its handler is between two steps: the host that takes the request over
// gets the first step's result from the journal and runs only the second.
func TestStepNotRunAgainAfterItsHostDied(t *testing.T) {
	t.Parallel()
	sp := newStepper()
	const ackWait = 30 * time.Second
	s, doomed, crash := startDoomed(t, "Steps", sp.agent, ackWait)
	sp.mu.Lock()
	sp.doom = doomed
	sp.mu.Unlock()

	js := natstest.JetStream(t, s.NATS)
	enqueue(t, js, &agentbusv1.Request{RequestId: "two-1", TenantId: "default", WorkflowId: "default:Steps:Supervisor Workflow:default",
		AgentName: "Steps", WorkflowType: "Supervisor Workflow", ActivationName: "default", ParticipantId: "p",
		Kind: agentbusv1.Kind_KIND_DATA, Method: "two", Data: []byte(`{}`), CreatedAtMs: time.Now().UnixMilli()}, nil)
	select {
	case <-sp.pause:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the doomed host's handler did not reach its second step")
	}
	crash() // the host dies: no heartbeat, no acknowledgement

	waitFor(t, ackWait/2, "the survivor runs the second step", func() bool { return len(sp.ranOn("second")) == 1 })
	assert.Equal(t, []string{doomed}, sp.ranOn("first"), "the first step ran again")
	assert.Equal(t, []string{"survivor"}, sp.ranOn("second"))
	waitFor(t, 5*time.Second, "the journal is purged", func() bool { return journalSize(t, s) == 0 })
}

// A webhook handler's step is recorded as a Data handler's is.
func TestStepInWebhook(t *testing.T) {
	t.Parallel()
	sp := newStepper()
	s := startStepper(t, sp)

	status, _, body := post(t, s, "Steps", "inc", "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.JSONEq(t, `{"value":1,"attempt":2}`, string(body))
	assert.EqualValues(t, 1, sp.incs.Load(), "the step ran again")
	waitFor(t, 5*time.Second, "the journal is purged", func() bool { return journalSize(t, s) == 0 })
}

// Outside a handler Step runs nothing and fails; a step with a name that is not one fails, and
// so does one whose result is too large to record.
func TestStepOutsideAHandler(t *testing.T) {
	t.Parallel()
	ran := false
	_, err := agent.Step(context.Background(), "x", func(context.Context) (int, error) { ran = true; return 1, nil })
	require.Error(t, err)
	assert.False(t, ran)
	assert.True(t, strings.HasPrefix(err.Error(), "agent: "), err.Error())

	sp := newStepper()
	s := startStepper(t, sp)
	status, body := sendData(t, s, "Steps", "default", "ada", "names", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"data":4`, "steps refused")
	assert.Zero(t, sp.incs.Load(), "steps ran")
}

// A step that changed the instance state and posted leaves both to a rerun that replays it: the
// attempt after a Retryable failure starts from the state the request found, and the replayed
// step gives it the state the step left (the count is 1, not 0 nor 2); the post after the step
// is numbered after the step's, so it is stored, once, and the step's is not stored again.
func TestStepKeepsItsStateAndEffects(t *testing.T) {
	t.Parallel()
	sp := newStepper()
	s := startStepper(t, sp)

	status, body := sendData(t, s, "Steps", "default", "ada", "tally", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"data":1`, "the state after the rerun")
	assert.EqualValues(t, 1, sp.incs.Load(), "the step ran again")
	// A second request counts on from there.
	status, body = sendData(t, s, "Steps", "default", "ada", "tally", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"data":2`, "the state after the second request")

	// Posts are stored after the reply, as their own requests.
	count := func(text string) int {
		n := 0
		for _, m := range threadAt(t, s, "Steps", "default", "ada") {
			if m.Text != nil && *m.Text == text {
				n++
			}
		}
		return n
	}
	waitFor(t, 5*time.Second, "both requests' posts are stored", func() bool {
		return count("tally: in the step") >= 2 && count("tally: after the step") >= 2
	})
	assert.Equal(t, 2, count("tally: in the step"), "posts made in the step, by two requests")
	assert.Equal(t, 2, count("tally: after the step"), "posts made after the step, by two requests")
}
