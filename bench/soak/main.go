// Command soak runs agentbus as separate processes under a steady mixed load for a given time and
// watches them for leaks: every -interval it prints, for each process (nats-server, the ingress
// and each workflow host), its resident memory, goroutines, open files and CPU, then
// nats-server's connections, subscriptions and consumers, the message counts and bytes of the
// JetStream streams, and the load's counts, errors and latency. At the end
// it compares the samples taken after the warm-up, says whether any process grew, and exits with
// status 1 on a leak, on a request error or when a process died.
//
// It builds the binaries (nats-server from the module cache, services/ingress and
// services/workflowhost) and starts, on 127.0.0.1, one nats-server with a file store in a
// temporary directory, one ingress and -hosts workflow hosts running Echo, each with its metrics
// on a port of its own (AGENTBUS_METRICS_ADDR). It creates tenant "default" and a tenant-admin
// key, waits until every host serves, and offers -rate requests a second, open loop, cycling
// through these kinds, each over -instances Echo instances (soak-0, soak-1, …):
//
//	webhook-echo    2 of 8  POST /api/user/webhooks/{workflow}/echo?apikey=…  (a JSON body)
//	webhook-count   1 of 8  POST /api/user/webhooks/{workflow}/count?apikey=…
//	send            1 of 8  POST …/messaging/send, a Data echo, answered 202 at once
//	send-wait       1 of 8  the same with ?wait=true, answered with Echo's reply
//	converse-chat   1 of 8  POST /api/user/rest/converse, a Chat streamed as Server-Sent Events
//	converse-data   1 of 8  POST /api/user/rest/converse, a Data echo
//	history         1 of 8  GET …/messaging/history, the newest page of 20
//
// and keeps -listeners history listen streams open on the threads of soak-0, soak-1, …, each of
// which closes after 30 to 90 seconds and reconnects with Last-Event-ID. Every answer is checked
// (status, and the echoed data where there is some); a listen stream that the server ends, or that
// cannot resume from its last event, is an error too.
//
// Request n is due n/rate seconds after the start, and one that is late is sent at once.
//
// The process figures come from /proc (resident memory, open file descriptors, CPU time) and, for
// goroutines, from go_goroutines on the ingress's and hosts' /metrics and from the goroutine dump
// of nats-server's monitoring port (/stacksz); nats-server's connections and subscriptions from
// its /varz, its consumers and the streams' sizes from its /jsz.
//
// The verdict: of the samples after -warmup, the last third against the first third, for each
// process and figure, and for nats-server's connections, subscriptions and consumers: by their
// means, or, for the counts that follow the requests in flight (goroutines, open files,
// subscriptions, consumers), by their least values, which a burst of slow calls at one sample
// does not move and a leak does. A growth larger than the figure's threshold (the larger of an absolute and a
// relative one, printed with the verdict) is a leak. nats-server's resident memory, which climbs
// while its file store fills its caches in the first minutes, is judged only over a window of 10
// minutes or more. The streams grow by design (the history keeps every call; instances and
// topics stay in their buckets): their growth is printed per request, not judged, except the
// inbox's, which holds only requests not yet done and must not grow.
//
// Usage:
//
//	go run ./bench/soak [-duration 30m] [-interval 30s] [-warmup D] [-rate 40] [-instances 100]
//	                    [-listeners 4] [-hosts 2] [-standalone] [-idempotency-keys] [-env KEY=VALUE …]
//
// -standalone runs services/standalone (its NATS and one host in the process) in place of
// nats-server, the ingress and the hosts; its NATS has no monitoring port, so the streams and
// nats-server's counts are not read, and its profiling endpoint (AGENTBUS_PPROF_ADDR) is named
// at the start. -env adds a setting to the environment of the processes agentbus runs (GOGC,
// AGENTBUS_MEMORY_LIMIT, …). -idempotency-keys sends every POST but the streamed converse with an
// Idempotency-Key of its own, as a client that retries safely does: the server then keeps, for the dedupe window, the
// request's de-duplication id and its result. Every Go process's line also shows its heap in use and the heap
// size of its next collection (go_memstats_heap_alloc_bytes, go_memstats_next_gc_bytes).
//
// -warmup defaults to a quarter of -duration, at most 5 minutes. It must be run from the
// repository (it builds the binaries there). The processes log to a directory named at the start
// and kept when the run fails (or when AGENTBUS_PROCTEST_KEEP_LOGS is set).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbus/agentbus/pkg/proctest"
)

type options struct {
	Duration  time.Duration
	Interval  time.Duration
	Warmup    time.Duration
	Rate      float64
	Instances int
	Listeners int
	Hosts     int
	// Standalone runs the standalone in place of nats-server, the ingress and the hosts.
	Standalone bool
	// IdempotencyKeys gives every webhook, send and converse call an Idempotency-Key of its own.
	IdempotencyKeys bool
	// Env is added to the environment of every process agentbus runs (KEY=VALUE).
	Env envList
}

// envList is a repeatable flag of KEY=VALUE settings.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

func (e *envList) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func main() {
	var o options
	flag.DurationVar(&o.Duration, "duration", 30*time.Minute, "how long the load runs")
	flag.DurationVar(&o.Interval, "interval", 30*time.Second, "time between two samples")
	flag.DurationVar(&o.Warmup, "warmup", 0, "samples taken before this are printed but not judged (default: a quarter of -duration, at most 5m)")
	flag.Float64Var(&o.Rate, "rate", 40, "requests a second, all kinds together")
	flag.IntVar(&o.Instances, "instances", 100, "Echo instances the requests are spread over")
	flag.IntVar(&o.Listeners, "listeners", 4, "history listen streams kept open")
	flag.IntVar(&o.Hosts, "hosts", 2, "workflow host processes")
	flag.BoolVar(&o.Standalone, "standalone", false, "run the standalone (embedded NATS and one host) instead of separate processes")
	flag.BoolVar(&o.IdempotencyKeys, "idempotency-keys", false, "give every webhook, send and converse Data call its own Idempotency-Key, so that the server keeps its de-duplication id and its result for the dedupe window (10 minutes)")
	flag.Var(&o.Env, "env", "KEY=VALUE added to the environment of agentbus's processes (repeatable): -env GOGC=100")
	flag.Parse()
	if o.Warmup == 0 {
		o.Warmup = min(o.Duration/4, 5*time.Minute)
	}
	switch {
	case o.Duration <= 0 || o.Interval <= 0 || o.Warmup < 0:
		fatalf("-duration and -interval must be positive, -warmup not negative")
	case o.Warmup >= o.Duration:
		fatalf("-warmup %v leaves nothing of -duration %v to judge", o.Warmup, o.Duration)
	case (o.Duration-o.Warmup)/o.Interval < 3:
		fatalf("-duration %v, -warmup %v and -interval %v leave fewer than 3 samples to judge", o.Duration, o.Warmup, o.Interval)
	case !(o.Rate > 0 && o.Rate <= 2000):
		fatalf("-rate %v: want a rate above 0 and at most 2000 a second", o.Rate)
	case o.Instances < 1 || o.Listeners < 0 || o.Listeners > o.Instances || o.Hosts < 1:
		fatalf("want -instances ≥ 1, 0 ≤ -listeners ≤ -instances, -hosts ≥ 1")
	}
	if o.Standalone {
		o.Hosts = 1
	}

	r := &runner{}
	code := r.run(func() int { return soak(r, o) })
	os.Exit(code)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
	os.Exit(2)
}

// soak runs the whole thing and returns the exit status.
func soak(r *runner, o options) int {
	root, err := repoRoot()
	if err != nil {
		r.Errorf("%v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Println("soak: building nats-server, ingress and workflowhost")
	began := time.Now()
	bins, err := proctest.Build(root)
	if err != nil {
		r.Errorf("%v", err)
		return 1
	}
	r.Cleanup(proctest.Cleanup)
	fmt.Printf("soak: built in %v\n", time.Since(began).Round(100*time.Millisecond))

	d := startDeployment(r, bins, o.Hosts, o.Standalone, o.Env)
	if o.Standalone {
		fmt.Printf("soak: standalone %s (profiles on %s/debug/pprof/) serving, tenant default and its key ready in %v\n",
			d.ingress.URL, d.pprof, time.Since(began).Round(100*time.Millisecond))
	} else {
		fmt.Printf("soak: nats-server %s, ingress %s, %d workflow host(s) serving, tenant default and its key ready in %v\n",
			d.nats.URL, d.ingress.URL, o.Hosts, time.Since(began).Round(100*time.Millisecond))
	}

	// A process that dies ends the run.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go d.watch(ctx, cancel)

	l := newLoad(d, o)
	fmt.Printf("soak: %.0f requests a second for %v over %d instances (%s), %d listen streams; a sample every %v, judged after a %v warm-up\n",
		o.Rate, o.Duration, o.Instances, l.mixString(), o.Listeners, o.Interval, o.Warmup)
	fmt.Println()

	// The load runs until the last sample has been taken, at -duration; then one more sample shows
	// the processes 5 s after the load stopped, which is printed and not judged.
	start := time.Now()
	loadCtx, loadStop := context.WithCancel(ctx)
	defer loadStop()
	var wg sync.WaitGroup
	wg.Go(func() { l.run(loadCtx) })

	s := d.sample(ctx, 0, l)
	s.print(os.Stdout, nil, true)
	samples := []sample{s}
	for k := 1; ctx.Err() == nil; k++ {
		at := min(time.Duration(k)*o.Interval, o.Duration)
		select {
		case <-time.After(time.Until(start.Add(at))):
		case <-ctx.Done():
			continue
		}
		s := d.sample(ctx, time.Since(start), l)
		s.print(os.Stdout, &samples[len(samples)-1], false)
		samples = append(samples, s)
		if at == o.Duration {
			break
		}
	}
	loadStop()
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		fmt.Printf("\nsoak: stopped after %v: %v\n", time.Since(start).Round(time.Second), err)
		r.fail()
		return 1
	}
	// Five seconds for the last calls to be handled and for a CPU figure over some time.
	time.Sleep(5 * time.Second)
	fmt.Println("5 s after the load stopped; not judged:")
	idle := d.sample(ctx, time.Since(start), l)
	idle.print(os.Stdout, &samples[len(samples)-1], false)

	fmt.Println()
	v := judge(samples, o.Warmup, l.summary())
	v.print(os.Stdout)
	if !v.pass {
		r.fail()
		return 1
	}
	return 0
}

// repoRoot finds the module's root directory from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/agentbus/agentbus\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run it inside the agentbus repository: it builds the binaries there")
		}
		dir = parent
	}
}

// runner is the proctest.T of the command: it collects cleanups and runs them at the end, last
// registered first, and turns FailNow into an exit.
type runner struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// errFailNow unwinds the main goroutine from a FailNow to run.
var errFailNow = errors.New("soak: FailNow")

// run calls f, runs the cleanups and returns f's exit status, or 1 after a FailNow. Only the main
// goroutine calls FailNow (while the deployment starts).
func (r *runner) run(f func() int) (code int) {
	defer func() {
		if p := recover(); p != nil {
			if p != errFailNow {
				r.close()
				panic(p)
			}
			code = 1
		}
		r.close()
	}()
	return f()
}

func (r *runner) close() {
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func (r *runner) fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

func (r *runner) Helper() {}

func (r *runner) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

func (r *runner) TempDir() string {
	dir, err := os.MkdirTemp("", "agentbus-soak-")
	if err != nil {
		r.Errorf("creating a temporary directory: %v", err)
		r.FailNow()
	}
	r.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (r *runner) Logf(format string, args ...any) {
	fmt.Printf("soak: "+format+"\n", args...)
}

func (r *runner) Errorf(format string, args ...any) {
	r.fail()
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
}

func (r *runner) FailNow() {
	r.fail()
	panic(errFailNow)
}

func (r *runner) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
