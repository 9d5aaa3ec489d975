package agent_test

import (
	"bytes"
	"context"
	"sync/atomic"
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

// A host whose first request to create a partition's consumer goes unanswered (a NATS cluster
// still electing its leaders loses it) tries again and starts, rather than exit: it is starting
// meanwhile, and ready once it consumes every partition.
func TestHostStartsOnceItsConsumerCanBeCreated(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Partitions: 2})
	create := []byte("$JS.API.CONSUMER.CREATE." + subject.InboxStream("Late") + "." + subject.PartitionConsumer("Late", 1))
	var lost atomic.Bool
	lossy := &natstest.Proxy{Server: s.NATS.Server, Drop: func(toServer bool, subj []byte) bool {
		return toServer && bytes.HasPrefix(subj, create) && lost.CompareAndSwap(false, true)
	}}
	a := agent.New("Late")
	a.Webhook("ping", agent.WebhookFunc(func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Text(200, "pong")
	}))
	h, err := agent.NewHost(agent.HostConfig{ID: "late-host", Conn: lossy.Connect(t, "late-host"), Bus: s.Res.Config,
		Agents: []*agent.Agent{a}, Logger: stacktest.Logger(t)})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, lost.Load, 10*time.Second, 10*time.Millisecond, "no request to create the consumer was lost")
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
	_, err = inboxOf(t, s, "Late").Consumer(ctx, subject.PartitionConsumer("Late", 1))
	require.NoError(t, err, "the consumer of the partition whose creation was lost")
}
