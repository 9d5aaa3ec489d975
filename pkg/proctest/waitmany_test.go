package proctest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Many asks wait at once on one workflow host process: AGENTBUS_WAITS_COUNT of them (default
// 10,000; parking them takes about 7 s on two cores, the test about a minute, most of it waiting
// for the instances to leave the host's memory), AGENTBUS_WAITS_PER_INSTANCE participants of each
// instance asking (default 25: 400 instances; an instance holds at most 256 waits), sent by 32
// callers at once, each answered 202. A waiting request holds nothing in the host: its resident
// memory and goroutines, read once the instances the asks loaded have left its memory and after
// collections, are about what they were before the asks (asserted, against the target: RSS grows by
// less than 20 MB; goroutines by at most 10). The memory judged is the resident memory less the
// free heap the runtime keeps for reuse (heap idle less heap released): after the burst the runtime
// may keep tens of MiB of it through every collection the test asks for (it returns free heap in
// the background while it holds more than about its next collection's goal, five times the live
// heap at agentbus's GOGC of 400, and below that only from chunks left sparse for a cycle), which
// measures the collector's pacing, not what the waits hold; the figures print both. The waits
// stream holds one request per ask. Then AGENTBUS_WAITS_SAMPLE of the waits (default 200), on
// different instances where there are enough, are answered one at a time with a Chat message, each
// answered 200 with its ask's result; the latency of each answer is printed (p50, p99; the target
// is p99 ≤ 250 ms), not judged: the machine is shared. The waits stream then holds exactly the
// waits not answered.
//
// Run it with 10,000 waiting on 10,000 instances, or on 40 instances:
//
//	AGENTBUS_PROCESS_TEST=1 AGENTBUS_WAITS_PER_INSTANCE=1 go test -v -run ManyAsksWait ./pkg/proctest/
//	AGENTBUS_PROCESS_TEST=1 AGENTBUS_WAITS_PER_INSTANCE=250 go test -v -run ManyAsksWait ./pkg/proctest/
func TestProcessesManyAsksWaitWithNothingHeld(t *testing.T) {
	bins := needProcesses(t)
	// Most of it is waiting for the instances to leave the host's memory: it runs beside the
	// other parallel process tests. It judges its own host's memory only.
	t.Parallel()
	total := envInt(t, "AGENTBUS_WAITS_COUNT", 10000)
	perInstance := envInt(t, "AGENTBUS_WAITS_PER_INSTANCE", 25)
	sample := min(envInt(t, "AGENTBUS_WAITS_SAMPLE", 200), total)
	require.LessOrEqual(t, perInstance, instance.MaxWaits, "AGENTBUS_WAITS_PER_INSTANCE")
	instances := (total + perInstance - 1) / perInstance

	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	sys.startHost("host-1", "AGENTBUS_METRICS_ADDR="+metricsAddr, "AGENTBUS_PPROF_ADDR="+pprofAddr)
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	host := sys.hosts["host-1"]
	ctx := proctest.Context(t, 3*time.Minute+time.Duration(total)*10*time.Millisecond)

	// A warm-up: asks parked and answered, so that the host has run every path once.
	for i := range 20 {
		a := fmt.Sprintf("warm-%d", i)
		sys.ask(ctx, t, a, "ada", map[string]any{"question": "Warm?"})
		status, body, err := sys.converseChat(ctx, a, "ada", "yes")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, "answering warm-up ask %d: %s", i, body)
	}
	before := sys.collectedHost(ctx, t, host, metricsAddr, pprofAddr)

	// Request i asks as participant i/instances of instance i%instances: callers at once reach
	// different instances.
	where := func(i int) (activation, participant string) {
		return fmt.Sprintf("many-%d", i%instances), fmt.Sprintf("p%d", i/instances)
	}
	question := func(i int) string { return fmt.Sprintf("Question %d?", i) }
	var (
		next, failed atomic.Int64
		peak         atomic.Int64
		wg           sync.WaitGroup
	)
	began := time.Now()
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total || ctx.Err() != nil {
					return
				}
				a, p := where(i)
				status, body, err := sys.converse(ctx, a, "ask", map[string]any{"question": question(i)}, url.Values{"participantId": {p}})
				if err == nil && status != http.StatusAccepted {
					err = fmt.Errorf("%d %s", status, body)
				}
				if err == nil {
					_, err = waitingOf(body)
				}
				if err != nil && failed.Add(1) <= 5 {
					t.Logf("ask %d (%s, %s): %v", i, a, p, err)
				}
				if i%500 == 0 {
					if n, err := host.RSS(); err == nil && n > peak.Load() {
						peak.Store(n)
					}
				}
			}
		})
	}
	wg.Wait()
	parking := time.Since(began)
	require.Zero(t, failed.Load(), "asks were not answered 202")
	loaded := sys.hostMetrics(ctx, t, metricsAddr)
	parked := sys.streamMsgs(ctx, t, subject.WaitsStream)
	after := sys.settledHost(ctx, t, host, metricsAddr, pprofAddr)
	t.Logf("%d asks parked on %d instances (%d participants each) in %v (%.0f a second, 32 callers); the waits stream holds %d requests",
		total, instances, perInstance, parking.Round(time.Millisecond), float64(total)/parking.Seconds(), parked)
	t.Logf("host RSS: %.1f MiB before, peak %.1f MiB while parking, %.1f MiB right after (%d instances live), %.1f MiB once they left memory and after a collection: grew %.1f MiB (target < 20 MB)",
		mib(before.rss), mib(max(peak.Load(), loaded.rss)), mib(loaded.rss), loaded.live, mib(after.rss), mib(after.rss-before.rss))
	t.Logf("host goroutines: %d before, %d right after, %d settled; heap in use %.1f MiB before, %.1f MiB settled; free heap not returned to the system %.1f MiB before, %.1f MiB settled; RSS less it grew %.1f MiB",
		before.goroutines, loaded.goroutines, after.goroutines, mib(before.heap), mib(after.heap), mib(before.kept()), mib(after.kept()), mib(after.held()-before.held()))
	assert.EqualValues(t, total, parked, "the waits stream holds one request per ask")
	assert.Less(t, after.held()-before.held(), int64(20<<20), "host RSS growth (less the free heap kept) with %d asks waiting", total)
	assert.LessOrEqual(t, after.goroutines, before.goroutines+10, "host goroutines with %d asks waiting", total)

	// A sample answered one at a time: on different instances (so that each answer finds its
	// instance out of memory) while there are enough, the participants taking turns.
	var latencies []time.Duration
	answered := map[int]bool{}
	for k := range sample {
		i := (k%perInstance)*instances + k*instances/sample
		if sample > instances {
			i = (k/instances%perInstance)*instances + k%instances
		}
		i %= total
		for answered[i] {
			i = (i + 1) % total
		}
		answered[i] = true
		a, p := where(i)
		start := time.Now()
		status, body, err := sys.converseChat(ctx, a, p, "answer "+strconv.Itoa(i))
		took := time.Since(start)
		require.NoError(t, err, "answering ask %d", i)
		require.Equal(t, http.StatusOK, status, "answering ask %d (%s, %s): %s", i, a, p, body)
		want := fmt.Sprintf(`{"answer":"answer %d","by":%q,"question":%q,"type":"chat"}`, i, p, question(i))
		require.JSONEq(t, want, string(responseData(t, body)), "the result of ask %d", i)
		latencies = append(latencies, took)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1)+0.5)] }
	end := sys.hostMetrics(ctx, t, metricsAddr)
	t.Logf("%d of the %d waits answered one at a time (a Chat message answered 200 with the ask's result): p50 %v, p90 %v, p99 %v, max %v (target p99 ≤ 250 ms); host goroutines after %d",
		sample, total, pct(0.5).Round(100*time.Microsecond), pct(0.9).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond),
		latencies[len(latencies)-1].Round(100*time.Microsecond), end.goroutines)
	// A resumed request purges its wait's subject once it has run: wait for the last one.
	var left uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = sys.streamMsgs(ctx, t, subject.WaitsStream); left == uint64(total-sample) || time.Now().After(deadline) {
			break
		}
	}
	assert.EqualValues(t, total-sample, left, "the waits stream after %d of the waits were answered", sample)
	sys.noDeadLetters(t, 1)
}

// hostFigures are a workflow host's resident memory, goroutines, heap in use and live instances.
type hostFigures struct {
	rss, heap int64
	// idle and released are the heap's free memory and the part of it returned to the system.
	idle, released   int64
	goroutines, live int
}

// kept is the free heap the runtime keeps, not returned to the system: part of the resident
// memory that holds nothing.
func (f hostFigures) kept() int64 { return f.idle - f.released }

// held is the resident memory less the free heap the runtime keeps (kept).
func (f hostFigures) held() int64 { return f.rss - f.kept() }

// hostMetrics reads a workflow host's figures from its /metrics on addr.
func (s *system) hostMetrics(ctx context.Context, t *testing.T, addr string) hostFigures {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "reading the host's metrics")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "reading the host's metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode, "reading the host's metrics: %s", b)
	values := map[string]float64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			values[name] = f
		}
	}
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines", "go_memstats_heap_inuse_bytes",
		"go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "agentbus_instances_live"} {
		_, ok := values[name]
		require.True(t, ok, "the host's metrics have no %s", name)
	}
	return hostFigures{rss: int64(values["process_resident_memory_bytes"]), heap: int64(values["go_memstats_heap_inuse_bytes"]),
		idle: int64(values["go_memstats_heap_idle_bytes"]), released: int64(values["go_memstats_heap_released_bytes"]),
		goroutines: int(values["go_goroutines"]), live: int(values["agentbus_instances_live"])}
}

// settledHost waits until the host holds no instance in memory (they leave it once idle for
// 30 s, liveKeep, or sooner when they hold more than 16 MiB), then returns its figures after a
// collection (collectedHost).
func (s *system) settledHost(ctx context.Context, t *testing.T, host *proctest.Proc, metricsAddr, pprofAddr string) hostFigures {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for f := s.hostMetrics(ctx, t, metricsAddr); f.live > 0; f = s.hostMetrics(ctx, t, metricsAddr) {
		require.True(t, time.Now().Before(deadline), "%d instances still live in the host after 90 s", f.live)
		time.Sleep(200 * time.Millisecond)
	}
	return s.collectedHost(ctx, t, host, metricsAddr, pprofAddr)
}

// collectedHost has the host collect its garbage, a second apart, until the runtime has returned
// to the system the heap it freed (the free heap it still keeps, heap idle less heap released,
// is under 4 MiB) or it collected 6 times, and returns its figures then: its resident memory
// from /proc.
//
// Twice at least: the runtime's scavenger returns to the system only the memory of heap chunks
// that were sparse for a whole collection cycle, so after one collection that follows a burst it
// returns nothing, and after two it may still keep chunks that the host's work in between
// touched; the host would collect again by itself within two minutes (the runtime's forced
// collection), when the same memory goes back.
func (s *system) collectedHost(ctx context.Context, t *testing.T, host *proctest.Proc, metricsAddr, pprofAddr string) hostFigures {
	t.Helper()
	collect(t, ctx, pprofAddr)
	var f hostFigures
	for range 5 {
		collect(t, ctx, pprofAddr)
		time.Sleep(time.Second)
		if f = s.hostMetrics(ctx, t, metricsAddr); f.kept() < 4<<20 {
			break
		}
	}
	n, err := host.RSS()
	require.NoError(t, err)
	f.rss = n
	return f
}
