package proctest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// A workflow host process is sent one request for each of many distinct instances (20,000 by
// default; AGENTBUS_PROCESS_INSTANCES=1000000 for the full run), which then go idle. The host's
// resident memory before, right after, and once the instances are idle is printed: an idle
// instance costs the host nothing, so the last figure does not grow with the count. The idle
// figure is read after a garbage collection in the host (through its profiling endpoint): with
// GOGC=400 an idle host may go two minutes without one, holding the dropped instances' memory
// as garbage meanwhile.
func TestProcessesIdleInstancesMemory(t *testing.T) {
	t.Parallel() // beside the other parallel process tests: it judges its own host's memory only, and most of it is waiting for the instances to leave it
	bins := needProcesses(t)
	total := 20000
	if v := os.Getenv("AGENTBUS_PROCESS_INSTANCES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "AGENTBUS_PROCESS_INSTANCES")
		total = n
	}
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	sys.startHost("host-1", "AGENTBUS_PPROF_ADDR="+pprofAddr)
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	host := sys.hosts["host-1"]
	rss := func() float64 {
		b, err := host.RSS()
		require.NoError(t, err)
		return float64(b) / (1 << 20)
	}
	start := rss()

	var (
		next, failed atomic.Int64
		peak         float64
		mu           sync.Mutex
		wg           sync.WaitGroup
	)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	for range 48 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(total) || ctx.Err() != nil {
					return
				}
				status, _, err := sys.webhook(ctx, fmt.Sprintf("idle-%d", i), "echo", nil)
				if err != nil || status != http.StatusOK {
					failed.Add(1)
				}
				if i%5000 == 0 {
					r := rss()
					mu.Lock()
					peak = max(peak, r)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	loaded := rss()
	require.Zero(t, failed.Load(), "calls failed")

	// Instances leave memory once idle for a few seconds; then a collection frees what they
	// held, and the runtime returns it to the system over the next seconds.
	time.Sleep(5 * time.Second)
	before := rss()
	collect(t, ctx, pprofAddr)
	time.Sleep(10 * time.Second)
	idle := rss()
	t.Logf("host RSS: %.1f MiB at start, peak %.1f MiB while %d distinct instances were each sent one request (%v, %.0f req/s), %.1f MiB right after, %.1f MiB once idle, %.1f MiB after a collection (goal < 150 MB)",
		start, max(peak, loaded), total, took.Round(time.Second), float64(total)/took.Seconds(), loaded, before, idle)
	require.Less(t, idle, 150.0, "host RSS with %d idle instances", total)
}

// collect runs a garbage collection in the process serving Go's profiling endpoints on addr: a
// heap profile asked for with gc=1 collects first.
func collect(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "asking the host for a collection")
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "asking the host for a collection")
}
