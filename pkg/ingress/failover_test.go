package ingress_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/stacktest"
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
