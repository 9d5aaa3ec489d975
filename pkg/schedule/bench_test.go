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

// BenchmarkTimersDueWithinAMinute sets AGENTBUS_BENCH_TIMERS one-time timers (default 10,000) of
// tenant acme on AGENTBUS_BENCH_TIMER_INSTANCES instances (default 100) due spread over
// AGENTBUS_BENCH_TIMERS_SPREAD (default 1m) on an embedded NATS server, and, set after them,
// AGENTBUS_BENCH_QUIET_TIMERS timers (default 20) of another tenant, of another timer shard, due
// spread over the same time; it relays them to the inbox and prints how late each reached it
// (p50, p99, max; the other tenant's apart), how late the server fired it (stored it on its
// target subject, which the relays then move), whether every one arrived once, and how much the
// process's heap grew while they were pending (they live in NATS; the embedded server shares the
// process here, so the figure is an upper bound for a host's own growth).
func BenchmarkTimersDueWithinAMinute(b *testing.B) {
	n := envInt("AGENTBUS_BENCH_TIMERS", 10000)
	quiet := envInt("AGENTBUS_BENCH_QUIET_TIMERS", 20)
	instances := envInt("AGENTBUS_BENCH_TIMER_INSTANCES", 100)
	spread, err := time.ParseDuration(envOr("AGENTBUS_BENCH_TIMERS_SPREAD", "1m"))
	require.NoError(b, err)
	for range b.N {
		r := runTimers(b, n, quiet, instances, spread)
		q := func(d []time.Duration, p float64) time.Duration {
			if len(d) == 0 {
				return 0
			}
			slices.Sort(d)
			return d[int(p*float64(len(d)-1))]
		}
		b.Logf("%d timers on %d instances over %v: arrived %d, duplicates %d, missing %d; lateness p50 %v p99 %v max %v (fired: p50 %v p99 %v max %v); heap growth while pending %.1f MiB",
			n, instances, spread, len(r.late[busyTenant]), r.dupes, r.missing, q(r.late[busyTenant], 0.5), q(r.late[busyTenant], 0.99), q(r.late[busyTenant], 1),
			q(r.fired[busyTenant], 0.5), q(r.fired[busyTenant], 0.99), q(r.fired[busyTenant], 1), float64(r.heapGrowth)/(1<<20))
		b.Logf("another tenant's %d timers due meanwhile (timer shard %d, against %d): lateness p50 %v max %v (fired: p50 %v max %v)",
			len(r.late[quietTenant]), subject.TimerShard(quietTenant), subject.TimerShard(busyTenant),
			q(r.late[quietTenant], 0.5), q(r.late[quietTenant], 1), q(r.fired[quietTenant], 0.5), q(r.fired[quietTenant], 1))
	}
}

// The tenants of BenchmarkTimersDueWithinAMinute: the one whose timers fall due by thousands, and
// another, of another timer shard.
const (
	busyTenant  = "acme"
	quietTenant = "globex"
)

// timersRun is what runTimers measured, by tenant: how late each timer reached the inbox and
// how late the server fired it.
type timersRun struct {
	late, fired    map[string][]time.Duration
	dupes, missing int
	heapGrowth     int64
}

func runTimers(b *testing.B, n, quiet, instances int, spread time.Duration) timersRun {
	require.NotEqual(b, subject.TimerShard(busyTenant), subject.TimerShard(quietTenant))
	res := natstest.Bus(b, bus.Config{})
	store := schedule.NewStore(res.JS, res)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inbox, err := res.InboxOf(ctx, "Echo") // the agent the timers fire for
	require.NoError(b, err)
	heapBefore := heapInUse()
	start := time.Now().Add(5 * time.Second) // time to set them all
	set := func(tenant string, i, of int) {
		due := start.Add(time.Duration(i) * spread / time.Duration(of))
		req := template("u")
		req.TenantId = tenant
		req.ActivationName = "a" + strconv.Itoa(i%instances)
		req.WorkflowId = tenant + ":Echo:Supervisor Workflow:" + req.ActivationName
		req.Data = binary.BigEndian.AppendUint64(nil, uint64(due.UnixNano()))
		sch := schedule.Schedule{Name: "t" + strconv.Itoa(i), Tenant: tenant, WorkflowID: req.WorkflowId, Pattern: schedule.At(due), Request: req}
		require.NoError(b, store.Set(ctx, sch, ""))
	}
	for i := range n {
		set(busyTenant, i, n)
	}
	for i := range quiet {
		set(quietTenant, i, quiet)
	}
	r := timersRun{late: map[string][]time.Duration{}, fired: map[string][]time.Duration{}}
	r.heapGrowth = heapInUse() - heapBefore
	// When the server fired each: the stored time of what it put on the target subject.
	var firedMu sync.Mutex
	for _, tenant := range []string{busyTenant, quietTenant} {
		shard := subject.TimerShard(tenant)
		watch, err := res.Timers[shard].OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject.SchedulesFired(shard)}})
		require.NoError(b, err)
		wc, err := watch.Consume(func(m jetstream.Msg) {
			req := new(agentbusv1.Request)
			md, err := m.Metadata()
			if err != nil || proto.Unmarshal(m.Data(), req) != nil {
				return
			}
			due := time.Unix(0, int64(binary.BigEndian.Uint64(req.GetData())))
			firedMu.Lock()
			r.fired[req.GetTenantId()] = append(r.fired[req.GetTenantId()], md.Timestamp.Sub(due))
			firedMu.Unlock()
		})
		require.NoError(b, err)
		defer func() {
			wc.Stop()
			<-wc.Closed()
		}()
	}
	relayed := make(chan error, 1)
	go func() { relayed <- store.Relay(ctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-relayed }()

	cons, err := inbox.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(b, err)
	type arrival struct {
		at  time.Time
		req *agentbusv1.Request
	}
	arrivals := make(chan arrival, n+quiet)
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
	done := func() timersRun {
		firedMu.Lock()
		defer firedMu.Unlock()
		for k, v := range r.fired {
			r.fired[k] = slices.Clone(v)
		}
		return r
	}
	seen := make(map[string]bool, n+quiet)
	timeout := time.After(5*time.Second + spread + 30*time.Second)
	for len(seen) < n+quiet {
		select {
		case a := <-arrivals:
			key := a.req.GetTenantId() + "/" + a.req.GetTimer()
			if seen[key] {
				r.dupes++
				continue
			}
			seen[key] = true
			due := time.Unix(0, int64(binary.BigEndian.Uint64(a.req.GetData())))
			r.late[a.req.GetTenantId()] = append(r.late[a.req.GetTenantId()], a.at.Sub(due))
		case <-timeout:
			r.missing = n + quiet - len(seen)
			return done()
		}
	}
	time.Sleep(2 * time.Second) // any duplicate would come now
	for len(arrivals) > 0 {
		<-arrivals
		r.dupes++
	}
	return done()
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
