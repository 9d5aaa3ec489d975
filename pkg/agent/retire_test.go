package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// The inbox consumers of an agent that no host runs any more are deleted once the inactive
// threshold has passed, while those of an agent whose host runs idle stay; a request sent to the
// retired agent meanwhile waits in its inbox, and the agent's next host handles it.
func TestRetiredAgentsConsumersGo(t *testing.T) {
	t.Parallel()
	const partitions = 2
	s := stacktest.Start(t, stacktest.Options{Partitions: partitions})
	handled := make(chan string, 1)
	newAgent := func(name string) *agent.Agent {
		a := agent.New(name)
		a.Webhook("ping", agent.WebhookFunc(func(_ context.Context, r *agent.WebhookRequest) agent.Response {
			select {
			case handled <- r.RequestID:
			default:
			}
			return agent.Text(200, "pong")
		}))
		return a
	}
	threshold := agent.MinConsumerInactiveThreshold
	cfg := func(id, name string) agent.HostConfig {
		return agent.HostConfig{ID: id, Agents: []*agent.Agent{newAgent(name)}, ConsumerInactiveThreshold: threshold}
	}
	consumers := func(name string) int {
		n := 0
		for p := range partitions {
			c, err := inboxOf(t, s, name).Consumer(t.Context(), subject.PartitionConsumer(name, p))
			if err == nil {
				assert.Equal(t, threshold, c.CachedInfo().Config.InactiveThreshold)
				n++
			} else {
				require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
			}
		}
		return n
	}

	startHost(t, s, cfg("staying-host", "Staying"))
	_, _, stop := startHost(t, s, cfg("retiring-host", "Retiring"))
	waitFor(t, 5*time.Second, "every partition has its consumer", func() bool {
		return consumers("Staying") == partitions && consumers("Retiring") == partitions
	})
	stop()
	stopped := time.Now()

	waitFor(t, threshold+10*time.Second, "the retired agent's consumers are deleted", func() bool {
		return consumers("Retiring") == 0
	})
	assert.GreaterOrEqual(t, time.Since(stopped), threshold-time.Second, "deleted before the threshold")
	time.Sleep(2 * time.Second)
	assert.Equal(t, partitions, consumers("Staying"), "the consumers of an agent whose host runs idle were deleted")

	enqueuePing(t, s, "Retiring", "after-retirement")
	startHost(t, s, cfg("returning-host", "Retiring"))
	select {
	case id := <-handled:
		assert.Equal(t, "after-retirement", id)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the request sent while no host ran the agent was not handled by its next host")
	}
	assert.Equal(t, partitions, consumers("Retiring"), "the returning host did not make the consumers again")
}

// inboxOf is the inbox stream of the stack's agent.
func inboxOf(t *testing.T, s *stacktest.Stack, agent string) jetstream.Stream {
	t.Helper()
	inbox, err := s.Res.InboxOf(t.Context(), agent)
	require.NoError(t, err)
	return inbox
}

// A running host whose agent's inbox was deleted (by an operator, or by the removal of a remote
// agent racing with its new registration) makes it again, with its consumers, and serves it.
func TestHostMakesADeletedInboxAgain(t *testing.T) {
	t.Parallel()
	const partitions = 2
	s := stacktest.Start(t, stacktest.Options{Partitions: partitions})
	handled := make(chan string, 1)
	a := agent.New("Phoenix")
	a.Webhook("ping", agent.WebhookFunc(func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		handled <- r.RequestID
		return agent.Text(200, "pong")
	}))
	startHost(t, s, agent.HostConfig{ID: "phoenix-host", Agents: []*agent.Agent{a}})
	consumers := func() int {
		inbox, err := s.Res.JS.Stream(t.Context(), subject.InboxStream("Phoenix"))
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
			return -1
		}
		return inbox.CachedInfo().State.Consumers
	}
	waitFor(t, 5*time.Second, "every partition has its consumer", func() bool { return consumers() == partitions })

	require.NoError(t, s.Res.JS.DeleteStream(t.Context(), subject.InboxStream("Phoenix")))
	waitFor(t, 10*time.Second, "the inbox made again with its consumers", func() bool { return consumers() == partitions })
	enqueuePing(t, s, "Phoenix", "after-deletion")
	select {
	case id := <-handled:
		assert.Equal(t, "after-deletion", id)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "a request to the inbox made again was not handled")
	}
}

// enqueuePing publishes a webhook call of the agent's method ping, with the request id, to its
// inbox.
func enqueuePing(t *testing.T, s *stacktest.Stack, agentName, requestID string) {
	t.Helper()
	js := natstest.JetStream(t, s.NATS)
	enqueue(t, js, &agentbusv1.Request{RequestId: requestID, TenantId: "default", WorkflowId: "default:" + agentName + ":Supervisor Workflow:default",
		AgentName: agentName, WorkflowType: "Supervisor Workflow", ActivationName: "default", ParticipantId: "p",
		Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "ping", CreatedAtMs: time.Now().UnixMilli()}, nil)
}
