package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// A partition changes hands while a request of a conversation runs on the host that lets it go:
// the new owner holds the conversation's next request back, and says it waits for the earlier
// one, which the leaving host still runs; the requests behind it are queued.
func TestInspectShowsTheRequestHeldElsewhere(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()}, Host: agent.HostConfig{ID: "stays"}})
	leaving, _, cancel := startSeqOwner(t, s, sa, "stays", agent.HostConfig{})
	ctx := context.Background()
	nc := natstest.Conn(t, s.NATS)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	dir, err := registry.NewDirectory(ctx, s.Res.Registry, s.Res.Hosts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dir.Close() })
	c := &inspect.Client{NC: nc, JS: js, Dir: dir, Partitions: s.Res.PartitionsOf}

	step(t, s, "y", "1", "3s")
	waitFor(t, 5*time.Second, "the first step runs", func() bool { ns, _ := sa.starts("y"); return len(ns) == 1 })
	for i := 2; i <= 3; i++ {
		step(t, s, "y", fmt.Sprint(i), "")
	}
	time.Sleep(100 * time.Millisecond) // delivered, and queued behind the first, on the leaving host
	cancel()

	var q inspect.InstanceQueue
	waitFor(t, 5*time.Second, "the next step held on the host that stays", func() bool {
		q, err = c.Instance(ctx, "default", seqWorkflow)
		require.NoError(t, err)
		// The owner as the heartbeats tell it: the leaving host's reached this reader too.
		return len(q.Conversations) == 1 && len(q.Conversations[0].Requests) == 3 && q.Conversations[0].Requests[1].Host == "stays" &&
			q.Owner == "stays"
	})
	conv := q.Conversations[0]
	assert.Equal(t, "y", conv.ParticipantID)
	assert.Equal(t, 3, conv.Stored)
	assert.Equal(t, 0, conv.NotHeld)
	running, held, queued := conv.Requests[0], conv.Requests[1], conv.Requests[2]
	assert.Equal(t, leaving, running.Host)
	assert.Equal(t, inspect.StateRunning, running.State)
	assert.Equal(t, "Webhook", running.Type)
	assert.Equal(t, "step", running.Method)
	assert.Equal(t, inspect.StateHeld, held.State)
	assert.Equal(t, inspect.ReasonEarlierElsewhere, held.Reason)
	assert.Equal(t, running.Sequence, held.EarlierSequence, "the held request names the one the other host runs")
	assert.GreaterOrEqual(t, held.Attempt, 2, "given back by the leaving host and delivered again")
	assert.Equal(t, inspect.StateQueued, queued.State)
	assert.Equal(t, inspect.ReasonBehind, queued.Reason)
	assert.Equal(t, held.Sequence, queued.EarlierSequence)

	// The whole host, and the tenant's part of it.
	held2, err := c.Host(ctx, "stays", "")
	require.NoError(t, err)
	assert.Equal(t, 2, held2.InFlight)
	require.Len(t, held2.Conversations, 1)
	assert.Equal(t, seqWorkflow, held2.Conversations[0].WorkflowID)
	none, err := c.Host(ctx, "stays", "other")
	require.NoError(t, err)
	assert.Empty(t, none.Conversations)
	assert.Equal(t, 2, none.InFlight, "the host's count, of every tenant")

	waitFor(t, 15*time.Second, "all steps ran", func() bool { ns, _ := sa.starts("y"); return len(ns) == 3 })
	waitFor(t, 5*time.Second, "nothing waits", func() bool {
		q, err = c.Instance(ctx, "default", seqWorkflow)
		require.NoError(t, err)
		return q.Empty()
	})
}
