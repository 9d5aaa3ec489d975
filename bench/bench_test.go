package main

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"
)

// TestBenchSmoke runs both phases briefly and checks that every request succeeded and that the
// phases leave no goroutines behind.
func TestBenchSmoke(t *testing.T) {
	before := runtime.NumGoroutine()
	o := options{
		Duration:   300 * time.Millisecond,
		Warmup:     100 * time.Millisecond,
		Clients:    4,
		Instances:  10,
		Partitions: 4,
		Body:       []byte(`{"ping":1}`),
	}
	client := newClient(o.Clients)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := map[string]result{}
	for _, phase := range []string{phaseBare, phaseAgentbus} {
		res, err := runTarget(ctx, phase, o, client)
		if err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		if res.Requests == 0 || res.RPS() <= 0 {
			t.Errorf("%s: no requests measured: %+v", phase, res)
		}
		if res.Errors != 0 {
			t.Errorf("%s: %d errors of %d requests: %v", phase, res.Errors, res.Requests, res.topErrors(5))
		}
		if res.P50 <= 0 || res.P50 > res.P99 || res.P99 > res.Max {
			t.Errorf("%s: inconsistent latencies p50=%s p99=%s max=%s", phase, res.P50, res.P99, res.Max)
		}
		results[phase] = res
	}
	if a, b := results[phaseAgentbus].AvgRespBytes(), results[phaseBare].AvgRespBytes(); a != b {
		t.Errorf("response sizes differ: agentbus %.1f B, bare %.1f B", a, b)
	}
	var out bytes.Buffer
	printTable(&out, []string{phaseBare, phaseAgentbus}, results)
	t.Log("\n" + out.String())
	client.CloseIdleConnections()

	// Everything the phases started must be gone (give closing connections a moment).
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{0.5: 50, 0.9: 90, 0.99: 99, 1: 100} {
		if got := percentile(d, p); got != want {
			t.Errorf("percentile(%v) = %d, want %d", p, got, want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %d", got)
	}
}
