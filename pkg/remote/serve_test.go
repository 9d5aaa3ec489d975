package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestRemovalReplayedDeletesConsumers: a process serving remote agents that starts after an
// agent was removed deletes the inbox consumers the agent left behind, as the processes that
// see a removal happen do (TestRemoteAgentServedLikeAGoAgent).
func TestRemovalReplayedDeletesConsumers(t *testing.T) {
	const partitions = 4
	res := natstest.Bus(t, bus.Config{Partitions: partitions})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s := remote.NewStore(res, nil, 0)
	_, err := s.Put(ctx, "", remote.Registration{Name: "Gone", URL: "http://127.0.0.1:10/agent", Chat: true}, false)
	require.NoError(t, err)
	for p := range partitions {
		inbox, err := res.InboxOf(ctx, "Gone")
		require.NoError(t, err)
		_, err = inbox.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: subject.PartitionConsumer("Gone", p),
			FilterSubject: subject.Partition("Gone", p), AckPolicy: jetstream.AckExplicitPolicy})
		require.NoError(t, err)
	}
	require.NoError(t, s.Delete(ctx, "", "Gone"))
	require.Equal(t, partitions, inboxConsumersOf(t, res, "Gone"))

	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		remote.Serve(sctx, remote.ServeConfig{Res: res}) // serves no registration: the only one is removed
	}()
	t.Cleanup(func() { stop(); <-done })
	require.Eventually(t, func() bool { return inboxConsumersOf(t, res, "Gone") == 0 }, 20*time.Second, 50*time.Millisecond,
		"the removed agent's consumers deleted by a process that started after the removal")
}
