package remote_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestRemovalReplayedDeletesTheInbox: a process serving remote agents that starts after an
// agent was removed deletes the inbox and consumers the agent left behind, as the processes that
// see a removal happen do (TestRemoteAgentServedLikeAGoAgent), but keeps an inbox that holds a
// request, without its consumers.
func TestRemovalReplayedDeletesTheInbox(t *testing.T) {
	const partitions = 4
	remote.SetMarkerGrace(t, 300*time.Millisecond)
	res := natstest.Bus(t, bus.Config{Partitions: partitions})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s := remote.NewStore(res, nil, 0)
	for _, name := range []string{"Gone", "Queued", "Never"} {
		_, err := s.Put(ctx, "", remote.Registration{Name: name, URL: "http://127.0.0.1:10/agent", Chat: true}, false)
		require.NoError(t, err)
		inbox, err := res.InboxOf(ctx, name)
		require.NoError(t, err)
		for p := range partitions {
			_, err = inbox.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: subject.PartitionConsumer(name, p),
				FilterSubject: subject.Partition(name, p), AckPolicy: jetstream.AckExplicitPolicy})
			require.NoError(t, err)
		}
	}
	_, err := res.JS.Publish(ctx, subject.Inbox("Queued", "default", "wf", "p"), []byte("queued"))
	require.NoError(t, err)
	for _, name := range []string{"Gone", "Queued", "Never"} {
		require.NoError(t, s.Delete(ctx, "", name))
	}
	require.Equal(t, partitions, inboxConsumersOf(t, res, "Gone"))
	require.NoError(t, res.JS.DeleteStream(ctx, subject.InboxStream("Never")), "a removed agent without an inbox")

	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		remote.Serve(sctx, remote.ServeConfig{Res: res}) // serves no registration: the only one is removed
	}()
	t.Cleanup(func() { stop(); <-done })
	require.Eventually(t, func() bool { return !hasInbox(t, res, "Gone") && inboxConsumersOf(t, res, "Queued") == 0 },
		20*time.Second, 50*time.Millisecond, "the removed agents' inboxes and consumers deleted by a process that started after the removal")
	require.True(t, hasInbox(t, res, "Queued"), "an inbox holding a request stays")
	queued, err := res.JS.Stream(ctx, subject.InboxStream("Queued"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), queued.CachedInfo().State.Msgs, "with its request")
	assert.False(t, hasInbox(t, res, "Never"), "and a removed agent without one has none")
	// The removals that left nothing behind leave no marker for later starts to replay, once
	// it is old enough for every watch to have delivered it.
	require.Eventually(t, func() bool { return !hasMarker(t, res, "Gone") && !hasMarker(t, res, "Never") }, 10*time.Second, 50*time.Millisecond)
	assert.True(t, hasMarker(t, res, "Queued"), "the removal of an agent whose inbox stays is replayed")
}

// hasMarker reports whether the remote agents bucket holds the registration's removal marker.
// A reading of the key's history whose watch the marker's purge overtakes waits for the message
// the purge took (nats.go counts the messages pending when its consumer is made and waits for
// that many), so each reading is bounded, and one that does not end in time counts as the
// marker still there: the caller polls.
func hasMarker(t *testing.T, res *bus.Resources, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := res.RemoteAgents.Get(ctx, subject.AgentKey(name))
	if err == nil || !errors.Is(err, jetstream.ErrKeyNotFound) && ctx.Err() == nil {
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	}
	hist, err := res.RemoteAgents.History(ctx, subject.AgentKey(name))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false
	case ctx.Err() != nil:
		return true
	}
	require.NoError(t, err)
	return len(hist) > 0
}

// TestRemoteAgentHostStartedAgain: a remote agent's host that stops at its start (the bus
// refused a partition's consumer) is started again, and serves once the bus accepts it.
func TestRemoteAgentHostStartedAgain(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx := t.Context()
	// Another consumer of partition 0: the work-queue inbox refuses the host's own.
	inbox, err := s.Res.InboxWith(ctx, "Restarted", remote.DefaultSharedPartitions)
	require.NoError(t, err)
	const squatter = "squatter"
	_, err = inbox.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: squatter, FilterSubject: subject.Partition("Restarted", 0),
		AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)

	ep := newEndpoint(t)
	var reg remote.Registration
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, registration("Restarted", ep.URL+"/agentbus"), &reg)
	require.Equal(t, http.StatusCreated, status)
	ep.secret.Store(reg.Secret)
	stopped := func() bool { return stacktest.Logged(t, "remote agent's host stopped; starting it again") }
	require.Eventually(t, stopped, 10*time.Second, 20*time.Millisecond, "the host did not stop at its start")

	require.NoError(t, inbox.DeleteConsumer(ctx, squatter))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, s.WaitLive(wctx, "Restarted"), "the host was not started again")
	status, ans := send(t, s, "Restarted", "a", "count")
	require.Equal(t, http.StatusOK, status, "%v", ans)
	assert.EqualValues(t, 1, ans["response"].(map[string]any)["data"].(map[string]any)["count"])
}

// TestRemovedAgentsMetricsGo: once a remote agent's registration is removed, the process that
// ran its host keeps none of its series (its handlers' durations and outcomes, its
// partitions): the metrics do not grow with every agent a tenant ever registered.
func TestRemovedAgentsMetricsGo(t *testing.T) {
	t.Parallel()
	metrics := prometheus.NewRegistry()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Host: agent.HostConfig{Metrics: metrics}})
	series := func() int {
		families, err := metrics.Gather()
		require.NoError(t, err)
		n := 0
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "agent" && l.GetValue() == "Metered" {
						n++
					}
				}
			}
		}
		return n
	}
	ep := newEndpoint(t)
	var reg remote.Registration
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, registration("Metered", ep.URL+"/agentbus"), &reg)
	require.Equal(t, http.StatusCreated, status)
	ep.secret.Store(reg.Secret)
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.WaitLive(wctx, "Metered"))
	status, ans := send(t, s, "Metered", "a", "count")
	require.Equal(t, http.StatusOK, status, "%v", ans)
	require.Positive(t, series(), "the agent's series while it is served")

	status, _ = call(t, http.MethodDelete, s.URL+"/api/v1/admin/agents/Metered", systemKey, nil, nil)
	require.Equal(t, http.StatusNoContent, status)
	require.Eventually(t, func() bool { return series() == 0 }, 10*time.Second, 50*time.Millisecond,
		"the removed agent's series stay")
}
