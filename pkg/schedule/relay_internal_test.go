package schedule

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// TestFiredTimerRelayedTwiceCountsOffOnce: of two relays of one firing of a one-time timer (as
// when the first one's acknowledgement is lost), only the one that deleted the fired copy counts
// the schedule off its tenant's usage.
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
	store := NewStore(res.JS, res.Schedules).Meter(m)
	const wf = "acme:Echo:Supervisor Workflow:a"
	req := &agentbusv1.Request{TenantId: "acme", WorkflowId: wf, AgentName: "Echo", WorkflowType: "Supervisor Workflow",
		ActivationName: "a", ParticipantId: "u", Kind: agentbusv1.Kind_KIND_DATA, Method: "remind.due"}
	require.NoError(t, store.Set(ctx, Schedule{Name: "soon", Tenant: "acme", WorkflowID: wf, Pattern: At(time.Now().Add(time.Second)), Request: req}, ""))
	require.NoError(t, m.Flush(ctx))
	require.Eventually(t, func() bool { return r.Of("acme").Timers > 0 }, 5*time.Second, 10*time.Millisecond, "the timer counted")
	set := r.Of("acme").Timers

	// Two deliveries of the one firing, by two consumers of the fired subject.
	var fired []jetstream.Msg
	for range 2 {
		cons, err := res.Schedules.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject.SchedulesFired()}})
		require.NoError(t, err)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for msg := range batch.Messages() {
			fired = append(fired, msg)
		}
	}
	require.Len(t, fired, 2, "the fired request, delivered twice")
	for _, msg := range fired {
		store.relay(ctx, slog.New(slog.DiscardHandler), msg)
	}
	require.NoError(t, m.Flush(ctx))
	require.Eventually(t, func() bool { return r.Of("acme").Timers != set }, 5*time.Second, 10*time.Millisecond, "the timer counted off")
	assert.Zero(t, r.Of("acme").Timers, "counted off once")
}
