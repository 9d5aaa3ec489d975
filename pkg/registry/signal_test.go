package registry

import (
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkHeartbeatSignal: what a heartbeat of one agent's host costs a directory that the hosts
// of many agents subscribed to (a workflow host process with a host per remote agent). It signals
// the subscribers of that agent only, so the cost does not grow with the subscribers.
//
//	go test ./pkg/registry -run '^$' -bench HeartbeatSignal
func BenchmarkHeartbeatSignal(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint(n, " subscribers"), func(b *testing.B) {
			d := &Directory{log: slog.New(slog.DiscardHandler), now: time.Now, changed: make(chan struct{}, 1)}
			for i := range n {
				_, cancel := d.Subscribe(fmt.Sprint("Agent", i))
				b.Cleanup(cancel)
			}
			agents := []string{"Agent7"}
			for b.Loop() {
				d.signalFor(agents, agents)
			}
		})
	}
}

// A cancelled subscription leaves nothing behind in the directory's index.
func TestSubscribeCancelLeavesNothing(t *testing.T) {
	d := &Directory{log: slog.New(slog.DiscardHandler), now: time.Now, changed: make(chan struct{}, 1)}
	_, cancelAll := d.Subscribe()
	_, cancelA := d.Subscribe("A", "B")
	_, cancelB := d.Subscribe("B")
	cancelAll()
	cancelA()
	cancelB()
	if len(d.subsAll) != 0 || len(d.subsAgent) != 0 {
		t.Fatalf("after every cancel: %d subscriptions to every host, %d agents indexed", len(d.subsAll), len(d.subsAgent))
	}
}
