package schedule_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// BenchmarkTimersDueWithinAMinute sets AGENTBUS_BENCH_TIMERS one-time timers (default 10,000) on
// AGENTBUS_BENCH_TIMER_INSTANCES instances (default 100) due spread over
// AGENTBUS_BENCH_TIMERS_SPREAD (default 1m) on an embedded NATS server, relays them to
// the inbox and prints how late each reached it (p50, p99, max), how late the server fired it
// (stored it on its target subject, which the relays then move), whether every one arrived once,
// and how much the process's heap grew while they were pending (they live in NATS; the embedded
// server shares the process here, so the figure is an upper bound for a host's own growth).
func BenchmarkTimersDueWithinAMinute(b *testing.B) {
	n := envInt("AGENTBUS_BENCH_TIMERS", 10000)
	instances := envInt("AGENTBUS_BENCH_TIMER_INSTANCES", 100)
	spread, err := time.ParseDuration(envOr("AGENTBUS_BENCH_TIMERS_SPREAD", "1m"))
	require.NoError(b, err)
	for range b.N {
		lateness, fired, dupes, missing, heap := runTimers(b, n, instances, spread)
		slices.Sort(lateness)
		slices.Sort(fired)
		q := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
		b.Logf("%d timers on %d instances over %v: arrived %d, duplicates %d, missing %d; lateness p50 %v p99 %v max %v (fired: p50 %v p99 %v max %v); heap growth while pending %.1f MiB",
			n, instances, spread, len(lateness), dupes, missing, q(lateness, 0.5), q(lateness, 0.99), lateness[len(lateness)-1],
			q(fired, 0.5), q(fired, 0.99), fired[len(fired)-1], float64(heap)/(1<<20))
	}
}

func runTimers(b *testing.B, n, instances int, spread time.Duration) (lateness, fired []time.Duration, dupes, missing int, heapGrowth int64) {
	res := natstest.Bus(b, bus.Config{})
	store := schedule.NewStore(res.JS, res.Schedules)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inbox, err := res.InboxOf(ctx, "Echo") // the agent the timers fire for
	require.NoError(b, err)
	heapBefore := heapInUse()
	start := time.Now().Add(5 * time.Second) // time to set them all
	for i := range n {
		due := start.Add(time.Duration(i) * spread / time.Duration(n))
		req := template("u")
		req.ActivationName = "a" + strconv.Itoa(i%instances)
		req.WorkflowId = "acme:Echo:Supervisor Workflow:" + req.ActivationName
		req.Data = binary.BigEndian.AppendUint64(nil, uint64(due.UnixNano()))
		sch := schedule.Schedule{Name: "t" + strconv.Itoa(i), Tenant: "acme", WorkflowID: req.WorkflowId, Pattern: schedule.At(due), Request: req}
		require.NoError(b, store.Set(ctx, sch, ""))
	}
	heapGrowth = heapInUse() - heapBefore
	// When the server fired each: the stored time of what it put on the target subject.
	var firedMu sync.Mutex
	var firings []time.Duration
	firedSoFar := func() []time.Duration {
		firedMu.Lock()
		defer firedMu.Unlock()
		return slices.Clone(firings)
	}
	watch, err := res.Schedules.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject.SchedulesFired()}})
	require.NoError(b, err)
	wc, err := watch.Consume(func(m jetstream.Msg) {
		req := new(agentbusv1.Request)
		md, err := m.Metadata()
		if err != nil || proto.Unmarshal(m.Data(), req) != nil {
			return
		}
		due := time.Unix(0, int64(binary.BigEndian.Uint64(req.GetData())))
		firedMu.Lock()
		firings = append(firings, md.Timestamp.Sub(due))
		firedMu.Unlock()
	})
	require.NoError(b, err)
	defer func() {
		wc.Stop()
		<-wc.Closed()
	}()
	relayed := make(chan error, 1)
	go func() { relayed <- store.Relay(ctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-relayed }()

	cons, err := inbox.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(b, err)
	type arrival struct {
		at  time.Time
		req *agentbusv1.Request
	}
	arrivals := make(chan arrival, n)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		at := time.Now()
		req := new(agentbusv1.Request)
		if proto.Unmarshal(m.Data(), req) == nil {
			arrivals <- arrival{at, req}
		}
		_ = m.Ack()
	})
	require.NoError(b, err)
	defer cc.Stop()
	seen := make(map[string]bool, n)
	timeout := time.After(5*time.Second + spread + 30*time.Second)
	for len(seen) < n {
		select {
		case a := <-arrivals:
			if seen[a.req.GetTimer()] {
				dupes++
				continue
			}
			seen[a.req.GetTimer()] = true
			due := time.Unix(0, int64(binary.BigEndian.Uint64(a.req.GetData())))
			lateness = append(lateness, a.at.Sub(due))
		case <-timeout:
			return lateness, firedSoFar(), dupes, n - len(seen), heapGrowth
		}
	}
	time.Sleep(2 * time.Second) // any duplicate would come now
	for len(arrivals) > 0 {
		<-arrivals
		dupes++
	}
	return lateness, firedSoFar(), dupes, n - len(seen), heapGrowth
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
