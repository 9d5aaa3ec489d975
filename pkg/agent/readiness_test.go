package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A host is ready while it runs and consumes the partitions it owns: not before it starts,
// again once a deleted consumer is created anew, and no longer from the moment it stops.
func TestHostReadiness(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Partitions: 2})
	nc, err := s.NATS.Connect("ready-host")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	// An agent of its own, so that this host owns every partition of it.
	a := agent.New("Ready")
	a.Webhook("ping", agent.WebhookFunc(func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Text(200, "pong")
	}))
	h, err := agent.NewHost(agent.HostConfig{ID: "ready-host", Conn: nc, Bus: s.Res.Config, Agents: []*agent.Agent{a}, Logger: stacktest.Logger(t)})
	require.NoError(t, err)
	require.EqualError(t, h.Readiness(), "starting")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-h.Ready()
	require.NoError(t, h.Readiness())

	// A partition whose consumer vanished is not consumed until the host creates it again.
	require.NoError(t, inboxOf(t, s, "Ready").DeleteConsumer(ctx, subject.PartitionConsumer("Ready", 1)))
	var notConsumed error
	require.Eventually(t, func() bool {
		err := h.Readiness()
		if err != nil {
			notConsumed = err
		}
		return err == nil && notConsumed != nil
	}, 10*time.Second, time.Millisecond, "the host never missed the partition or never consumed it again")
	assert.EqualError(t, notConsumed, "partition 1 of Ready not consumed")
	_, err = inboxOf(t, s, "Ready").Consumer(ctx, subject.PartitionConsumer("Ready", 1))
	require.NoError(t, err, "the consumer was not created again")

	cancel()
	require.NoError(t, <-done)
	done <- nil
	assert.EqualError(t, h.Readiness(), "stopping")
}

// A host whose request to create a partition's consumer, to register its agent, to write its
// first heartbeat or to begin its watch of the hosts goes unanswered (a NATS cluster still
// electing its leaders loses it) tries again and starts, rather than exit: it is starting
// meanwhile, and ready once it consumes every partition.
func TestHostStartsThroughALostRequest(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Partitions: 2})
	// Each host runs an agent of its own, which it serves alone.
	for _, lose := range []struct{ agent, prefix string }{
		{"LateConsumer", "$JS.API.CONSUMER.CREATE." + subject.InboxStream("LateConsumer") + "." + subject.PartitionConsumer("LateConsumer", 1)},
		{"LateRegistration", "$KV." + subject.RegistryBucket + "."},
		{"LateHeartbeat", "$KV." + subject.HostsBucket + "."},
		{"LateHostsWatch", "$JS.API.CONSUMER.CREATE." + subject.KVStream(subject.HostsBucket) + "."},
	} {
		t.Run(lose.agent, func(t *testing.T) {
			t.Parallel()
			startThroughALostRequest(t, s, lose.agent, lose.prefix)
		})
	}
}

// startThroughALostRequest runs a host of the agent name that loses its first request whose
// subject begins with prefix, and checks that it starts.
func startThroughALostRequest(t *testing.T, s *stacktest.Stack, name, prefix string) {
	lossy := natstest.LoseFirst(s.NATS.Server, prefix)
	a := agent.New(name)
	a.Webhook("ping", agent.WebhookFunc(func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Text(200, "pong")
	}))
	id := strings.ToLower(name) + "-host"
	h, err := agent.NewHost(agent.HostConfig{ID: id, Conn: lossy.Connect(t, id), Bus: s.Res.Config,
		Agents: []*agent.Agent{a}, Logger: stacktest.Logger(t)})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return lossy.Dropped.Load() > 0 }, 10*time.Second, 10*time.Millisecond, "no request was lost")
	assert.EqualError(t, h.Readiness(), "starting")
	select {
	case <-h.Ready():
	case err := <-done:
		done <- err // for the cleanup
		require.FailNow(t, "the host stopped at its start", "%v", err)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the host did not start within 30 s")
	}
	require.NoError(t, h.Readiness())
	assert.EqualValues(t, 1, lossy.Dropped.Load(), "requests lost")
}
