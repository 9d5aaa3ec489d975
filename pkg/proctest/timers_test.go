package proctest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// BenchmarkProcessesPendingReminders measures what pending timers cost a workflow host process.
// It starts nats-server, an ingress and one workflow host as separate processes, has Echo's
// remind method schedule AGENTBUS_BENCH_REMINDERS reminders (default 100,000) due in six days,
// spread over AGENTBUS_BENCH_REMINDER_INSTANCES instances (default 10,000) and made by
// AGENTBUS_BENCH_CLIENTS callers at once (default 32), each a send with wait=true as a client
// would make it. It prints how long setting them took, how many schedules the schedules stream
// then holds, and the host's resident memory before and once they are pending: each the last of
// reads over AGENTBUS_BENCH_SETTLE_SECONDS (default 150) while the host is left alone, so that
// its collector has run and returned what it freed. A pending timer lives in NATS, so the host's
// memory should not grow with their number; nats-server's is printed too. Run it once:
//
//	AGENTBUS_PROCESS_TEST=1 go test -run '^$' -bench PendingReminders -benchtime 1x -timeout 30m ./pkg/proctest/
func BenchmarkProcessesPendingReminders(b *testing.B) {
	bins := needProcesses(b)
	reminders := envInt(b, "AGENTBUS_BENCH_REMINDERS", 100000)
	instances := envInt(b, "AGENTBUS_BENCH_REMINDER_INSTANCES", 10000)
	clients := envInt(b, "AGENTBUS_BENCH_CLIENTS", 32)
	// The runtime's scavenger returns freed memory to the system over a few seconds after a
	// collection, and a process that allocates little is collected at least every two minutes
	// (the forced GC), so the default wait covers both.
	settle := time.Duration(envInt(b, "AGENTBUS_BENCH_SETTLE_SECONDS", 150)) * time.Second
	for range b.N {
		r := pendingReminders(b, bins, reminders, instances, clients, settle)
		b.Logf("%d reminders over %d instances set in %v (%.0f a second, %d callers); the schedules stream holds %d messages",
			reminders, instances, r.took.Round(time.Second), float64(reminders)/r.took.Seconds(), clients, r.pending)
		b.Logf("host RSS: %.1f MiB before, peak %.1f MiB while setting them, %.1f MiB with them pending (settled reads %s): grew %.1f MiB (goal < 20 MB)",
			mib(r.before), mib(r.peak), mib(r.after), r.settling, mib(r.after-r.before))
		b.Logf("nats-server RSS, which holds them: %.1f MiB before, %.1f MiB with them pending", mib(r.natsBefore), mib(r.natsAfter))
		b.ReportMetric(mib(r.after-r.before), "MiB-host-growth")
		b.ReportMetric(float64(reminders)/r.took.Seconds(), "reminders/s")
	}
}

// reminderRun is what one run of BenchmarkProcessesPendingReminders measured.
type reminderRun struct {
	before, peak, after   int64 // host RSS in bytes
	natsBefore, natsAfter int64 // nats-server RSS in bytes
	settling              string
	took                  time.Duration
	pending               uint64
}

// remindAhead is how far ahead each reminder is due: within Echo's limit of seven days, far
// beyond the run.
const remindAhead = 6 * 24 * time.Hour

func pendingReminders(b *testing.B, bins proctest.Bins, reminders, instances, clients int, settle time.Duration) reminderRun {
	b.Helper()
	nats := proctest.StartNATS(b, bins, proctest.NATSOptions{})
	sys := newSystem(b, bins, nats.URL)
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	host := sys.hosts["host-1"]

	var r reminderRun
	r.before, _ = settledRSS(b, host, settle)
	r.natsBefore = rss(b, nats.Proc)

	var (
		next, failed atomic.Int64
		peak         atomic.Int64
		wg           sync.WaitGroup
	)
	ctx := proctest.Context(b, time.Hour)
	began := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= reminders || ctx.Err() != nil {
					return
				}
				if err := sys.remind(ctx, fmt.Sprintf("remind-%d", i%instances), i); err != nil {
					if failed.Add(1) <= 5 {
						b.Logf("reminder %d: %v", i, err)
					}
				}
				if i%1000 == 0 {
					if n, err := host.RSS(); err == nil && n > peak.Load() {
						peak.Store(n)
					}
				}
			}
		})
	}
	wg.Wait()
	r.took = time.Since(began)
	require.Zero(b, failed.Load(), "reminders failed")

	var samples []int64
	r.after, samples = settledRSS(b, host, settle)
	r.peak = max(peak.Load(), slices.Max(samples))
	r.settling = fmt.Sprintf("%.1f … %.1f MiB", mib(slices.Min(samples)), mib(slices.Max(samples)))
	r.natsAfter = rss(b, nats.Proc)

	timers := sys.timerStreams(ctx, b)
	for _, st := range timers.Timers {
		info, err := st.Info(ctx)
		require.NoError(b, err)
		r.pending += info.State.Msgs
	}
	return r
}

// remind asks Echo instance activation to remind its participant in six days, and waits for the
// answer, as a client would.
func (s *system) remind(ctx context.Context, activation string, i int) error {
	body := map[string]any{"agentName": "Echo", "activationName": activation, "participantId": "ada", "type": "Data",
		"text": "remind", "data": map[string]any{"text": "reminder " + strconv.Itoa(i), "ms": remindAhead.Milliseconds()}}
	status, b, err := s.send(ctx, true, body)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("remind: %d %s", status, b)
	}
	return nil
}

// settledRSS leaves the process alone for settle, reading its resident memory every five
// seconds, and returns the last read and all of them.
func settledRSS(b *testing.B, p *proctest.Proc, settle time.Duration) (int64, []int64) {
	b.Helper()
	var samples []int64
	for end := time.Now().Add(settle); ; {
		n := rss(b, p)
		samples = append(samples, n)
		if time.Now().After(end) {
			return n, samples
		}
		time.Sleep(5 * time.Second)
	}
}

// rss reads a process's resident memory.
func rss(b *testing.B, p *proctest.Proc) int64 {
	b.Helper()
	n, err := p.RSS()
	require.NoError(b, err)
	return n
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// envInt reads a positive count from the environment, def when unset.
func envInt(b testing.TB, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	require.Positive(b, n, name)
	return n
}
