package schedule_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

func template(participant string) *agentbusv1.Request {
	return &agentbusv1.Request{TenantId: "acme", WorkflowId: "acme:Echo:Supervisor Workflow:a", AgentName: "Echo",
		WorkflowType: "Supervisor Workflow", ActivationName: "a", ParticipantId: participant,
		Kind: agentbusv1.Kind_KIND_DATA, Method: "remind.due"}
}

// inboxRequests reads what reached the inbox after waiting wait (or until want arrived).
func inboxRequests(t *testing.T, res *bus.Resources, want int, wait time.Duration) []*agentbusv1.Request {
	t.Helper()
	ctx := context.Background()
	inbox, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	deadline := time.Now().Add(wait)
	for {
		info, err := inbox.Info(ctx)
		require.NoError(t, err)
		if int(info.State.Msgs) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // and none more
	info, err := inbox.Info(ctx)
	require.NoError(t, err)
	var out []*agentbusv1.Request
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := inbox.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		req := new(agentbusv1.Request)
		require.NoError(t, proto.Unmarshal(m.Data, req))
		out = append(out, req)
	}
	return out
}

// relayingStore is a schedule store on a new bus, with its relay running until the test ends.
func relayingStore(t *testing.T) (*bus.Resources, *schedule.Store, context.Context) {
	t.Helper()
	res := natstest.Bus(t, bus.Config{})
	_, err := res.InboxOf(t.Context(), "Echo") // the agent the timers fire for
	require.NoError(t, err)
	store := schedule.NewStore(res.JS, res)
	ctx, cancel := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() { relayed <- store.Relay(ctx, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { cancel(); <-relayed })
	return res, store, ctx
}

func TestTimersFireOnceAndAreRelayed(t *testing.T) {
	res, store, ctx := relayingStore(t)

	wf := "acme:Echo:Supervisor Workflow:a"
	due := time.Now().Add(time.Second)
	require.NoError(t, store.Set(ctx, schedule.Schedule{Name: "once", Tenant: "acme", WorkflowID: wf, Pattern: schedule.At(due), Request: template("u1")}, "acme:r1.timer.1"))
	// The same set again (a handler run again) is de-duplicated.
	require.NoError(t, store.Set(ctx, schedule.Schedule{Name: "once", Tenant: "acme", WorkflowID: wf, Pattern: schedule.At(due), Request: template("u1")}, "acme:r1.timer.1"))
	require.NoError(t, store.Set(ctx, schedule.Schedule{Name: "never", Tenant: "acme", WorkflowID: wf, Pattern: schedule.At(time.Now().Add(time.Hour)), Request: template("u2")}, ""))

	listed, err := store.List(ctx, "acme", wf)
	require.NoError(t, err)
	require.Len(t, listed, 2)
	assert.Equal(t, "never", listed[0].Name)
	assert.Equal(t, "once", listed[1].Name)
	assert.Equal(t, "u1", listed[1].Request.GetParticipantId())

	cancelled, err := store.Cancel(ctx, "acme", wf, "never")
	require.NoError(t, err)
	assert.True(t, cancelled)
	cancelled, err = store.Cancel(ctx, "acme", wf, "never")
	require.NoError(t, err)
	assert.False(t, cancelled, "a schedule is cancelled once")

	got := inboxRequests(t, res, 2, 4*time.Second)
	require.Len(t, got, 1, "the timer fires once and the cancelled one never")
	assert.Equal(t, "once", got[0].GetTimer())
	assert.Equal(t, "u1", got[0].GetParticipantId())
	assert.Regexp(t, `^timer:\d+-\d+:once$`, got[0].GetRequestId())
	late := time.UnixMilli(got[0].GetCreatedAtMs()).Sub(due)
	t.Logf("fired %v after its time", late)
	assert.Less(t, late, 2*time.Second)

	pending, err := store.Pending(ctx, "acme", wf)
	require.NoError(t, err)
	assert.False(t, pending, "a one-time schedule is gone once it fired")
}

func TestRecurringTimerFiresWithNewRequestIDs(t *testing.T) {
	res, store, ctx := relayingStore(t)

	wf := "acme:Echo:Supervisor Workflow:a"
	require.NoError(t, store.Set(ctx, schedule.Schedule{Name: "tick", Tenant: "acme", WorkflowID: wf, Pattern: schedule.Every(time.Second), Request: template("u1")}, ""))
	got := inboxRequests(t, res, 2, 5*time.Second)
	require.Len(t, got, 2)
	assert.NotEqual(t, got[0].GetRequestId(), got[1].GetRequestId())
	pending, err := store.Pending(ctx, "acme", wf)
	require.NoError(t, err)
	assert.True(t, pending)

	err = store.Set(ctx, schedule.Schedule{Name: "bad", Tenant: "acme", WorkflowID: wf, Pattern: "@every soon", Request: template("u1")}, "")
	assert.ErrorIs(t, err, schedule.ErrInvalid)
}

// A relaying host's request for fired timers that never reaches the server (here: dropped on its
// way) delays a timer by a few seconds at most, not by the request's default expiry of 30 s.
func TestLostRelayRequestDelaysTimersBriefly(t *testing.T) {
	// The relaying host's connection loses its first request for the tenant's fired timers.
	loss := natstest.LosePullRequest(t, "relay", subject.TimerStream(subject.TimerShard("acme")), 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := loss.Res
	relay := schedule.NewStore(loss.Lossy.JS, loss.Lossy)
	rctx, stop := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Relay(rctx, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { stop(); <-relayed })

	store := schedule.NewStore(res.JS, res)
	due := time.Now().Add(500 * time.Millisecond)
	require.NoError(t, store.Set(ctx, schedule.Schedule{Name: "soon", Tenant: "acme", WorkflowID: "acme:Echo:Supervisor Workflow:a",
		Pattern: schedule.At(due), Request: template("u1")}, ""))
	got := inboxRequests(t, res, 1, 20*time.Second)
	require.Len(t, got, 1, "the timer is relayed")
	late := time.Since(due)
	t.Logf("relayed within %v of its time; %d requests for fired timers, %d dropped", late.Round(time.Millisecond),
		loss.Requests.Load(), loss.Proxy.Dropped.Load())
	assert.EqualValues(t, 1, loss.Proxy.Dropped.Load(), "the first request was dropped")
	assert.Less(t, late, 12*time.Second)
}

// TestTimersCountInUsage: a metered store counts what the tenant's schedules take in the
// stream, as the stream counts it: set, set again with more data (replacing), set again with
// the same de-duplication id (nothing), cancelled, and fired once (the relay counts it off);
// a recurring one stays counted after it fired.
func TestTimersCountInUsage(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	ctx := t.Context()
	_, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	m, err := usage.NewMeter(res.JS.Conn(), nil)
	require.NoError(t, err)
	r, err := usage.Watch(ctx, res.JS, res.Config, nil)
	require.NoError(t, err)
	defer r.Close()
	store := schedule.NewStore(res.JS, res).Meter(m)
	// The relay, which counts off fired timers, with the same meter.
	rctx, cancel := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() { relayed <- store.Relay(rctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-relayed }()

	schedules := func() int64 {
		n := int64(0)
		for seq := uint64(1); ; {
			shard := subject.TimerShard("acme")
			raw, err := res.Timers[shard].GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject.InstanceSchedules(shard, "acme", "acme:Echo:Supervisor Workflow:a")))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return n
			}
			require.NoError(t, err)
			n += bus.StoredBytes(raw)
			seq = raw.Sequence + 1
		}
	}
	counted := func(why string) {
		t.Helper()
		want := schedules()
		// Flushed on each look: the relay may count a timer off after the schedule is gone.
		require.Eventually(t, func() bool { return m.Flush(ctx) == nil && r.Of("acme").Timers == want }, 5*time.Second,
			20*time.Millisecond, "%s: usage %d, the stream holds %d", why, r.Of("acme").Timers, want)
	}
	wf := "acme:Echo:Supervisor Workflow:a"
	set := func(name, pattern, participant, dedupe string) {
		t.Helper()
		require.NoError(t, store.Set(ctx, schedule.Schedule{Name: name, Tenant: "acme", WorkflowID: wf, Pattern: pattern, Request: template(participant)}, dedupe))
	}
	later := schedule.At(time.Now().Add(time.Hour))
	set("later", later, "u1", "acme:r1")
	set("tick", schedule.Every(time.Second), "u1", "")
	counted("two set")
	set("later", later, "a participant with a much longer name than before", "")
	counted("one set again, larger")
	set("later", later, "u1", "acme:r1")
	counted("a duplicate")
	cancelled, err := store.Cancel(ctx, "acme", wf, "later")
	require.NoError(t, err)
	require.True(t, cancelled)
	counted("one cancelled")
	set("soon", schedule.At(time.Now().Add(time.Second)), "u2", "")
	counted("a one-time timer set")
	got := inboxRequests(t, res, 3, 5*time.Second) // tick's and soon's
	require.NotEmpty(t, got)
	require.Eventually(t, func() bool {
		pending, err := store.List(ctx, "acme", wf)
		return err == nil && len(pending) == 1
	}, 5*time.Second, 50*time.Millisecond, "soon fired and is gone")
	counted("the one-time timer fired; the recurring one stays")
	assert.Positive(t, r.Of("acme").Timers)

	// The tenant deleted: its timers go, counted off, and fire no more; another tenant's stay.
	theirs := template("u9")
	theirs.TenantId, theirs.WorkflowId = "globex", "globex:Echo:Supervisor Workflow:a"
	require.NoError(t, store.Set(ctx, schedule.Schedule{Name: "theirs", Tenant: "globex", WorkflowID: theirs.WorkflowId, Pattern: later, Request: theirs}, ""))
	require.NoError(t, store.DeleteTenant(ctx, "acme"))
	counted("the tenant deleted")
	assert.Zero(t, r.Of("acme").Timers)
	pending, err := store.List(ctx, "acme", wf)
	require.NoError(t, err)
	assert.Empty(t, pending)
	pending, err = store.List(ctx, "globex", theirs.WorkflowId)
	require.NoError(t, err)
	assert.Len(t, pending, 1, "another tenant's timer stays")
	inbox, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // one relayed as the tenant was deleted lands
	before, err := inbox.Info(ctx)
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond) // tick fired every second
	after, err := inbox.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, before.State.LastSeq, after.State.LastSeq, "the deleted tenant's recurring timer fires no more")
}

// TestTimersSetBeforeTheShards: a deployment made by this release has no AGENTBUS_SCHEDULES; in
// one a previous release made, the timers it set there (the stream of every tenant's timers
// before the shards) are listed, fire there and are relayed (with request ids of that stream's
// form), are cancelled there, and a timer set again with the same name moves to the tenant's
// shard, replacing the old one (which then fires no more), counted once in usage.
func TestTimersSetBeforeTheShards(t *testing.T) {
	fresh := natstest.Bus(t, bus.Config{})
	require.Nil(t, fresh.Schedules, "a new deployment has no stream of the timers before the shards")
	ctx := t.Context()
	// As the previous release made it.
	_, err := fresh.JS.CreateStream(ctx, jetstream.StreamConfig{Name: subject.SchedulesStream,
		Subjects: []string{subject.TimerSubjects(subject.LegacyTimers)}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute, AllowMsgSchedules: true, AllowMsgTTL: true,
		AllowRollup: true, AllowDirect: true})
	require.NoError(t, err)
	res, err := bus.Ensure(ctx, fresh.JS, fresh.Config)
	require.NoError(t, err)
	require.NotNil(t, res.Schedules)
	_, err = res.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	store := schedule.NewStore(res.JS, res)
	rctx, cancel := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() { relayed <- store.Relay(rctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-relayed }()
	m, err := usage.NewMeter(res.JS.Conn(), nil)
	require.NoError(t, err)
	metered := schedule.NewStore(res.JS, res).Meter(m)
	const wf = "acme:Echo:Supervisor Workflow:a"
	// As a previous release's Store.Set published them.
	setLegacy := func(name, pattern, participant string) {
		t.Helper()
		req := template(participant)
		req.Timer = name
		data, err := proto.Marshal(req)
		require.NoError(t, err)
		msg := &nats.Msg{Subject: subject.Schedule(subject.LegacyTimers, "acme", wf, name), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.ScheduleHeader, pattern)
		msg.Header.Set(jetstream.ScheduleTargetHeader, subject.ScheduleFired(subject.LegacyTimers, "acme", wf, name))
		msg.Header.Set(jetstream.ScheduleTTLHeader, "168h")
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		msg.Header.Set(subject.HeaderStoredBytes, "300")
		_, err = res.JS.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	later := schedule.At(time.Now().Add(time.Hour))
	setLegacy("old-once", schedule.At(time.Now().Add(time.Second)), "u1")
	setLegacy("old-cancelled", later, "u2")
	setLegacy("moved", schedule.At(time.Now().Add(1500*time.Millisecond)), "u3")
	listed, err := store.List(ctx, "acme", wf)
	require.NoError(t, err)
	names := func(l []schedule.Schedule) (out []string) {
		for _, s := range l {
			out = append(out, s.Name)
		}
		return out
	}
	assert.Equal(t, []string{"moved", "old-cancelled", "old-once"}, names(listed))
	pending, err := store.Pending(ctx, "acme", wf)
	require.NoError(t, err)
	assert.True(t, pending)

	cancelled, err := store.Cancel(ctx, "acme", wf, "old-cancelled")
	require.NoError(t, err)
	assert.True(t, cancelled, "a timer of the old stream is cancelled there")
	require.NoError(t, metered.Set(ctx, schedule.Schedule{Name: "moved", Tenant: "acme", WorkflowID: wf,
		Pattern: schedule.At(time.Now().Add(2 * time.Second)), Request: template("u4")}, ""))
	counted := m.Pending("acme").Timers
	shard := subject.TimerShard("acme")
	info, err := res.Timers[shard].Info(ctx, jetstream.WithSubjectFilter(subject.InstanceSchedules(shard, "acme", wf)))
	require.NoError(t, err)
	assert.Equal(t, int64(info.State.Bytes)-300, counted, "the moved timer counted as its size in the shard less the old one's")

	got := inboxRequests(t, res, 2, 6*time.Second)
	require.Len(t, got, 2, "the old one-time timer and the moved timer fire, each once; the replaced and the cancelled ones never")
	byTimer := map[string]*agentbusv1.Request{}
	for _, r := range got {
		byTimer[r.GetTimer()] = r
	}
	require.Contains(t, byTimer, "old-once")
	assert.Regexp(t, `^timer:\d+:old-once$`, byTimer["old-once"].GetRequestId(), "an id of the old stream's form")
	require.Contains(t, byTimer, "moved")
	assert.Equal(t, "u4", byTimer["moved"].GetParticipantId(), "the timer set again, not the old one")
	listed, err = store.List(ctx, "acme", wf)
	require.NoError(t, err)
	assert.Empty(t, listed)
}
