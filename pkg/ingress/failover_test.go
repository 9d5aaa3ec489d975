package ingress_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Two hosts share the inbox; when one stops, the other takes its partitions over and the
// conversation goes on with its state.
func TestWebhookHostHandover(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	stopB, err := s.AddHost(context.Background(), "host-b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopB() })
	wf := "default:Echo:Supervisor Workflow:handover"
	for i := 1; i <= 3; i++ {
		_, _, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
		if got := decode(t, b)["count"]; got != float64(i) {
			t.Fatalf("count %d with two hosts = %v", i, got)
		}
	}
	if err := s.StopHost(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	status, _, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	if status != 200 || decode(t, b)["count"] != 4.0 {
		t.Fatalf("after the first host stopped: %d %s", status, b)
	}
	t.Logf("first answer after handover took %v", time.Since(start))
	if time.Since(start) > 5*time.Second {
		t.Fatalf("handover took %v", time.Since(start))
	}
}

// Hosts that run different agents share one bus: each agent's requests reach only a host that
// runs it.
func TestHostsWithDifferentAgents(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	greeter := agent.New("Greeter")
	greeter.WebhookFunc("hello", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		return agent.Text(200, "hello "+r.Params["name"])
	})
	stop, err := s.AddHost(context.Background(), "greeter-host", greeter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	if err := s.WaitLive(context.Background(), "Greeter"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		wf := fmt.Sprintf("default:Greeter:Supervisor Workflow:g%d", i)
		if status, _, b := call(t, s.URL, wf, "hello", q("apikey", s.Key, "name", "ann"), nil); status != 200 || string(b) != "hello ann" {
			t.Fatalf("greeter %d: %d %s", i, status, b)
		}
		wf = fmt.Sprintf("default:Echo:Supervisor Workflow:e%d", i)
		if status, _, b := call(t, s.URL, wf, "echo", q("apikey", s.Key), nil); status != 200 {
			t.Fatalf("echo %d: %d %s", i, status, b)
		}
	}
}

// A partition consumer deleted under a running host is created again and work goes on.
func TestDeletedConsumerComesBack(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Partitions: 1})
	js, err := jetstream.New(natstest.Conn(t, s.NATS))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(context.Background(), subject.InboxStream, subject.PartitionConsumer("Echo", 0)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), nil, "Idempotency-Key", "after-delete")
		if status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the consumer was deleted: %d %s", status, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
