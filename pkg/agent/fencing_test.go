package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/stacktest"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// A host dies while handling a request: the survivor runs it again as soon as it takes the
// partition over (the dead host's heartbeat is DeadAfter old), not after the ack wait.
func TestCrashedHostsRequestComesBackAtOnce(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	const ackWait = 30 * time.Second
	s, doomed, crash := startDoomedOwner(t, sa, ackWait)

	step(t, s, "x", "1", "1m")
	waitFor(t, 5*time.Second, "the step runs on the doomed host", func() bool {
		ns, hosts := sa.starts("x")
		return len(ns) == 1 && hosts[0] == doomed
	})
	crash()
	took := waitFor(t, ackWait/2, "the survivor runs the step again", func() bool {
		ns, hosts := sa.starts("x")
		return len(ns) == 2 && hosts[1] == "survivor"
	})
	t.Logf("the survivor ran the dead host's request %v after the crash (ack wait %v)", took.Round(time.Millisecond), ackWait)
}

// A request whose hosts died with it more often than it may be tried is kept as a dead letter
// without running again, and its caller, still waiting, gets the dead letter's answer.
func TestRequestOfCrashedHostsAnswersAsDeadLetter(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	const ackWait = 30 * time.Second
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()},
		Host: agent.HostConfig{ID: "survivor", AckWait: ackWait, MaxDeliveries: 1}})
	doomed, nc, cancel := startOwner(t, s, "Seq", "survivor",
		agent.HostConfig{Agents: []*agent.Agent{sa.agent()}, AckWait: ackWait, ShutdownGrace: 100 * time.Millisecond})

	// The caller waits on a reply subject of its own, as an ingress does.
	caller := natstest.Conn(t, s.NATS)
	replyTo := caller.NewRespInbox()
	replies, err := caller.SubscribeSync(replyTo)
	require.NoError(t, err)
	js, err := jetstream.New(caller)
	require.NoError(t, err)
	req := stepRequest("x", "1", "1m")
	req.ReplyTo = replyTo
	enqueue(t, js, req, nil)
	waitFor(t, 5*time.Second, "the step runs on the doomed host", func() bool {
		_, hosts := sa.starts("x")
		return len(hosts) == 1 && hosts[0] == doomed
	})
	nc.Close() // the doomed host crashes: its one delivery is the request's one try
	cancel()

	requireDeadLetterAnswer(t, replies, ackWait/2, "delivered 1 times without being finished")
	_, hosts := sa.starts("x")
	assert.Equal(t, []string{doomed}, hosts, "the request does not run again")
}

// requireDeadLetterAnswer waits up to wait for the answer a caller gets on replies and checks
// that it is a dead letter's, its detail naming why.
func requireDeadLetterAnswer(t *testing.T, replies *nats.Subscription, wait time.Duration, why string) {
	t.Helper()
	m, err := replies.NextMsg(wait)
	require.NoError(t, err, "the caller got no answer")
	var rep agentbusv1.Reply
	require.NoError(t, proto.Unmarshal(m.Data, &rep))
	assert.Equal(t, problem.DeadLettered.Slug, rep.GetError())
	assert.EqualValues(t, problem.DeadLettered.Status, rep.GetStatusCode())
	assert.Contains(t, string(rep.GetContent()), why)
}

// incAgent is an agent whose webhook inc counts its runs per host and adds one to the
// instance's state; on the host named paused it waits for release before it writes.
type incAgent struct {
	name    string
	mu      sync.Mutex
	ran     map[string]int
	lateErr error // the last state write that failed
	paused  atomic.Value
	release chan struct{}
}

func newIncAgent(name string) *incAgent {
	a := &incAgent{name: name, ran: map[string]int{}, release: make(chan struct{})}
	a.paused.Store("")
	return a
}

// agent builds the agent, for one host.
func (a *incAgent) agent() *agent.Agent {
	ag := agent.New(a.name)
	ag.WebhookFunc("inc", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		host := r.Instance().HostID()
		a.mu.Lock()
		a.ran[host]++
		a.mu.Unlock()
		if host == a.paused.Load() {
			<-a.release
		}
		type state struct{ Count int }
		s, err := agent.UpdateState(ctx, r.Instance(), func(s *state) error { s.Count++; return nil })
		if err != nil {
			a.mu.Lock()
			a.lateErr = err
			a.mu.Unlock()
			return agent.Status(http.StatusInternalServerError)
		}
		return agent.JSON(http.StatusOK, map[string]int{"count": s.Count})
	})
	return ag
}

// runs returns how often the request ran on the host.
func (a *incAgent) runs(host string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ran[host]
}

// late returns the last state write that failed.
func (a *incAgent) late() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lateErr
}

// enqueueInc puts an inc request of the agent's instance activation, conversation p, in the
// inbox and returns the instance's workflow id.
func enqueueInc(t *testing.T, s *stacktest.Stack, agentName, activation, requestID string) string {
	t.Helper()
	js := natstest.JetStream(t, s.NATS)
	wf := "default:" + agentName + ":Supervisor Workflow:" + activation
	enqueue(t, js, &agentbusv1.Request{RequestId: requestID, TenantId: "default", WorkflowId: wf, AgentName: agentName,
		WorkflowType: "Supervisor Workflow", ActivationName: activation, ParticipantId: "p", Kind: agentbusv1.Kind_KIND_WEBHOOK,
		Method: "inc", CreatedAtMs: time.Now().UnixMilli()}, nil)
	return wf
}

// stateCount reads the Count of an instance's state.
func stateCount(t *testing.T, s *stacktest.Stack, wf string) int {
	t.Helper()
	rec, err := instance.NewStore(s.Res.Instances).Get(t.Context(), "default", wf)
	require.NoError(t, err)
	var st struct{ Count int }
	require.NoError(t, json.Unmarshal(rec.State, &st))
	return st.Count
}

// A host that pauses (here: cut off from NATS) for longer than the takeover while it handles a
// request cannot finish it once it comes back: the survivor took the partition over and ran the
// request; the paused host's lease lapsed, and its late state write is refused. The state counts
// the request once.
func TestPausedHostCannotFinishATakenOverRequest(t *testing.T) {
	t.Parallel()
	fa := newIncAgent("Fence")
	const ackWait = 30 * time.Second
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{fa.agent()},
		Host: agent.HostConfig{ID: "survivor", AckWait: ackWait}})

	g := &natstest.Proxy{Server: s.NATS.Server}
	id := idOwning("Fence", 1, 0, "survivor")
	fa.paused.Store(id)
	nc := g.Connect(t, id)
	h, _, _ := startHost(t, s, agent.HostConfig{ID: id, Conn: nc, Agents: []*agent.Agent{fa.agent()}, AckWait: ackWait, ShutdownGrace: time.Second})
	waitFor(t, 5*time.Second, "the doomed host owns the partition", func() bool {
		return len(h.Partitions()["Fence"]) == 1 && settled(t, s, "Fence", 1, []string{"survivor", id})
	})

	wf := enqueueInc(t, s, "Fence", "f", "inc-1")
	waitFor(t, 5*time.Second, "the paused host starts the request", func() bool { return fa.runs(id) == 1 })

	g.Pause() // the host pauses
	paused := time.Now()
	took := waitFor(t, ackWait/2, "the survivor runs the request", func() bool { return fa.runs("survivor") == 1 })
	t.Logf("the survivor ran the paused host's request %v after the pause", took.Round(time.Millisecond))
	close(fa.release) // the paused handler goes on: its state write waits for the lease
	time.Sleep(8*time.Second - time.Since(paused))
	g.Resume() // the host comes back

	waitFor(t, 10*time.Second, "the paused host's late write is refused", func() bool { return fa.late() != nil })
	assert.Contains(t, fa.late().Error(), "took the request's partition over")

	time.Sleep(time.Second)
	assert.Equal(t, 1, stateCount(t, s, wf), "the request changed the state more than once")
	// The request and its answer are stored once.
	js := natstest.JetStream(t, s.NATS)
	msgs, _, err := history.NewStore(s.Res.Messages, s.Res.Topics, js).Page(t.Context(), "default", wf, "p", history.PageOptions{Size: 10})
	require.NoError(t, err)
	var got []string
	for _, m := range msgs {
		got = append(got, fmt.Sprintf("%s %d", m.RequestID, m.Direction))
	}
	assert.Len(t, msgs, 2, "thread: %s", strings.Join(got, " | "))
}

// A host whose lease lapses (cut off from NATS for longer than the lease) while no other host
// runs its agent is not fenced: nothing took its partitions over, so when it is back its paused
// handler's state write lands, and the request is answered once.
func TestLapsedLeaseWithoutTakeoverGoesOn(t *testing.T) {
	t.Parallel()
	fa := newIncAgent("Alone")
	fa.paused.Store("alone")
	s := stacktest.Start(t, stacktest.Options{Partitions: 1})
	g := &natstest.Proxy{Server: s.NATS.Server}
	nc := g.Connect(t, "alone")
	startHost(t, s, agent.HostConfig{ID: "alone", Conn: nc, Agents: []*agent.Agent{fa.agent()}, AckWait: 30 * time.Second})

	wf := enqueueInc(t, s, "Alone", "a", "alone-1")
	waitFor(t, 5*time.Second, "the handler starts", func() bool { return fa.runs("alone") == 1 })

	g.Pause() // cut off for longer than the lease
	close(fa.release)
	time.Sleep(4 * time.Second)
	g.Resume()

	store := instance.NewStore(s.Res.Instances)
	waitFor(t, 15*time.Second, "the paused request's state write lands", func() bool {
		rec, err := store.Get(t.Context(), "default", wf)
		if err != nil {
			return false
		}
		var st struct{ Count int }
		return json.Unmarshal(rec.State, &st) == nil && st.Count == 1
	})
	time.Sleep(time.Second)
	assert.Equal(t, 1, fa.runs("alone"), "the request ran again")
}
