package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/placement"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/stacktest"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// hostOf asks Echo's host method which host serves an instance.
func hostOf(t *testing.T, s *stacktest.Stack, activation string) string {
	t.Helper()
	status, _, b := post(t, s, "default:Echo:Supervisor Workflow:"+activation, "host", "")
	require.Equal(t, http.StatusOK, status, "host call: %s", b)
	var r struct {
		HostID string `json:"hostId"`
	}
	require.NoError(t, json.Unmarshal(b, &r))
	require.NotEmpty(t, r.HostID)
	return r.HostID
}

// heartbeats reads every host's heartbeat from the bus.
func heartbeats(t *testing.T, s *stacktest.Stack) map[string]registry.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hbs, err := registry.Heartbeats(ctx, s.Res.JS, s.Res.Hosts)
	require.NoError(t, err)
	return hbs
}

// settled reports whether the heartbeats of hosts ids divide the agent's partitions as
// placement says (registry.Settled).
func settled(t *testing.T, s *stacktest.Stack, agentName string, partitions int, ids []string) bool {
	t.Helper()
	return registry.Settled(heartbeats(t, s), agentName, partitions, ids)
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if waited := time.Since(start); waited > within {
			t.Logf("the hosts and their NATS connections when the wait ended: %s",
				stacktest.Goroutines("agentbus/pkg/agent.", "nats-io/nats.go", "agentbus/pkg/natstest."))
			require.FailNow(t, fmt.Sprintf("not within %v: %s", within, what), "waited %v", waited)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// Three hosts of one agent divide its partitions evenly and each serves its share of the
// instances; a fourth that joins owns its share within two seconds, and the instances it took
// are served by it from then on.
func TestHostsShareAndRebalance(t *testing.T) {
	const partitions = 32
	s := stacktest.Start(t, stacktest.Options{Partitions: partitions, Host: agent.HostConfig{ID: "host-a"}})
	for _, id := range []string{"host-b", "host-c"} {
		stop, err := s.AddHost(context.Background(), id)
		require.NoError(t, err)
		t.Cleanup(func() { _ = stop() })
	}
	ids := []string{"host-a", "host-b", "host-c"}
	waitFor(t, 5*time.Second, "three hosts divide the partitions", func() bool { return settled(t, s, echo.Name, partitions, ids) })
	for id, hb := range heartbeats(t, s) {
		n := len(hb.Partitions[echo.Name])
		assert.True(t, n == partitions/3 || n == partitions/3+1, "host %s owns %d partitions", id, n)
	}

	const instances = 150
	served := map[string]int{}
	before := map[string]string{}
	for i := range instances {
		a := fmt.Sprintf("spread-%d", i)
		h := hostOf(t, s, a)
		served[h]++
		before[a] = h
		assert.Equal(t, h, hostOf(t, s, a), "instance %s moved between two calls", a)
	}
	t.Logf("instances served per host: %v", served)
	require.Len(t, served, 3)
	for id, n := range served {
		assert.GreaterOrEqual(t, n, instances*20/100, "host %s serves too few", id)
		assert.LessOrEqual(t, n, instances*46/100, "host %s serves too many", id)
	}

	stop, err := s.AddHost(context.Background(), "host-d")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	took := waitFor(t, 5*time.Second, "the newcomer owns its share", func() bool {
		return settled(t, s, echo.Name, partitions, append(ids, "host-d"))
	})
	t.Logf("partitions settled %v after the fourth host was ready", took)
	assert.Less(t, took, 2*time.Second, "a joining host owns its share within 2 s")

	// Most instances that move go to the newcomer; a few move between the old hosts, whose
	// shares shrink (see package placement).
	toNewcomer, between := 0, 0
	for a, h := range before {
		switch now := hostOf(t, s, a); {
		case now == "host-d":
			toNewcomer++
		case now != h:
			between++
		}
	}
	t.Logf("of %d instances, %d moved to the newcomer and %d between the old hosts", instances, toNewcomer, between)
	assert.Positive(t, toNewcomer)
	assert.LessOrEqual(t, between, toNewcomer/2)
}

// seqAgent records every call it starts and ends, per conversation, so that tests can check
// the order requests ran in and on which host.
type seqAgent struct {
	mu     sync.Mutex
	events []seqEvent
}

type seqEvent struct {
	host, participant, n string
	end                  bool
	at                   time.Time
}

func (sa *seqAgent) add(e seqEvent) {
	sa.mu.Lock()
	sa.events = append(sa.events, e)
	sa.mu.Unlock()
}

// starts returns, for a participant, the n of each call started, in order, with the host.
func (sa *seqAgent) starts(participant string) (ns, hosts []string) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	for _, e := range sa.events {
		if e.participant == participant && !e.end {
			ns, hosts = append(ns, e.n), append(hosts, e.host)
		}
	}
	return ns, hosts
}

func (sa *seqAgent) agent() *agent.Agent {
	a := agent.New("Seq")
	a.WebhookFunc("step", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		host := r.Instance().HostID()
		sa.add(seqEvent{host: host, participant: r.ParticipantID, n: r.Params["n"], at: time.Now()})
		if d, err := time.ParseDuration(r.Params["sleep"]); err == nil {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		sa.add(seqEvent{host: host, participant: r.ParticipantID, n: r.Params["n"], end: true, at: time.Now()})
		return agent.Text(http.StatusOK, r.Params["n"])
	})
	// Chat offers the tool nap to the offline model ("call nap {\"n\":\"1\",\"sleep\":\"1m\"}"): its
	// first run of a step sleeps.
	a.DataFunc("nap", func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		var p struct{ N, Sleep string }
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return agent.Reply{}, err
		}
		host := m.Instance().HostID()
		ran, _ := sa.starts(m.ParticipantID)
		sa.add(seqEvent{host: host, participant: m.ParticipantID, n: p.N, at: time.Now()})
		if d, err := time.ParseDuration(p.Sleep); err == nil && !slices.Contains(ran, p.N) {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		sa.add(seqEvent{host: host, participant: m.ParticipantID, n: p.N, end: true, at: time.Now()})
		return agent.Answer(p.N), nil
	})
	a.Chat(agent.ChatWithTools(llm.Offline()))
	return a
}

// step publishes a Seq step request of a conversation to the inbox, as the ingress does, and
// returns once JetStream has it: steps published one after the other are in that order.
func step(t *testing.T, s *stacktest.Stack, participant, n, sleep string) {
	t.Helper()
	nc := natstest.Conn(t, s.NATS)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	enqueue(t, js, stepRequest(participant, n, sleep), nil)
}

// stepRequest is the request of a Seq step, as step publishes it.
func stepRequest(participant, n, sleep string) *agentbusv1.Request {
	return &agentbusv1.Request{RequestId: fmt.Sprintf("%s-%s-%d", participant, n, time.Now().UnixNano()), TenantId: "default",
		WorkflowId: seqWorkflow, AgentName: "Seq", WorkflowType: "Supervisor Workflow", ActivationName: "default", ParticipantId: participant,
		Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "step", Params: map[string]string{"n": n, "sleep": sleep}, CreatedAtMs: time.Now().UnixMilli()}
}

// chatStep publishes a Seq chat step, as step does a webhook step: a chat message asking the
// model to call the tool nap.
func chatStep(t *testing.T, s *stacktest.Stack, participant, n, sleep string) string {
	t.Helper()
	js := natstest.JetStream(t, s.NATS)
	id := fmt.Sprintf("%s-%s-%d", participant, n, time.Now().UnixNano())
	req := &agentbusv1.Request{RequestId: id, TenantId: "default",
		WorkflowId: seqWorkflow, AgentName: "Seq", WorkflowType: "Supervisor Workflow", ActivationName: "default", ParticipantId: participant,
		Kind: agentbusv1.Kind_KIND_CHAT, Text: fmt.Sprintf(`call nap {"n":%q,"sleep":%q}`, n, sleep), CreatedAtMs: time.Now().UnixMilli()}
	enqueue(t, js, req, nil)
	return id
}

// seqWorkflow is the workflow id of Seq's default instance.
const seqWorkflow = "default:Seq:Supervisor Workflow:default"

// startHost runs a host on a connection of its own (cfg.Conn, or a new one), which the test may
// close to make the host vanish as a crashed process does, with the stack's bus configuration
// unless cfg.Bus sets one.
func startHost(t *testing.T, s *stacktest.Stack, cfg agent.HostConfig) (*agent.Host, *nats.Conn, context.CancelFunc) {
	t.Helper()
	if cfg.Conn == nil {
		nc, err := s.NATS.Connect(cfg.ID)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		cfg.Conn = nc
	}
	nc := cfg.Conn
	if cfg.Bus == (bus.Config{}) {
		cfg.Bus = s.Res.Config
	}
	cfg.Logger = stacktest.Logger(t)
	h, err := agent.NewHost(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-h.Ready():
	case err := <-done:
		done <- err
		require.FailNowf(t, "host did not start", "host %s: %v", cfg.ID, err)
	}
	return h, nc, cancel
}

// startSeqOwner starts, next to the stack's host other, a host of sa (cfg with its ID and Agents
// filled in) whose id placement gives Seq's only partition, and waits until it owns it; it
// returns the host's id, its connection and the cancel of its run.
func startSeqOwner(t *testing.T, s *stacktest.Stack, sa *seqAgent, other string, cfg agent.HostConfig) (string, *nats.Conn, context.CancelFunc) {
	t.Helper()
	cfg.Agents = []*agent.Agent{sa.agent()}
	return startOwner(t, s, "Seq", other, cfg)
}

// startOwner starts, next to the stack's host other, a host (cfg with its ID filled in) whose id
// placement gives the only partition of agentName, and waits until it owns it; it returns the
// host's id, its connection and the cancel of its run.
func startOwner(t *testing.T, s *stacktest.Stack, agentName, other string, cfg agent.HostConfig) (string, *nats.Conn, context.CancelFunc) {
	t.Helper()
	cfg.ID = idOwning(agentName, 1, 0, other)
	h, nc, cancel := startHost(t, s, cfg)
	waitFor(t, 5*time.Second, "host "+cfg.ID+" owns the partition", func() bool {
		return slices.Equal(h.Partitions()[agentName], []int{0}) && settled(t, s, agentName, 1, []string{other, cfg.ID})
	})
	return cfg.ID, nc, cancel
}

// startDoomedOwner starts a stack whose host "survivor" runs Seq with ackWait, and a second host
// that owns Seq's one partition; crash makes that host vanish as a crashed process does: no
// heartbeat, no acknowledgement, no handover.
func startDoomedOwner(t *testing.T, sa *seqAgent, ackWait time.Duration) (s *stacktest.Stack, doomed string, crash func()) {
	t.Helper()
	return startDoomed(t, "Seq", sa.agent, ackWait)
}

// startDoomed starts a stack of one partition whose host "survivor" runs an agent newAgent
// makes, named agentName, with ackWait, and a second host of another such agent that owns the
// partition; crash makes that host vanish as a crashed process does: no heartbeat, no
// acknowledgement, no handover.
func startDoomed(t *testing.T, agentName string, newAgent func() *agent.Agent, ackWait time.Duration) (s *stacktest.Stack, doomed string, crash func()) {
	t.Helper()
	s = stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{newAgent()},
		Host: agent.HostConfig{ID: "survivor", AckWait: ackWait}})
	doomed, nc, cancel := startOwner(t, s, agentName, "survivor",
		agent.HostConfig{Agents: []*agent.Agent{newAgent()}, AckWait: ackWait, ShutdownGrace: 100 * time.Millisecond})
	return s, doomed, func() {
		nc.Close()
		cancel()
	}
}

// idOwning returns a host id that placement gives the agent's partition p, next to other.
func idOwning(agentName string, partitions, p int, other string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("host-%d", i)
		if placement.Assign(agentName, partitions, []string{other, id})[p] == id {
			return id
		}
	}
}

// A host dies while handling a request; a later request of the same conversation is sent before
// the survivor takes the partition over. The survivor runs the dead host's request first (once
// the bus redelivers it), then the later one: the conversation is not reordered.
func TestCrashedHostsRequestRunsFirst(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	// The ack wait is longer than the takeover (a heartbeat 3 s old), so that the dead host's
	// request is still pending when the survivor starts pulling.
	s, doomed, crash := startDoomedOwner(t, sa, 6*time.Second)

	step(t, s, "x", "1", "2s")
	waitFor(t, 5*time.Second, "the first step runs on the doomed host", func() bool {
		ns, hosts := sa.starts("x")
		return len(ns) == 1 && hosts[0] == doomed
	})
	crashed := time.Now()
	crash()
	step(t, s, "x", "2", "")

	waitFor(t, 30*time.Second, "both steps ran on the survivor", func() bool {
		ns, hosts := sa.starts("x")
		return len(ns) >= 3 && hosts[len(hosts)-1] == "survivor"
	})
	ns, hosts := sa.starts("x")
	t.Logf("steps started: %v on %v; survivor finished %v after the crash", ns, hosts, time.Since(crashed))
	var survivor []string
	for i, h := range hosts {
		if h == "survivor" {
			survivor = append(survivor, ns[i])
		}
	}
	assert.Equal(t, []string{"1", "2"}, survivor, "the survivor ran the conversation out of order")
}

// A host dies while a chat request's tool call runs, after the request's incoming message and
// the tool call were stored (two records); the survivor runs the request again. The thread holds
// each message once: the survivor read back what the dead host had stored before storing
// anything (a plain cursor knows only the newest record, and would store the chat message again).
func TestRedeliveredRequestStoresItsMessagesOnce(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	s, doomed, crash := startDoomedOwner(t, sa, 2*time.Second)

	js := natstest.JetStream(t, s.NATS)
	store := history.NewStore(s.Res.Messages, s.Res.Topics, js)
	ctx := context.Background()
	thread := func() []history.Message {
		msgs, _, err := store.Page(ctx, "default", seqWorkflow, "x", history.PageOptions{Size: 10})
		require.NoError(t, err)
		return msgs
	}

	id := chatStep(t, s, "x", "1", "1m")
	waitFor(t, 5*time.Second, "the doomed host stored the chat message and the tool call, and naps", func() bool {
		ns, hosts := sa.starts("x")
		return len(ns) == 1 && hosts[0] == doomed && len(thread()) == 2
	})
	crash()

	waitFor(t, 30*time.Second, "the survivor answered the chat message", func() bool {
		msgs := thread()
		return len(msgs) > 0 && msgs[0].MessageType == history.Chat && msgs[0].Direction == history.Out
	})
	time.Sleep(200 * time.Millisecond) // anything stored twice would be stored by now
	var got []string
	for _, m := range thread() {
		assert.Equal(t, id, m.RequestID)
		text := "-"
		if m.Text != nil {
			text = *m.Text
		}
		got = append(got, fmt.Sprintf("%d %d %s", m.Direction, m.MessageType, text))
	}
	want := []string{
		fmt.Sprintf("%d %d nap returned \"1\"", history.Out, history.Chat),
		fmt.Sprintf("%d %d -", history.Out, history.Data),
		fmt.Sprintf("%d %d nap", history.In, history.Data),
		fmt.Sprintf(`%d %d call nap {"n":"1","sleep":"1m"}`, history.In, history.Chat),
	}
	assert.Equal(t, want, got, "the thread, newest first")
	_, hosts := sa.starts("x")
	assert.Equal(t, []string{doomed, "survivor"}, hosts, "the hosts that ran the tool")
}

// A host dies while it streams a chat's answer (the model's tool call was sent, and the tool
// naps); the survivor runs the request again. The caller's stream says so with a restart event
// before the survivor's events, and what follows it is the whole answer, streamed once.
func TestRedeliveredStreamRestarts(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	s, doomed, crash := startDoomedOwner(t, sa, 2*time.Second)

	query := url.Values{"workflow": {seqWorkflow}, "type": {"Chat"}, "participantId": {"x"}, "timeoutSeconds": {"60"},
		"text": {`call nap {"n":"1","sleep":"1m"}`}, "apikey": {s.Key}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/api/user/rest/converse?"+query.Encode(), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	events := sseEvents(resp.Body)

	first := <-events
	require.Equal(t, "tool_call", first.Event, "the doomed host's first event: %+v", first)
	waitFor(t, 5*time.Second, "the doomed host naps in the tool", func() bool {
		ns, hosts := sa.starts("x")
		return len(ns) == 1 && hosts[0] == doomed
	})
	crash()

	var rest []sse.Event
	for ev := range events {
		rest = append(rest, ev)
	}
	// The survivor's attempt is the request's second delivery or a later one (the bus may have
	// delivered it in between, to a host that gave it back before running it).
	require.NotEmpty(t, rest, "the stream after the crash")
	require.Equal(t, "restart", rest[0].Event, "the stream after the crash: %+v", rest)
	last, attempt := 0, 1
	for i, ev := range rest {
		if ev.Event == "restart" {
			var r struct{ Attempt int }
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &r), "restart event %+v", ev)
			assert.Greater(t, r.Attempt, attempt, "restart event %+v after attempt %d", ev, attempt)
			last, attempt = i, r.Attempt
		}
	}
	after := rest[last+1:]
	var names []string
	for _, ev := range after {
		names = append(names, ev.Event)
	}
	require.GreaterOrEqual(t, len(after), 4, "the stream after the last restart: %v", names)
	assert.Equal(t, []string{"tool_call", "tool_result"}, names[:2], "the stream after the last restart: %+v", after)
	require.Equal(t, "message", names[len(names)-1], "the stream after the last restart: %+v", after)
	var text strings.Builder
	for _, ev := range after[2 : len(after)-1] {
		var d struct{ Delta *string }
		require.Equal(t, "delta", ev.Event, "the stream after the last restart: %+v", after)
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &d))
		require.NotNil(t, d.Delta, "delta event %+v", ev)
		text.WriteString(*d.Delta)
	}
	var final struct {
		Response struct{ Text string }
	}
	require.NoError(t, json.Unmarshal([]byte(after[len(after)-1].Data), &final))
	assert.Equal(t, `nap returned "1"`, final.Response.Text)
	assert.Equal(t, final.Response.Text, text.String(), "the deltas after the restart add up to the answer")
	_, hosts := sa.starts("x")
	assert.Equal(t, []string{doomed, "survivor"}, hosts, "the hosts that ran the tool")
}

// sseEvents reads a Server-Sent Events stream and passes on its events, comments left out, as
// they come; the channel closes when the stream ends.
func sseEvents(r io.Reader) <-chan sse.Event {
	out := make(chan sse.Event, 64)
	go func() {
		defer close(out)
		_ = sse.NewReader(r).Each(func(ev sse.Event) bool { out <- ev; return true })
	}()
	return out
}

// A host that stops cleanly while a handler runs lets it finish there, gives the requests queued
// behind it back, and the next owner runs them after it, in order, each once.
func TestCleanHandoverKeepsOrder(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()}, Host: agent.HostConfig{ID: "stays"}})
	leaving, _, cancel := startSeqOwner(t, s, sa, "stays", agent.HostConfig{})

	step(t, s, "y", "1", "1s")
	waitFor(t, 5*time.Second, "the first step runs", func() bool { ns, _ := sa.starts("y"); return len(ns) == 1 })
	for i := 2; i <= 4; i++ {
		step(t, s, "y", fmt.Sprint(i), "")
	}
	time.Sleep(100 * time.Millisecond) // delivered, and queued behind the first, on the leaving host
	cancel()

	waitFor(t, 15*time.Second, "all steps ran", func() bool { ns, _ := sa.starts("y"); return len(ns) == 4 })
	time.Sleep(200 * time.Millisecond)
	ns, hosts := sa.starts("y")
	assert.Equal(t, []string{"1", "2", "3", "4"}, ns, "steps ran out of order or twice")
	assert.Equal(t, leaving, hosts[0], "the running step moved")
	for _, h := range hosts[1:] {
		assert.Equal(t, "stays", h)
	}
	// No step of the conversation started before the previous one ended.
	sa.mu.Lock()
	defer sa.mu.Unlock()
	running := 0
	for _, e := range sa.events {
		if e.participant != "y" {
			continue
		}
		if e.end {
			running--
		} else {
			running++
		}
		assert.LessOrEqual(t, running, 1, "two steps of one conversation ran at once")
	}
}

// A handler that runs longer than the ack wait keeps its request, and so does a request queued
// behind it: neither is delivered twice.
func TestLongHandlerKeepsItsRequest(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()}, Host: agent.HostConfig{AckWait: 300 * time.Millisecond}})
	step(t, s, "z", "1", "1500ms")
	step(t, s, "z", "2", "")
	waitFor(t, 10*time.Second, "both steps ran", func() bool { ns, _ := sa.starts("z"); return len(ns) >= 2 })
	time.Sleep(time.Second) // a redelivery would show by now
	ns, _ := sa.starts("z")
	assert.Equal(t, []string{"1", "2"}, ns)
}

// TestHostsStartingTogetherCountNoTakeover: hosts that start at the same moment divide the
// partitions without counting a takeover from one another, as none of them was taken for dead:
// a count would fence the partition's owner the next time its lease lapsed.
func TestHostsStartingTogetherCountNoTakeover(t *testing.T) {
	t.Parallel()
	const partitions = 16
	s := stacktest.Start(t, stacktest.Options{Partitions: partitions, NoAgents: true})
	ids := []string{"host-a", "host-b", "host-c"}
	var hosts []*agent.Host
	for _, id := range ids {
		nc, err := s.NATS.Connect(id)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		h, err := agent.NewHost(agent.HostConfig{ID: id, Conn: nc, Agents: []*agent.Agent{echo.New()}, Bus: s.Res.Config, Logger: stacktest.Logger(t)})
		require.NoError(t, err)
		hosts = append(hosts, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, h := range hosts {
		wg.Go(func() { _ = h.Run(ctx) })
	}
	for _, h := range hosts {
		select {
		case <-h.Ready():
		case <-time.After(10 * time.Second):
			require.FailNow(t, "a host did not start")
		}
	}
	waitFor(t, 10*time.Second, "three hosts divide the partitions", func() bool { return settled(t, s, echo.Name, partitions, ids) })
	time.Sleep(registry.DeadAfter + time.Second) // past the moment a host may count a takeover
	counted, err := bus.Entries(ctx, s.Res.JS, s.Res.Tenures)
	require.NoError(t, err)
	assert.Empty(t, counted, "takeovers counted between hosts that all live")
}
