package schedule

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/gostack"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// TestFiredTimerRelayedTwiceCountsOffOnce: of two relays of one firing of a one-time timer (as
// when the first one's acknowledgement is lost), only the one that stored the request in the
// inbox counts the schedule off its tenant's usage.
func TestFiredTimerRelayedTwiceCountsOffOnce(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	ctx := t.Context()
	_, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	m, err := usage.NewMeter(res.JS.Conn(), nil)
	require.NoError(t, err)
	r, err := usage.Watch(ctx, res.JS, res.Config, nil)
	require.NoError(t, err)
	defer r.Close()
	store := NewStore(res.JS, res).Meter(m)
	const wf = "acme:Echo:Supervisor Workflow:a"
	req := &agentbusv1.Request{TenantId: "acme", WorkflowId: wf, AgentName: "Echo", WorkflowType: "Supervisor Workflow",
		ActivationName: "a", ParticipantId: "u", Kind: agentbusv1.Kind_KIND_DATA, Method: "remind.due"}
	require.NoError(t, store.Set(ctx, Schedule{Name: "soon", Tenant: "acme", WorkflowID: wf, Pattern: At(time.Now().Add(time.Second)), Request: req}, ""))
	require.NoError(t, m.Flush(ctx))
	require.Eventually(t, func() bool { return r.Of("acme").Timers > 0 }, 5*time.Second, 10*time.Millisecond, "the timer counted")
	set := r.Of("acme").Timers

	// Two deliveries of the one firing, by two consumers of the fired subject.
	shard := subject.TimerShard("acme")
	var fired []jetstream.Msg
	for range 2 {
		cons, err := res.Timers[shard].OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject.SchedulesFired(shard)}})
		require.NoError(t, err)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for msg := range batch.Messages() {
			fired = append(fired, msg)
		}
	}
	require.Len(t, fired, 2, "the fired request, delivered twice")
	for _, msg := range fired {
		store.relay(ctx, slog.New(slog.DiscardHandler), shard, msg)
	}
	require.NoError(t, m.Flush(ctx))
	require.Eventually(t, func() bool { return r.Of("acme").Timers != set }, 5*time.Second, 10*time.Millisecond, "the timer counted off")
	assert.Zero(t, r.Of("acme").Timers, "counted off once")
}

// TestRelayedTimersLeaveTheStream: the fired requests leave the schedules stream a little after
// they are relayed, together, and only those up to the relay consumer's acknowledgement floor:
// one fired earlier and not relayed yet keeps itself and every later one in the stream.
func TestRelayedTimersLeaveTheStream(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	ctx := t.Context()
	_, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	store := NewStore(res.JS, res)
	const wf = "acme:Echo:Supervisor Workflow:a"
	req := &agentbusv1.Request{TenantId: "acme", WorkflowId: wf, AgentName: "Echo", WorkflowType: "Supervisor Workflow",
		ActivationName: "a", ParticipantId: "u", Kind: agentbusv1.Kind_KIND_DATA, Method: "remind.due"}
	due := time.Now().Add(time.Second)
	for _, name := range []string{"first", "second"} {
		require.NoError(t, store.Set(ctx, Schedule{Name: name, Tenant: "acme", WorkflowID: wf, Pattern: At(due), Request: req}, ""))
		due = due.Add(100 * time.Millisecond)
	}
	shard := subject.TimerShard("acme")
	cons, err := res.Timers[shard].CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: relayConsumer,
		FilterSubject: subject.SchedulesFired(shard), AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	require.NoError(t, err)
	var fired []jetstream.Msg
	require.Eventually(t, func() bool {
		batch, err := cons.Fetch(2-len(fired), jetstream.FetchMaxWait(time.Second))
		require.NoError(t, err)
		for msg := range batch.Messages() {
			fired = append(fired, msg)
		}
		return len(fired) == 2
	}, 10*time.Second, 10*time.Millisecond, "both timers fired")
	inStream := func() int {
		info, err := res.Timers[shard].Info(ctx, jetstream.WithSubjectFilter(subject.SchedulesFired(shard)))
		require.NoError(t, err)
		n := 0
		for _, c := range info.State.Subjects {
			n += int(c)
		}
		return n
	}
	require.Equal(t, 2, inStream())

	relayed := make(chan struct{}, 1)
	removing, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		removeRelayed(removing, slog.New(slog.DiscardHandler), store.home("acme"), cons, relayed)
	}()
	defer func() { stop(); <-done }()

	// The second relayed, the first not yet: nothing leaves.
	require.True(t, store.relay(ctx, slog.New(slog.DiscardHandler), shard, fired[1]))
	relayed <- struct{}{}
	time.Sleep(removeEvery + 500*time.Millisecond)
	assert.Equal(t, 2, inStream(), "the floor is below the request not relayed yet")

	// The first relayed too: both leave.
	require.True(t, store.relay(ctx, slog.New(slog.DiscardHandler), shard, fired[0]))
	relayed <- struct{}{}
	require.Eventually(t, func() bool { return inStream() == 0 }, 5*time.Second, 50*time.Millisecond, "both left the stream")
}

// TestIdleRelayKeepsNoLanes: a relay that has relayed nothing keeps no lane and no remover; the
// first timer that fires starts them, and they stop with the relay.
func TestIdleRelayKeepsNoLanes(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	_, err := res.InboxOf(t.Context(), "Echo")
	require.NoError(t, err)
	store := NewStore(res.JS, res)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- store.Relay(ctx, slog.New(slog.DiscardHandler)) }()
	lanes := func() int {
		return len(gostack.Naming("schedule.(*Store).Relay.func", "schedule.removeRelayed"))
	}
	time.Sleep(500 * time.Millisecond)
	assert.Zero(t, lanes(), "an idle relay keeps no goroutine of its own")

	const wf = "acme:Echo:Supervisor Workflow:a"
	req := &agentbusv1.Request{TenantId: "acme", WorkflowId: wf, AgentName: "Echo", WorkflowType: "Supervisor Workflow",
		ActivationName: "a", ParticipantId: "u", Kind: agentbusv1.Kind_KIND_DATA, Method: "remind.due"}
	require.NoError(t, store.Set(ctx, Schedule{Name: "soon", Tenant: "acme", WorkflowID: wf, Pattern: At(time.Now().Add(500 * time.Millisecond)), Request: req}, ""))
	require.Eventually(t, func() bool { return lanes() == relayLanes+subject.TimerShards }, 10*time.Second, 20*time.Millisecond,
		"the lanes and the removers started")
	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, lanes(), "and stopped with the relay")
}
