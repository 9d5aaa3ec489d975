package ingress_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// stuckAgent is the agent Stuck, which serves tenant "default" only: "block" runs until release
// is closed, "quick" answers at once, "flaky" fails its first attempt with a retryable error and
// "relay" calls "block" of the instance of activation "callee".
func stuckAgent(release <-chan struct{}, flaky *atomic.Int32) *agent.Agent {
	a := agent.New("Stuck", agent.Tenants("default"))
	ok := map[string]bool{"ok": true}
	agent.Method(a, "block", func(ctx context.Context, _ map[string]any) (map[string]bool, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return ok, nil
	})
	agent.Method(a, "quick", func(context.Context, map[string]any) (map[string]bool, error) { return ok, nil })
	agent.Method(a, "flaky", func(context.Context, map[string]any) (map[string]bool, error) {
		if flaky.Add(1) == 1 {
			return nil, agent.Retryable(errors.New("the model did not answer"))
		}
		return ok, nil
	})
	agent.Method(a, "relay", func(ctx context.Context, _ map[string]any) (map[string]bool, error) {
		var out map[string]bool
		err := agent.MessageFrom(ctx).Instance().Call(ctx, agent.Peer{Agent: "Stuck", Activation: "callee"}, "block", nil, &out)
		return out, err
	})
	return a
}

// queuePath is the queue route of a workflow id of tenant.
func queuePath(tenant, workflowID string) string {
	return "/api/v1/admin/tenants/" + tenant + "/instances/" + url.PathEscape(workflowID) + "/queue"
}

// TestStuckInstanceQueue is the stuck instance an operator looks into: a handler that runs past
// the ack wait with a request of its conversation queued behind it, a request waiting in retry
// backoff that the operator runs at once, and a handler waiting for an Agent2Agent call. Tenant
// "other" sees none of it.
func TestStuckInstanceQueue(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var flaky atomic.Int32
	// A short ack wait: the blocked handler runs past it and keeps its request. A long backoff:
	// the flaky request waits until the operator cuts it short.
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Agents: []*agent.Agent{echo.New(), stuckAgent(release, &flaky)},
		Host: agent.HostConfig{AckWait: time.Second, RetryBackoff: time.Minute}})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	sendData := func(activation, method, requestID string) {
		t.Helper()
		status, _, b := send(t, s, "default", "", msg("agentName", "Stuck", "activationName", activation, "participantId", "ada",
			"type", "Data", "text", method, "requestId", requestID), bearerHeader(s.Key)...)
		require.Equal(t, http.StatusAccepted, status, "%s", b)
	}
	readQueue := func(workflowID string) inspect.InstanceQueue {
		t.Helper()
		var ans inspect.InstanceQueue
		adminOK(t, s, http.MethodGet, queuePath("default", workflowID), s.Key, nil, http.StatusOK, &ans)
		return ans
	}
	requestsOf := func(q inspect.InstanceQueue) []inspect.QueuedRequest {
		var out []inspect.QueuedRequest
		for _, c := range q.Conversations {
			out = append(out, c.Requests...)
		}
		return out
	}

	// A handler that runs past the ack wait, and the conversation's next request behind it.
	const stuckWF = "default:Stuck:Supervisor Workflow:stuck"
	sendData("stuck", "block", "blocked-1")
	sendData("stuck", "quick", "queued-2")
	var q inspect.InstanceQueue
	require.Eventually(t, func() bool {
		q = readQueue(stuckWF)
		reqs := requestsOf(q)
		return len(reqs) == 2 && reqs[0].State == inspect.StateRunning
	}, 10*time.Second, 20*time.Millisecond, "the blocked request running and the next queued")
	time.Sleep(1500 * time.Millisecond) // past the ack wait: the host keeps the request
	q = readQueue(stuckWF)
	assert.Equal(t, "Stuck", q.AgentName)
	assert.NotEmpty(t, q.Owner)
	assert.Empty(t, q.Unanswered)
	require.Len(t, q.Conversations, 1, "%+v", q)
	conv := q.Conversations[0]
	assert.Equal(t, "ada", conv.ParticipantID)
	assert.Equal(t, 2, conv.Stored, "both requests are in the inbox")
	assert.Equal(t, 0, conv.NotHeld)
	assert.GreaterOrEqual(t, conv.OldestAgeMs, int64(1500))
	require.Len(t, conv.Requests, 2)
	running, queued := conv.Requests[0], conv.Requests[1]
	assert.Equal(t, "blocked-1", running.RequestID)
	assert.Equal(t, "Data", running.Type)
	assert.Equal(t, "block", running.Method)
	assert.Equal(t, inspect.StateRunning, running.State)
	require.NotNil(t, running.Since)
	assert.Greater(t, time.Since(running.Since.Time), 1500*time.Millisecond, "running since")
	assert.Equal(t, 1, running.Attempt, "one delivery: the ack wait passed without a redelivery")
	assert.GreaterOrEqual(t, running.AgeMs, int64(1500))
	assert.Equal(t, q.Owner, running.Host)
	assert.Equal(t, "queued-2", queued.RequestID)
	assert.Equal(t, inspect.StateQueued, queued.State)
	assert.Equal(t, inspect.ReasonBehind, queued.Reason)
	assert.Equal(t, running.Sequence, queued.EarlierSequence, "the queued request names the one ahead of it")
	assert.GreaterOrEqual(t, queued.AgeMs, int64(1500))

	// A running request is not waiting to be retried; an unknown one is not queued.
	status, _, b := adminReq(t, s, http.MethodPost, queuePath("default", stuckWF)+"/blocked-1/retry", s.Key, nil)
	assert.Equal(t, http.StatusConflict, status, "%s", b)
	assert.Contains(t, string(b), "request-not-in-backoff")
	status, _, b = adminReq(t, s, http.MethodPost, queuePath("default", stuckWF)+"/nobody/retry", s.Key, nil)
	assert.Equal(t, http.StatusNotFound, status, "%s", b)
	assert.Contains(t, string(b), "request-not-queued")

	// A handler waiting for an Agent2Agent call; the callee's instance runs the call.
	const callerWF = "default:Stuck:Supervisor Workflow:caller"
	sendData("caller", "relay", "relay-1")
	require.Eventually(t, func() bool {
		reqs := requestsOf(readQueue(callerWF))
		return len(reqs) == 1 && reqs[0].Reason == inspect.ReasonWaitingForCall
	}, 10*time.Second, 20*time.Millisecond, "the caller waiting for its call")
	caller := requestsOf(readQueue(callerWF))[0]
	assert.Equal(t, inspect.StateHeld, caller.State)
	require.NotNil(t, caller.Call)
	assert.Equal(t, "Stuck", caller.Call.Agent)
	assert.Equal(t, "default:Stuck:Supervisor Workflow:callee", caller.Call.WorkflowID)
	assert.Equal(t, "block", caller.Call.Method)
	// The caller waits from the moment it sends the call, which its callee's host may not have
	// received yet.
	var callee []inspect.QueuedRequest
	require.Eventually(t, func() bool {
		callee = requestsOf(readQueue("default:Stuck:Supervisor Workflow:callee"))
		return len(callee) == 1 && callee[0].State == inspect.StateRunning
	}, 10*time.Second, 20*time.Millisecond, "the callee running the call")

	// A request in retry backoff shows until when, and runs at once when the operator asks.
	const flakyWF = "default:Stuck:Supervisor Workflow:flaky"
	sendData("flaky", "flaky", "flaky-1")
	require.Eventually(t, func() bool {
		reqs := requestsOf(readQueue(flakyWF))
		return len(reqs) == 1 && reqs[0].Reason == inspect.ReasonRetryBackoff
	}, 10*time.Second, 20*time.Millisecond, "the flaky request in retry backoff")
	backoff := requestsOf(readQueue(flakyWF))[0]
	assert.Equal(t, inspect.StateHeld, backoff.State)
	require.NotNil(t, backoff.Until)
	assert.WithinDuration(t, time.Now().Add(time.Minute), backoff.Until.Time, 10*time.Second, "until the backoff's end")
	assert.Equal(t, 2, backoff.Attempt, "the attempt next")
	var retried struct {
		WorkflowID string                `json:"workflowId"`
		Request    inspect.QueuedRequest `json:"request"`
	}
	asked := time.Now()
	adminOK(t, s, http.MethodPost, queuePath("default", flakyWF)+"/flaky-1/retry", s.Key, nil, http.StatusAccepted, &retried)
	assert.Equal(t, flakyWF, retried.WorkflowID)
	assert.Equal(t, "flaky-1", retried.Request.RequestID)
	assert.Equal(t, inspect.ReasonRetryBackoff, retried.Request.Reason)
	require.Eventually(t, func() bool { return readQueue(flakyWF).Empty() }, 10*time.Second, 20*time.Millisecond, "the retried request done")
	assert.Less(t, time.Since(asked), 10*time.Second, "it ran at once, not after the backoff")
	assert.EqualValues(t, 2, flaky.Load(), "attempts")
	status, _, b = adminReq(t, s, http.MethodPost, queuePath("default", flakyWF)+"/flaky-1/retry", s.Key, nil)
	assert.Equal(t, http.StatusNotFound, status, "done: %s", b)

	// Tenant "other" gets 404 for default's instance, as for a missing one, and 403 on
	// default's path.
	status, _, missing := adminReq(t, s, http.MethodGet, queuePath("other", "other:Stuck:Supervisor Workflow:nothing"), s.OtherKey, nil)
	assert.Equal(t, http.StatusNotFound, status, "%s", missing)
	status, _, b = adminReq(t, s, http.MethodGet, queuePath("other", stuckWF), s.OtherKey, nil)
	assert.Equal(t, http.StatusNotFound, status, "%s", b)
	assert.Equal(t, string(missing), string(b), "another tenant's instance answers as a missing one")
	status, _, b = adminReq(t, s, http.MethodPost, queuePath("other", stuckWF)+"/blocked-1/retry", s.OtherKey, nil)
	assert.Equal(t, http.StatusNotFound, status, "%s", b)
	status, _, b = adminReq(t, s, http.MethodGet, queuePath("default", stuckWF), s.OtherKey, nil)
	assert.Equal(t, http.StatusForbidden, status, "%s", b)

	// The hosts: the system admin sees every agent, tenant "other" not Stuck, which serves
	// default only.
	var all, other, mine inspect.Hosts
	// In flight: blocked-1, queued-2, relay-1 and the call it waits for, as the next heartbeat
	// counts them.
	require.Eventually(t, func() bool {
		adminOK(t, s, http.MethodGet, "/api/v1/admin/hosts", systemKey, nil, http.StatusOK, &all)
		return len(all.Hosts) == 1 && all.Hosts[0].InFlight != nil && *all.Hosts[0].InFlight == 4
	}, 5*time.Second, 50*time.Millisecond, "the heartbeat counts the requests in flight")
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/other/hosts", s.OtherKey, nil, http.StatusOK, &other)
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/default/hosts", s.Key, nil, http.StatusOK, &mine)
	agentsOf := func(h inspect.Hosts) []string {
		var names []string
		for _, a := range h.Agents {
			names = append(names, a.Agent)
		}
		return names
	}
	assert.Equal(t, []string{"Echo", "Stuck"}, agentsOf(all))
	assert.Equal(t, []string{"Echo", "Stuck"}, agentsOf(mine))
	assert.Equal(t, []string{"Echo"}, agentsOf(other))
	require.Len(t, all.Hosts, 1)
	host := all.Hosts[0]
	assert.ElementsMatch(t, []string{"Echo", "Stuck"}, host.Agents)
	assert.Len(t, host.Partitions["Stuck"], 4, "one host owns every partition")
	assert.Less(t, host.HeartbeatAgeMs, int64(3000))
	require.Len(t, other.Hosts, 1)
	assert.Equal(t, []string{"Echo"}, other.Hosts[0].Agents)
	assert.NotContains(t, other.Hosts[0].Partitions, "Stuck")
	// The four requests in flight are delivered, not acknowledged.
	var ackPending int
	for _, a := range all.Agents {
		if a.Agent == "Stuck" {
			for _, p := range a.Partitions {
				ackPending += p.AckPending
				assert.Equal(t, []string{host.ID}, p.Holders, "partition %d", p.Partition)
			}
		}
	}
	assert.Equal(t, 4, ackPending)

	// Released, the instance's queue empties; it exists, so it is found, with nothing waiting.
	close(release)
	require.Eventually(t, func() bool { return readQueue(stuckWF).Empty() }, 10*time.Second, 20*time.Millisecond)
}
