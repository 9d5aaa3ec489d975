package ingress_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Two hosts share the inbox; when one stops, the other takes its partitions over and the
// conversation goes on with its state.
func TestWebhookHostHandover(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	stopB, err := s.AddHost(context.Background(), "host-b")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stopB() })
	wf := "default:Echo:Supervisor Workflow:handover"
	for i := 1; i <= 3; i++ {
		_, _, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
		require.Equal(t, float64(i), decode(t, b)["count"], "count %d with two hosts", i)
	}
	require.NoError(t, s.StopHost())
	start := time.Now()
	status, _, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	took := time.Since(start)
	require.Equal(t, http.StatusOK, status, "after the first host stopped: %s", b)
	assert.Equal(t, 4.0, decode(t, b)["count"], "after the first host stopped: %s", b)
	t.Logf("first answer after handover took %v", took)
	assert.LessOrEqual(t, took, 5*time.Second, "handover took too long")
}

// Hosts that run different agents share one bus: each agent's requests reach only a host that
// runs it.
func TestHostsWithDifferentAgents(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	greeter := agent.New("Greeter")
	greeter.WebhookFunc("hello", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		return agent.Text(200, "hello "+r.Params["name"])
	})
	stop, err := s.AddHost(context.Background(), "greeter-host", greeter)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	require.NoError(t, s.WaitLive(context.Background(), "Greeter"))
	for i := range 20 {
		wf := fmt.Sprintf("default:Greeter:Supervisor Workflow:g%d", i)
		status, _, b := call(t, s.URL, wf, "hello", q("apikey", s.Key, "name", "ann"), nil)
		require.Equal(t, http.StatusOK, status, "greeter %d: %s", i, b)
		require.Equal(t, "hello ann", string(b), "greeter %d", i)
		wf = fmt.Sprintf("default:Echo:Supervisor Workflow:e%d", i)
		status, _, b = call(t, s.URL, wf, "echo", q("apikey", s.Key), nil)
		require.Equal(t, http.StatusOK, status, "echo %d: %s", i, b)
	}
}

// A partition consumer deleted under a running host is created again and work goes on.
func TestDeletedConsumerComesBack(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Partitions: 1})
	js := natstest.JetStream(t, s.NATS)
	require.NoError(t, js.DeleteConsumer(context.Background(), subject.InboxStream("Echo"), subject.PartitionConsumer("Echo", 0)))
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), nil, "Idempotency-Key", "after-delete")
		if status == http.StatusOK {
			break
		}
		require.False(t, time.Now().After(deadline), "no answer after the consumer was deleted: %d %s", status, b)
		time.Sleep(100 * time.Millisecond)
	}
}
