package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Phase names.
const (
	phaseBare     = "bare"
	phaseAgentbus = "agentbus"
)

// drainGrace bounds how long requests still in flight when the measured window ends may take
// before they are cancelled (and counted as errors).
const drainGrace = 5 * time.Second

// lateAfter is how far behind its scheduled time an open-loop request may start before it
// counts as late.
const lateAfter = time.Millisecond

// options configure one phase.
type options struct {
	// GOGC is the garbage collector's target the process runs with, for the header. When
	// stackGC is set, the phases that embed the NATS server (pipeline, agentbus) run with that
	// target and the standalone's memory limit (stackLimit), and the bare phase with Go's
	// default, 100, and no limit: each as it runs in production.
	GOGC       string
	stackGC    int
	Duration   time.Duration
	Warmup     time.Duration
	Clients    int
	Instances  int
	Partitions int
	// Tenants spreads the instances over this many tenants, bench-0 to bench-{Tenants-1}, each
	// with a key of its own (webhook target, in-process stack only); 1 or less: all in tenant
	// "default". tenantKeys are their keys, set by the agentbus phase.
	Tenants    int
	tenantKeys []string
	// RemoteAgents registers this many idle remote agents in the in-process stack before the
	// load (a system admin's, never called): each adds an inbox with its partitions' consumers,
	// and a host in the stack.
	RemoteAgents int
	// Idle, when positive, measures the agentbus phase's stack idle for that long before its
	// load: the CPU it takes a second with no call (with the RemoteAgents registered).
	Idle time.Duration
	// IdleSettle is how long the stack settles before the idle measurement: idle partitions
	// doze after agent.HostConfig.IdleAfter (30 s) to twice that.
	IdleSettle time.Duration
	// PartitionIdleAfter is the in-process host's agent.HostConfig.IdleAfter: 0 its default,
	// negative never.
	PartitionIdleAfter time.Duration
	// IdleEvery, when positive, has the idle stack answer one webhook call every IdleEvery
	// (the instances in turn) from the start of IdleSettle: an agent called now and then.
	IdleEvery time.Duration
	Body      []byte
	// Target is the endpoint the load goes to: targetWebhook, targetSend, targetSendWait or
	// targetConverse.
	Target string
	// URL, when set, is an agentbus already running (its ingress base URL), which the agentbus
	// phase loads instead of starting one in-process, with Key, a tenant-admin key of tenant
	// "default". Its processes, not this one's, then do the work: the multi-process tests load
	// stacks of separate processes this way.
	URL, Key string
	// Rate, when positive, makes the phase an open loop: requests are due on a fixed schedule of
	// Rate per second, and Clients bounds how many are in flight at once. Zero is a closed loop.
	Rate float64
	// OnMeasure, when set, is called as the measured window starts; the function it returns is
	// called as the window ends.
	OnMeasure func() (end func())
	// answers, when set, are what the bare phase answers; else it computes them (webhook) or
	// measures them from the stack (the others).
	answers *answers
	// Bins is a directory with the binaries of the processes phase (nats-server, ingress,
	// workflowhost); empty builds them from this module. ProcEnv is extra environment of its
	// processes.
	Bins    string
	ProcEnv procEnv
	// Rounds is how many times the phases run in turn (the command's -rounds).
	Rounds int
	// RateLimit, when positive, is the in-process ingress's rate limit of every key and every
	// tenant, in requests a second (the command's -rate-limit): set above the load, it measures
	// what the limiter costs a call. Zero sets none.
	RateLimit float64
	// ProfileServers, when set, is the file prefix of CPU profiles of the measured window taken
	// from the processes that serve the phase (processes phase only): prefix.nats and so on.
	ProfileServers string
}

func (o options) validate() error {
	switch {
	case o.Duration <= 0:
		return errors.New("-duration must be positive")
	case o.Warmup < 0:
		return errors.New("-warmup must not be negative")
	case o.Clients < 1:
		return errors.New("-clients must be at least 1")
	case o.Instances < 1:
		return errors.New("-instances must be at least 1")
	case o.Partitions < 1 || o.Partitions > 1024:
		return errors.New("-partitions must be from 1 to 1024")
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return errors.New("rates must be positive numbers of requests per second")
	case !slices.Contains(targets, o.Target):
		return fmt.Errorf("-target %q: want %s", o.Target, strings.Join(targets, ", "))
	case o.Target != targetWebhook && !isJSONObject(o.Body):
		return fmt.Errorf("-body must be a JSON object for -target %s: it holds the echo method's parameters", o.Target)
	case (o.URL == "") != (o.Key == ""):
		return errors.New("-url and -key go together")
	case o.Tenants > 1 && (o.Target != targetWebhook || o.URL != ""):
		return errors.New("-tenants is for the webhook target of the in-process stack")
	case o.Tenants > o.Instances:
		return errors.New("-tenants must not be more than -instances: each tenant gets instances of its own")
	}
	return nil
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return json.Valid(b) && len(b) > 0 && b[0] == '{'
}

// newClient returns the HTTP client shared by all phases: keep-alive connections to loopback,
// enough idle connections per host that no client goroutine has to dial again.
func newClient(clients int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil, // load targets only 127.0.0.1
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2*clients + 16,
		MaxIdleConnsPerHost: clients + 16,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		DisableKeepAlives:   false,
		ForceAttemptHTTP2:   false,
	}}
}

// startPhase starts the server of a phase: the endpoint to load, and how to stop it.
func startPhase(ctx context.Context, phase string, o options) (endpoint, func() error, error) {
	switch phase {
	case phaseBare:
		return startBare(ctx, o)
	case phaseAgentbus:
		return startAgentbus(ctx, o)
	case phasePipeline:
		return startPipeline(ctx, o)
	case phaseProcesses:
		return startProcesses(ctx, o)
	default:
		return endpoint{}, nil, fmt.Errorf("unknown phase %q", phase)
	}
}

// runTarget starts the phase's server, runs the load against it and stops the server.
func runTarget(ctx context.Context, phase string, o options, client *http.Client) (result, error) {
	if err := o.validate(); err != nil {
		return result{Phase: phase}, err
	}
	ep, stop, err := startPhase(ctx, phase, o)
	if err != nil {
		return result{Phase: phase}, err
	}
	if o.Idle > 0 && phase == phaseAgentbus {
		measureIdle(ctx, o, client, ep)
	}
	primed := time.Now()
	if err := prime(ctx, client, ep, o.Clients); err != nil {
		client.CloseIdleConnections()
		return result{Phase: phase}, errors.Join(fmt.Errorf("priming the instances: %w", err), stop())
	}
	if took := time.Since(primed); len(ep.reqs) > 1 && phase != phaseBare {
		// The first request to an instance starts its run: what a new instance costs.
		fmt.Fprintf(os.Stderr, "  %s: first calls to %d instances in %v, %.0f a second\n",
			phase, len(ep.reqs), took.Round(time.Millisecond), float64(len(ep.reqs))/took.Seconds())
	}
	res := runPhase(ctx, phase, o, client, ep)
	// Connections to this server are useless from now on; close them before the server stops.
	client.CloseIdleConnections()
	if err := stop(); err != nil {
		return res, fmt.Errorf("stopping %s: %w", phase, err)
	}
	if res.Requests == 0 {
		return res, errNoRequests
	}
	return res, nil
}

// measureIdle prints the CPU this process (the in-process stack and nothing else) takes a
// second over o.Idle, after o.IdleSettle, the messages its NATS server handles a second, and
// its goroutines and live heap at the end; with o.IdleEvery, while it calls the stack that often.
func measureIdle(ctx context.Context, o options, client *http.Client, ep endpoint) {
	calls := ""
	if o.IdleEvery > 0 {
		calls = fmt.Sprintf(", a call every %v", o.IdleEvery)
		cctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop()
		wg.Go(func() {
			t := time.NewTicker(o.IdleEvery)
			defer t.Stop()
			for i := 0; ; i++ {
				if _, err := post(cctx, client, ep, ep.reqs[i%len(ep.reqs)]); err != nil && cctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "  idle call: %v\n", err)
				}
				select {
				case <-cctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	if !sleepUntil(ctx, time.Now().Add(o.IdleSettle)) {
		return
	}
	var in0, out0 int64
	if ep.msgs != nil {
		in0, out0 = ep.msgs()
	}
	from, start := processCPU(), time.Now()
	if !sleepUntil(ctx, start.Add(o.Idle)) {
		return
	}
	took := time.Since(start)
	msgs := ""
	if ep.msgs != nil {
		in, out := ep.msgs()
		msgs = fmt.Sprintf(", NATS messages %.0f in and %.0f out a second", float64(in-in0)/took.Seconds(), float64(out-out0)/took.Seconds())
	}
	cpu := float64(processCPU()-from) / float64(time.Millisecond) / took.Seconds()
	runtime.GC() // after the window: the heap left is the live heap
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(os.Stderr, "  agentbus idle, %d remote agents%s: %.1f ms of CPU a second over %v%s, %d goroutines (stacks %.1f MiB), live heap %.1f MiB\n",
		o.RemoteAgents, calls, cpu, took.Round(time.Millisecond), msgs,
		runtime.NumGoroutine(), float64(ms.StackInuse)/(1<<20), float64(ms.HeapAlloc)/(1<<20))
}

// prime sends each of ep's requests once, clients at a time, before the warm-up: the first
// request to an instance starts its run (an instance record and an entry in the run index, whose
// appends to one chain wait for each other), a cost that the measured window of a steady load
// should not carry, however short the warm-up.
func prime(ctx context.Context, client *http.Client, ep endpoint, clients int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range min(clients, len(ep.reqs)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ep.reqs)) && ctx.Err() == nil; i = next.Add(1) - 1 {
				if _, err := post(ctx, client, ep, ep.reqs[i]); err != nil {
					errOnce.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	wg.Wait()
	return first
}

// result is what one phase measured.
type result struct {
	Phase              string
	Rate               float64 // offered requests per second of an open loop; 0 for a closed loop
	Requests           int     // measured requests, errors included
	Errors             int
	Elapsed            time.Duration // length of the measured window
	P50, P90, P99, Max time.Duration // latencies of successful requests
	RespBytes          int64         // response body bytes of successful requests
	Interrupted        bool          // the measured window was cut short
	// Open loop only. Late counts measured requests that started more than lateAfter after
	// their scheduled time (every worker was busy, or the load generator fell behind). Unsent
	// counts requests, warm-up ones included, that were due before the measured window ended
	// but had not started when it did: the offered rate was not sustained, and their latencies,
	// the longest of all, are missing from the percentiles.
	Late, Unsent int
	// Mallocs counts the heap allocations of this process during the measured window: the load
	// generator's, and, for an in-process agentbus, the ingress's, NATS server's and host's.
	Mallocs uint64
	// AllocBytes is the bytes those allocations took; GCs the garbage collections completed
	// during the window.
	AllocBytes uint64
	GCs        uint32
	// Backlog is, for send, the requests accepted and not yet handled at the start and the end
	// of the window; nil when not known.
	Backlog *[2]int64
	// GCCPU is the CPU time the runtime estimates its garbage collector took during the window
	// (background marking, assists, pauses); Scan what the last cycle of the window had to mark:
	// the pointer-holding heap, goroutine stacks and globals, in bytes.
	GCCPU time.Duration
	Scan  gcScan
	// CPU is the CPU time (user and system) this process used during the measured window, and
	// for the processes phase the servers' processes too; zero where the platform does not tell.
	CPU time.Duration
	// Procs is what each process used when other processes serve the load: "bench" (this one,
	// the load generator) and the servers by name; nil otherwise.
	Procs map[string]procUsage
	// NATSIn and NATSOut are the messages the NATS server received and sent during the window,
	// where it runs as a process of its own.
	NATSIn, NATSOut int64
	errs            map[string]int
}

// GCCPUPerCall is the garbage collector's CPU per request of the measured window.
func (r result) GCCPUPerCall() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.GCCPU / time.Duration(r.Requests)
}

// CPUPerCall is CPU per request of the measured window. On a shared machine it drifts less than
// req/s: time the machine gives to other work is not counted.
func (r result) CPUPerCall() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Requests)
}

// AllocsPerCall is Mallocs per request of the measured window.
func (r result) AllocsPerCall() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Mallocs) / float64(r.Requests)
}

// AllocBytesPerCall is AllocBytes per request of the measured window.
func (r result) AllocBytesPerCall() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.AllocBytes) / float64(r.Requests)
}

// RPS is successful requests per second: requests started in the measured window over its length.
func (r result) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Errors) / r.Elapsed.Seconds()
}

// AvgRespBytes is the average response body size of successful requests.
func (r result) AvgRespBytes() float64 {
	if ok := r.Requests - r.Errors; ok > 0 {
		return float64(r.RespBytes) / float64(ok)
	}
	return 0
}

type errCount struct {
	msg string
	n   int
}

// topErrors returns the most frequent distinct errors.
func (r result) topErrors(n int) []errCount {
	out := make([]errCount, 0, len(r.errs))
	for msg, c := range r.errs {
		out = append(out, errCount{msg, c})
	}
	slices.SortFunc(out, func(a, b errCount) int {
		return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.msg, b.msg))
	})
	return out[:min(n, len(out))]
}

// clientStats is what one client goroutine measured; only it writes to it.
type clientStats struct {
	lat       []time.Duration
	errors    int
	late      int
	respBytes int64
	errs      map[string]int
	_         [64]byte // keep neighbours' counters off this cache line
}

// runPhase sends ep's requests, round-robin, from o.Clients goroutines: o.Warmup
// unmeasured, then o.Duration measured. Requests in flight when the window ends get drainGrace
// to finish. It returns once every client goroutine has returned.
//
// In a closed loop (o.Rate == 0) each goroutine sends its next request as soon as the previous
// one is answered, and latency runs from a request's start to the end of its response.
//
// In an open loop (o.Rate > 0) request i is due i/o.Rate seconds after the phase starts; when it
// is due, a dispatcher hands it to a free goroutine, or if all are busy to the first that frees
// up, which sends it. Latency runs from the
// scheduled time, not the actual start, so that a stall delaying the requests behind it is
// charged to them (no coordinated omission). Requests not started by the end of the window are
// not sent; result.Unsent counts those among them that were due more than lateAfter before the
// end (one due in the window's last instant and not yet picked up says nothing about the rate).
//
// Either way a request is measured if it starts within the measured window.
func runPhase(ctx context.Context, phase string, o options, client *http.Client, ep endpoint) result {
	start := time.Now()
	measureStart := start.Add(o.Warmup)
	measureEnd := measureStart.Add(o.Duration)
	parent := ctx
	ctx, cancel := context.WithDeadline(ctx, measureEnd.Add(drainGrace))
	defer cancel()

	// Preallocate room for a generous per-client share of the expected requests.
	perSecond := 100_000.0
	if o.Rate > 0 {
		perSecond = min(o.Rate, perSecond)
	}
	perClient := min(int(o.Duration.Seconds()*perSecond)/o.Clients+1024, 1<<20)
	stats := make([]clientStats, o.Clients)

	// send sends the next request and records it if it is measured; due is when it
	// was meant to start, from which its latency runs.
	var next atomic.Uint64
	send := func(s *clientStats, due time.Time) {
		t0 := time.Now()
		r := ep.reqs[(next.Add(1)-1)%uint64(len(ep.reqs))]
		n, err := post(ctx, client, ep, r)
		d := time.Since(due)
		if t0.Before(measureStart) || (err != nil && parent.Err() != nil) {
			return // warm-up, or cut short by an interrupt
		}
		if t0.Sub(due) > lateAfter {
			s.late++
		}
		if err != nil {
			s.errors++
			if s.errs == nil {
				s.errs = map[string]int{}
			}
			s.errs[err.Error()]++
			return
		}
		s.lat = append(s.lat, d)
		s.respBytes += n
		if d > targetP99/2 && trace.IsEnabled() {
			trace.Log(ctx, "slow", strconv.FormatInt(d.Microseconds(), 10))
		}
	}

	sched := schedule{rate: o.Rate}
	// Open loop: requests sent that were due before unsentCutoff, warm-up included.
	unsentCutoff := measureEnd.Add(-lateAfter)
	var sent atomic.Uint64
	slots := make(chan time.Time)
	var wg sync.WaitGroup
	if o.Rate > 0 {
		// The dispatcher hands each request, when due, to whichever goroutine is free first, or,
		// if none is, to the first that frees up. It sleeps precisely (see sleepUntilPrecise) so
		// that coarse timers do not pass for latency.
		wg.Go(func() {
			defer close(slots)
			for i := uint64(0); ; i++ {
				due := start.Add(sched.at(i))
				if !due.Before(measureEnd) || !sleepUntilPrecise(ctx, due) || !time.Now().Before(measureEnd) {
					return
				}
				select {
				case slots <- due:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	for c := range stats {
		s := &stats[c]
		s.lat = make([]time.Duration, 0, perClient)
		if o.Rate <= 0 {
			wg.Go(func() {
				for {
					t0 := time.Now()
					if !t0.Before(measureEnd) || ctx.Err() != nil {
						return
					}
					send(s, t0)
				}
			})
			continue
		}
		wg.Go(func() {
			for due := range slots {
				if !time.Now().Before(measureEnd) || ctx.Err() != nil {
					continue // handed over too late; counted in Unsent
				}
				if due.Before(unsentCutoff) {
					sent.Add(1)
				}
				send(s, due)
			}
		})
	}

	// Allocations are counted over the measured window, in this whole process.
	var (
		mallocs, allocBytes uint64
		gcs                 uint32
		cpu, gcCPU          time.Duration
		scan                gcScan
		procs               map[string]procUsage
		natsIn, natsOut     int64
		backlogs            *[2]int64
	)
	if sleepUntil(ctx, measureStart) {
		end := func() {}
		if o.OnMeasure != nil {
			end = o.OnMeasure()
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		gcBefore, _ := readGC()
		others := func() map[string]procUsage { return nil }
		if ep.others != nil {
			others = ep.others
		}
		waitProfiles := func() {}
		if o.ProfileServers != "" && ep.profile != nil {
			waitProfiles = ep.profile(o.ProfileServers, o.Duration)
		}
		var inBefore, outBefore int64
		if ep.msgs != nil {
			inBefore, outBefore = ep.msgs()
		}
		backlog := func() int64 { return -1 }
		if ep.backlog != nil && o.Target == targetSend {
			backlog = func() int64 {
				n, err := ep.backlog(ctx)
				if err != nil {
					return -1
				}
				return int64(n)
			}
		}
		backlogBefore := backlog()
		cpuBefore, othersBefore := processCPU(), others()
		sleepUntil(ctx, measureEnd)
		cpu = processCPU() - cpuBefore
		if b := backlog(); b >= 0 && backlogBefore >= 0 {
			backlogs = &[2]int64{backlogBefore, b}
		}
		if ep.msgs != nil {
			in, out := ep.msgs()
			natsIn, natsOut = in-inBefore, out-outBefore
		}
		if after := others(); after != nil {
			procs = map[string]procUsage{}
			for name, u := range after {
				procs[name] = u.minus(othersBefore[name])
				if name != "bench" {
					cpu += procs[name].CPU
				}
			}
		}
		runtime.ReadMemStats(&after)
		var gcAfter time.Duration
		gcAfter, scan = readGC()
		gcCPU = gcAfter - gcBefore
		end()
		waitProfiles()
		mallocs = after.Mallocs - before.Mallocs
		allocBytes = after.TotalAlloc - before.TotalAlloc
		gcs = after.NumGC - before.NumGC
	}
	wg.Wait()

	res := result{Phase: phase, Rate: o.Rate, Elapsed: o.Duration, Mallocs: mallocs, AllocBytes: allocBytes, GCs: gcs, GCCPU: gcCPU, Scan: scan, CPU: cpu, Procs: procs, NATSIn: natsIn, NATSOut: natsOut, Backlog: backlogs, errs: map[string]int{}}
	// An open loop's goroutines may all be done before the window ends: its last request was
	// due within the window and answered before the end.
	if now := time.Now(); now.Before(measureEnd) && parent.Err() != nil {
		res.Interrupted = true
		res.Elapsed = max(now.Sub(measureStart), 0)
	}
	var all []time.Duration
	for i := range stats {
		s := &stats[i]
		all = append(all, s.lat...)
		res.Errors += s.errors
		res.Late += s.late
		res.RespBytes += s.respBytes
		for msg, n := range s.errs {
			res.errs[msg] += n
		}
	}
	if o.Rate > 0 && !res.Interrupted {
		res.Unsent = int(sched.dueBefore(unsentCutoff.Sub(start)) - sent.Load())
	}
	res.Requests = len(all) + res.Errors
	slices.Sort(all)
	res.P50, res.P90, res.P99 = percentile(all, 0.50), percentile(all, 0.90), percentile(all, 0.99)
	if len(all) > 0 {
		res.Max = all[len(all)-1]
	}
	return res
}

// schedule is an open loop's timetable: request i is due rate·i seconds after the start.
type schedule struct{ rate float64 }

// at is when request i is due, after the start.
func (s schedule) at(i uint64) time.Duration {
	return time.Duration(math.Round(float64(i) * float64(time.Second) / s.rate))
}

// dueBefore is how many requests are due before d after the start.
func (s schedule) dueBefore(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	n := uint64(math.Ceil(d.Seconds() * s.rate))
	for n > 0 && s.at(n-1) >= d {
		n--
	}
	for s.at(n) < d {
		n++
	}
	return n
}

// newRequest is the HTTP request of r.
func newRequest(ctx context.Context, ep endpoint, r request) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if ep.auth != "" {
		req.Header.Set("Authorization", ep.auth)
	}
	return req, nil
}

// unwrapURLError drops the *url.Error wrapper, which repeats the URL, key included.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// post sends one request and reads the whole response; any answer but ep.status is an error.
func post(ctx context.Context, client *http.Client, ep endpoint, r request) (int64, error) {
	req, err := newRequest(ctx, ep, r)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, unwrapURLError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != ep.status {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, fmt.Errorf("reading body: %w", err)
	}
	return n, nil
}

// percentile of sorted latencies (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sleepUntilPrecise sleeps until t, more precisely than a timer; false if ctx ended first. Go's
// timers wake an otherwise idle process up to about a millisecond late (the netpoller waits in
// whole milliseconds), which an open loop would count as latency.
func sleepUntilPrecise(ctx context.Context, t time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		sleep(min(d, 20*time.Millisecond)) // short enough to notice ctx ending
	}
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// gcScan is what a garbage collection cycle marked, in bytes.
type gcScan struct{ Heap, Stacks, Globals uint64 }

func (g gcScan) String() string {
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	return fmt.Sprintf("heap %.1f MB, stacks %.1f MB, globals %.1f MB", mb(g.Heap), mb(g.Stacks), mb(g.Globals))
}

// gcMetrics are the runtime/metrics readGC reads, in the order it reads them.
var gcMetrics = []string{"/cpu/classes/gc/total:cpu-seconds", "/gc/scan/heap:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// readGC returns the garbage collector's CPU time so far, and what its last cycle scanned.
func readGC() (time.Duration, gcScan) {
	samples := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	u := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	var cpu time.Duration
	if samples[0].Value.Kind() == metrics.KindFloat64 {
		cpu = time.Duration(samples[0].Value.Float64() * float64(time.Second))
	}
	return cpu, gcScan{Heap: u(1), Stacks: u(2), Globals: u(3)}
}
