package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// inboxPartitions reads the partition count of the agent's inbox.
func inboxPartitions(t *testing.T, s *stacktest.Stack, agentName string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := s.Res.PartitionsOf(ctx, agentName)
	require.NoError(t, err)
	return n
}

// TestJoiningHostPullsTheInboxPartitionCount: a host configured with another partition count
// than the agent's inbox, joining a live host of the agent, pulls the inbox's count: the two
// divide the inbox's partitions between them, the inbox keeps its count and every call is
// answered, by both hosts.
func TestJoiningHostPullsTheInboxPartitionCount(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Partitions: 4, Host: agent.HostConfig{ID: "host-a"}})
	startHost(t, s, agent.HostConfig{ID: "host-b", Agents: []*agent.Agent{echo.New()}, Bus: bus.Config{Partitions: 16}})

	ids := []string{"host-a", "host-b"}
	waitFor(t, 5*time.Second, "two hosts divide the inbox's 4 partitions", func() bool { return settled(t, s, echo.Name, 4, ids) })
	assert.Equal(t, 4, inboxPartitions(t, s, echo.Name))
	served := map[string]int{}
	for i := range 40 {
		served[hostOf(t, s, "joined-"+string(rune('a'+i%26))+string(rune('a'+i/26)))]++
	}
	assert.Len(t, served, 2, "both hosts serve: %v", served)
	assert.Equal(t, 4, inboxPartitions(t, s, echo.Name), "the joining host did not repartition the inbox")
}

// TestLoneHostRepartitionsAnEmptyInbox: a host that starts alone, configured with another
// partition count than the agent's inbox, pulls the inbox's count while the inbox holds requests
// (they run), and gives a drained inbox its own count when it starts again.
func TestLoneHostRepartitionsAnEmptyInbox(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Partitions: 4, NoAgents: true})
	sa := &seqAgent{}
	ran := func(n int, host string) {
		t.Helper()
		waitFor(t, 5*time.Second, fmt.Sprintf("step %d runs", n), func() bool { ns, _ := sa.starts("p"); return len(ns) == n })
		_, hosts := sa.starts("p")
		assert.Equal(t, host, hosts[n-1])
	}
	_, _, stopFirst := startHost(t, s, agent.HostConfig{ID: "first", Agents: []*agent.Agent{sa.agent()}})
	drained := func() bool {
		n, err := s.Res.InboxRequests(context.Background(), "Seq")
		return err == nil && n == 0
	}
	step(t, s, "p", "1", "")
	ran(1, "first")
	waitFor(t, 5*time.Second, "the first step is acknowledged", drained)
	stopFirst()
	gone := func(id string) func() bool {
		return func() bool { _, beats := heartbeats(t, s)[id]; return !beats }
	}
	waitFor(t, 10*time.Second, "the first host has stopped", gone("first"))

	step(t, s, "p", "2", "") // waits in the inbox for the next host
	n, err := s.Res.InboxRequests(context.Background(), "Seq")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, _, stopSecond := startHost(t, s, agent.HostConfig{ID: "second", Agents: []*agent.Agent{sa.agent()}, Bus: bus.Config{Partitions: 2}})
	ran(2, "second")
	assert.Equal(t, 4, inboxPartitions(t, s, "Seq"), "an inbox holding requests keeps its count")
	waitFor(t, 5*time.Second, "the second host pulls the inbox's 4 partitions", func() bool {
		return settled(t, s, "Seq", 4, []string{"second"})
	})
	waitFor(t, 5*time.Second, "the inbox drains", drained)
	stopSecond()
	waitFor(t, 10*time.Second, "the second host has stopped", gone("second"))

	startHost(t, s, agent.HostConfig{ID: "third", Agents: []*agent.Agent{sa.agent()}, Bus: bus.Config{Partitions: 2}})
	assert.Equal(t, 2, inboxPartitions(t, s, "Seq"), "a drained inbox that no other host pulls takes the host's count")
	waitFor(t, 5*time.Second, "the third host pulls 2 partitions", func() bool { return settled(t, s, "Seq", 2, []string{"third"}) })
	step(t, s, "p", "3", "")
	ran(3, "third")
}

// TestAgentPartitionsOption: an agent's own partition count (agent.Partitions) makes its inbox,
// in place of the host's setting, and the host pulls that many partitions; a count out of
// bounds panics.
func TestAgentPartitionsOption(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Partitions: 16, NoAgents: true})
	two := agent.New("Two", agent.Partitions(2))
	two.WebhookFunc("host", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Text(http.StatusOK, "ok")
	})
	startHost(t, s, agent.HostConfig{ID: "host-2", Agents: []*agent.Agent{two}})
	assert.Equal(t, 2, inboxPartitions(t, s, "Two"))
	waitFor(t, 5*time.Second, "the host pulls 2 partitions", func() bool { return settled(t, s, "Two", 2, []string{"host-2"}) })
	status, _, b := post(t, s, "default:Two:Supervisor Workflow:a", "host", "")
	assert.Equal(t, http.StatusOK, status, "%s", b)

	assert.Panics(t, func() { agent.New("Zero", agent.Partitions(0)) })
	assert.Panics(t, func() { agent.New("Many", agent.Partitions(1025)) })
}
