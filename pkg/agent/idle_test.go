package agent

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// runHost runs h until the test ends, and returns once it is ready.
func runHost(t *testing.T, h *Host) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	<-h.Ready()
}

// An idle workflow instance costs its host no memory and no goroutine: after a burst of requests
// to many instances, the host holds none of them once they have been idle for as long as it keeps
// them (liveKeep, shortened here), and its gauge of instances held (agentbus_instances_live) says
// so.
func TestIdleInstancesCostNothing(t *testing.T) {
	srv := natstest.Server(t, "")
	a := New("Counter")
	a.WebhookFunc("hit", func(ctx context.Context, r *WebhookRequest) Response {
		if _, err := UpdateState(ctx, r.Instance(), func(n *int) error { *n++; return nil }); err != nil {
			return Status(http.StatusInternalServerError)
		}
		return Status(http.StatusOK)
	})
	reg := prometheus.NewRegistry()
	h, err := NewHost(HostConfig{Conn: natstest.Conn(t, srv), Agents: []*Agent{a}, Bus: bus.Config{Partitions: 2}, Metrics: reg})
	require.NoError(t, err)
	runHost(t, h)
	// Idle instances are kept for liveKeep at most; here, for no longer than liveIdle.
	h.live.mu.Lock()
	h.live.keep = liveIdle
	h.live.mu.Unlock()

	// 200 instances, each hit once; replies come back on a subscription of our own.
	nc := natstest.Conn(t, srv)
	replies := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe("test.replies.>", replies)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// The host starts some of its background work (the timer relay's consumer) after it is
	// ready: the idle count is taken once the count has not changed for a second.
	goroutinesIdle := steadyGoroutines(5 * time.Second)
	const n = 200
	for i := range n {
		wf := fmt.Sprintf("acme:Counter:Supervisor Workflow:i%d", i)
		req := &agentbusv1.Request{RequestId: fmt.Sprint(i), TenantId: "acme", WorkflowId: wf, AgentName: "Counter",
			WorkflowType: "Supervisor Workflow", ActivationName: fmt.Sprintf("i%d", i), ParticipantId: "webhook",
			Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "hit", CreatedAtMs: time.Now().UnixMilli()}
		data, _ := proto.Marshal(req)
		msg := &nats.Msg{Subject: subject.Inbox("Counter", "acme", wf, "webhook"), Data: data, Header: nats.Header{}}
		msg.Header.Set(subject.HeaderReplyTo, fmt.Sprintf("test.replies.%d", i))
		require.NoError(t, nc.PublishMsg(msg))
	}
	for range n {
		select {
		case <-replies:
		case <-time.After(20 * time.Second):
			require.FailNow(t, "not every request was answered")
		}
	}
	require.NotZero(t, h.live.size(), "no instance was held while busy: the test does not see the cache")
	assert.EqualValues(t, h.live.size(), testutil.ToFloat64(h.metrics.liveGauge()), "agentbus_instances_live while busy")

	// Once idle for liveIdle (and a sweep), nothing is held: no instance, no conversation queue,
	// and the goroutine count is back where it was before the burst.
	deadline := time.Now().Add(3*liveIdle + 2*time.Second)
	for {
		h.mu.Lock()
		queues := len(h.convs) + len(h.held)
		h.mu.Unlock()
		if h.live.size() == 0 && queues == 0 && runtime.NumGoroutine() <= goroutinesIdle+2 {
			// The gauge of instances held follows them down.
			assert.Zero(t, testutil.ToFloat64(h.metrics.liveGauge()), "agentbus_instances_live once idle")
			break
		}
		require.False(t, time.Now().After(deadline), "after going idle the host still holds %d instances, %d queues, %d goroutines (idle host: %d)",
			h.live.size(), queues, runtime.NumGoroutine(), goroutinesIdle)
		time.Sleep(50 * time.Millisecond)
	}
}

// steadyGoroutines returns the goroutine count once it has not changed for a second, or after
// within.
func steadyGoroutines(within time.Duration) int {
	n, since := runtime.NumGoroutine(), time.Now()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) >= time.Second {
			break
		}
	}
	return n
}
