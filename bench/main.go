// Command bench measures echo round trips through the whole agentbus stack over loopback HTTP
// and, in the same run and with the same load, a bare net/http handler that answers with the same
// status and a body of the same size, then prints throughput, latency percentiles and the ratio
// of the two.
//
// The agentbus phase starts the stack in-process (package stack: embedded NATS with JetStream on a
// temporary store, the workflow host running the Echo agent, and the ingress on 127.0.0.1), seeds
// a tenant-admin key and sends, spreading requests round-robin over -instances workflow instances
// (activations bench-0, bench-1, …), the requests of -target:
//
//   - webhook (the default): Echo's echo webhook, answered 200 with {params, body, size, sha256}
//
//     POST /api/user/webhooks/default:Echo:Supervisor%20Workflow:bench-{i}/echo?apikey=…&n=1
//
//   - send: a Data message to Echo's echo method, answered 202 {messageId, requestId, workflowId,
//     threadId} at once, before Echo has handled it
//
//     POST /api/v1/admin/tenants/default/messaging/send
//     Authorization: Bearer …
//     {"agentName":"Echo","activationName":"bench-{i}","participantId":"bench","type":"Data","text":"echo","data":{"ping":1}}
//
//   - send-wait: the same with ?wait=true, answered 200 with Echo's reply
//
//   - converse: a Data call of Echo's echo method, answered 200 {…, response: {…}}
//
//     POST /api/user/rest/converse?workflow=default:Echo:Supervisor%20Workflow:bench-{i}&type=Data&text=echo&participantId=bench
//     Authorization: Bearer …
//     {"ping":1}
//
// -body is the webhook's body, or the echo method's parameters (a JSON object) of the others.
//
// The bare phase serves the same load from a plain handler on 127.0.0.1, so the ratio shows what
// agentbus costs on top of Go's HTTP stack on the same machine. It answers with the agentbus
// phase's status and headers and a body as long as the agentbus phase's answer to the same
// request: computed for webhook; for the others measured once at startup, from one real call per
// length of activation name to a stack started for the purpose. Load generator and servers share
// the machine's CPUs.
//
// Each phase first sends one request to each instance (-clients at a time), which starts the
// instances' runs, then runs -warmup unmeasured, then -duration measured, and stops by itself. Every
// response must have the target's status (202 for send, else 200); anything else is counted,
// shown and makes the command exit with status 1.
//
// By default the load is a closed loop: -clients goroutines each send their next request as soon
// as the previous one is answered. Its latency mostly reflects saturation (by Little's law the
// mean is clients / throughput). -rate N instead offers a fixed load, an open loop: requests are
// due every 1/N seconds, at most -clients in flight at once (a request due while all are busy
// starts as soon as one is free), and latency runs from each request's scheduled time, so a stall
// is charged to every request it delays. The open-loop table adds "late", the measured requests
// that started more than 1 ms behind schedule; requests still not started when the window ends
// are not sent, and a row notes how many (the rate was not sustained). -rates 1000,2000,4000 runs
// the open loop at each rate in turn, after the closed loop unless -closed=false; with -rate the
// closed loop runs only if -closed is given.
//
// -phase processes runs the same load against the scaled-out deployment on this machine:
// nats-server (at GOGC=400, as the deploy configs run it), one ingress and one workflow host, each
// a process of its own built from this module (or taken from -bins DIR) and talking over loopback
// TCP. Its CPU per call is that of all four processes (load generator and servers), and the table
// adds each process's CPU and read and write system calls per call and the NATS messages per call.
// -penv name:KEY=VALUE adds to a process's environment (name: nats, ingress, workflowhost or all).
// With -cpuprofile FILE its servers are profiled through their profiling endpoints
// (AGENTBUS_PPROF_ADDR; nats-server's prof_port) into FILE.processes.nats, .ingress and
// .workflowhost, and the load generator into FILE.processes.bench. AGENTBUS_BENCH_KEEP_LOGS=1
// keeps their logs and store.
//
// -rounds N runs the phases N times in turn (bare, agentbus, processes, bare, …), prints each
// round's tables, then the req/s, ratios, p99 and CPU per call of every round and their medians:
// on a shared machine the phases of one round see about the same machine.
//
// Usage:
//
//	go run ./bench [-duration 10s] [-warmup 2s] [-clients 64] [-instances 1000] [-partitions 16] [-tenants N]
//	               [-body '{"ping":1}'] [-phase both|bare|agentbus|bare,agentbus,processes,…]
//	               [-rounds N] [-bins DIR] [-penv name:KEY=VALUE] [-cpuprofile FILE] [-trace FILE]
//	               [-rate N | -rates N,N,…] [-closed=true|false]
//	               [-target webhook|send|send-wait|converse] [-url URL -key KEY]
//	               [-min-ratio R] [-min-pipeline-ratio R] [-max-p99 D] [-rate-limit N]
//	go run ./bench -target all [-rates N,N,…]   # webhook, send and converse, then webhook's open loop
//	go run ./bench -figures N [-wrk-seconds S] [-duration 4s -warmup 1s]  # docs/performance.md's webhook figures
//
// -url loads an agentbus that is already running (an ingress base URL) instead of starting one:
// -key (or AGENTBUS_BENCH_KEY) is then a tenant-admin key of tenant "default", whose Echo
// instances bench-{i} the load goes to. The send and converse targets measure the bare phase's
// answers from that agentbus too.
//
// -target all runs the closed loop of webhook, send and converse in turn (each with its bare
// phase), then webhook's open loop at -rates, and ends with the three ratios side by side.
//
// -rate-limit N gives the in-process ingress a rate limit of N requests a second for every key
// and every tenant; above the load, it refuses nothing and the run measures what the limiter
// costs a call.
//
// -tenants N spreads the webhook load over N tenants, bench-0 to bench-{N-1}, each with a key of its
// own: instance i belongs to tenant i mod N. With -instances as large, every tenant has a
// conversation of its own in flight, which measures what the hosts' turns among tenants cost a
// call (the agentbus phase creates the tenants and keys before it starts).
//
// -figures N writes docs/performance.md's webhook figures: it runs bench/wrk.sh (wrk, Debian's
// package, against the standalone, bare net/http and the pipeline) for N rounds of -wrk-seconds,
// then the bare, pipeline and agentbus phases for N rounds, and prints a paragraph and a Markdown
// table of the medians of both side by side with the targets, the date, the commit and the load
// average. Run it from the module's root.
//
// -min-ratio R makes the command exit with status 1 when the closed loop's agentbus/bare ratio
// (the median of the rounds) is below R, -min-pipeline-ratio R when its agentbus/pipeline ratio is,
// and -max-p99 D when the agentbus phase's p99 is above D. CI runs a short bench with all three
// to catch a collapse (not drift: machines vary; docs/performance.md gives the bounds).
//
// -cpuprofile writes a CPU profile of the measured window of the agentbus phase (the whole
// process: load generator, ingress, NATS server and workflow host). When several agentbus phases
// run, the closed loop's goes to FILE and the open loop's at rate N to FILE.rateN. Build a binary
// first so that pprof has symbols:
//
//	go build -o /tmp/bench ./bench && /tmp/bench -cpuprofile /tmp/agentbus.cpu
//	go tool pprof -top -nodecount=40 /tmp/bench /tmp/agentbus.cpu
//
// -trace writes an execution trace (runtime/trace) of the same window, named the same way, for
// `go tool trace`: it shows what the slowest calls waited for (scheduling, garbage collection).
// Each request slower than half the p99 target is logged in it (category "slow", its latency in
// µs, at its end), so that the slow ones can be found on the timeline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/gogc"
)

// Targets that the benchmark reports against (docs/performance.md#current-figures):
// targetRatio and targetPipelineRatio are agentbus's webhook throughput as a share of bare
// net/http's and of the minimal pipeline's, targetProcessesRatio the separate processes' as a
// share of the in-process stack's.
const (
	targetRatio          = 0.22
	targetPipelineRatio  = 0.65
	targetP99            = 10 * time.Millisecond
	targetProcessesRatio = 0.85
)

func main() {
	var o options
	var prof profiles
	var memprofile string
	flag.DurationVar(&o.Duration, "duration", 10*time.Second, "measured duration of each phase")
	flag.DurationVar(&o.Warmup, "warmup", 2*time.Second, "unmeasured warm-up before each phase")
	flag.IntVar(&o.Clients, "clients", 64, "concurrent client goroutines (open loop: most requests in flight at once)")
	flag.IntVar(&o.Instances, "instances", 1000, "workflow instances to spread requests over")
	flag.IntVar(&o.Partitions, "partitions", bus.DefaultPartitions, "inbox partitions of the bus")
	flag.IntVar(&o.RemoteAgents, "remote-agents", 0, "agentbus phase: register `N` idle remote agents before the load, each with its inbox, consumers and host (docs/performance.md#idle-agents)")
	flag.DurationVar(&o.Idle, "idle", 0, "agentbus phase: before the load, print the CPU the stack takes a second while idle for `D` (with -remote-agents: what idle agents cost)")
	flag.DurationVar(&o.IdleSettle, "idle-settle", 3*time.Second, "with -idle: wait `D` before measuring (idle partitions doze after 30 to 60 s)")
	flag.DurationVar(&o.PartitionIdleAfter, "partition-idle-after", 0, "agentbus phase: how long an inbox partition goes without a request before the host stops pulling it (agent.HostConfig.IdleAfter); 0 the default (30s), negative never")
	flag.DurationVar(&o.IdleEvery, "idle-every", 0, "with -idle: make one webhook call every `D` while idle (an agent called now and then), from the start of -idle-settle")
	flag.IntVar(&o.Tenants, "tenants", 1, "spread the instances over `N` tenants, bench-0 to bench-{N-1}, each with a key of its own (webhook target, bare, pipeline and agentbus phases)")
	body := flag.String("body", `{"ping":1}`, "request body")
	flag.StringVar(&prof.cpu, "cpuprofile", "", "write a CPU profile of the agentbus phase's measured window to `file`")
	flag.StringVar(&prof.trace, "trace", "", "write an execution trace of the agentbus phase's measured window to `file`, with each request slower than half the p99 target logged in it (category \"slow\", its latency in µs)")
	flag.StringVar(&memprofile, "memprofile", "", "write the allocation profile of the whole run to `file` when it ends (with -phase agentbus: the agentbus phase, its warm-up and the stack's start)")
	phase := flag.String("phase", "both", "phases to run: both (bare and agentbus), or a comma-separated list of bare, pipeline (the floor: HTTP → JetStream → consumer → reply, webhook only), agentbus and processes (nats-server, ingress and workflowhost as separate processes)")
	flag.IntVar(&o.Rounds, "rounds", 1, "run the phases this many times in turn (bare, agentbus, processes, bare, …) and summarise the ratios of each round and their medians")
	flag.StringVar(&o.Bins, "bins", "", "processes phase: take nats-server, ingress and workflowhost from `dir` instead of building them from this module")
	o.ProcEnv = procEnv{}
	flag.Var(o.ProcEnv, "penv", "processes phase: extra environment of a process, `name:KEY=VALUE` (name: nats, ingress, workflowhost or all); repeat for more")
	rate := flag.Float64("rate", 0, "open loop: offer a fixed load of `N` requests per second instead of the closed loop (0: closed loop)")
	ratesList := flag.String("rates", "", "open loop at each of these comma-separated rates in turn, e.g. 1000,2000,4000")
	closed := flag.Bool("closed", true, "with -rates, run the closed loop first too (with -rate only if given)")
	var g guard
	flag.Float64Var(&g.MinRatio, "min-ratio", 0, "exit with status 1 when the closed loop's agentbus/bare ratio is below `R` (a regression guard; 0: off)")
	flag.Float64Var(&g.MinPipelineRatio, "min-pipeline-ratio", 0, "exit with status 1 when the closed loop's agentbus/pipeline ratio is below `R` (needs the pipeline phase; 0: off)")
	flag.DurationVar(&g.MaxP99, "max-p99", 0, "exit with status 1 when the closed loop's agentbus p99 is above `D` (0: off)")
	flag.StringVar(&o.Target, "target", targetWebhook, "endpoint to load: "+strings.Join(targets, ", ")+", or all (webhook, send and converse, then webhook's open loop)")
	flag.Float64Var(&o.RateLimit, "rate-limit", 0, "agentbus phase: every key's and tenant's rate limit in the in-process ingress, `N` requests a second; set above the load, it measures the limiter's cost (0: no limit)")
	flag.StringVar(&o.URL, "url", "", "load this running agentbus (ingress base `URL`) instead of starting one in-process")
	flag.StringVar(&o.Key, "key", os.Getenv("AGENTBUS_BENCH_KEY"), "with -url: a tenant-admin key of tenant default (default $AGENTBUS_BENCH_KEY)")
	figureRounds := flag.Int("figures", 0, "write docs/performance.md's webhook figures: bench/wrk.sh and then the bare, pipeline and agentbus phases, `N` rounds each (needs wrk; -duration and -warmup apply to the bench's phases, -wrk-seconds to wrk's runs)")
	wrkSeconds := flag.Int("wrk-seconds", 10, "with -figures: the length of each wrk run, in seconds")
	serveDir := flag.String("serve", "", "serve the webhook load of -phase's bare, pipeline and agentbus phases until interrupted instead of loading them, for an outside load generator; writes each phase's request targets to `dir`/PHASE.paths (see bench/wrk.lua)")
	flag.Parse()
	o.Body = []byte(*body)

	phases, err := parsePhases(*phase)
	if err != nil {
		fatalf("-phase %q: %v", *phase, err)
	}
	all := o.Target == "all"
	if all {
		o.Target = targetWebhook // each target is set in turn below
	}
	if err := o.validate(); err != nil {
		fatalf("%v", err)
	}
	if o.Rounds < 1 {
		fatalf("-rounds must be at least 1")
	}
	if !(o.RateLimit >= 0) {
		fatalf("-rate-limit must be 0 or more")
	}
	closedGiven := false
	flag.Visit(func(f *flag.Flag) { closedGiven = closedGiven || f.Name == "closed" })
	var rates []float64
	runClosed := true
	switch {
	case *rate != 0 && *ratesList != "":
		fatalf("give -rate or -rates, not both")
	case *rate != 0:
		if !(*rate > 0 && *rate <= maxRate) {
			fatalf("-rate %v: must be a positive number of requests per second", *rate)
		}
		rates = []float64{*rate}
		runClosed = closedGiven && *closed
	case *ratesList != "":
		var err error
		if rates, err = parseRates(*ratesList); err != nil {
			fatalf("-rates: %v", err)
		}
		runClosed = *closed
	case !*closed:
		fatalf("-closed=false without -rate or -rates leaves nothing to run")
	}
	if all && prof.any() {
		fatalf("-cpuprofile and -trace profile one target; give -target")
	}
	if prof.any() && !slices.Contains(phases, phaseAgentbus) && !slices.Contains(phases, phaseProcesses) {
		fatalf("-cpuprofile and -trace profile the agentbus or processes phase, which -phase %s does not run", *phase)
	}
	if slices.Contains(phases, phaseProcesses) && o.Tenants > 1 {
		fatalf("-tenants is for the in-process phases, not %s", phaseProcesses)
	}
	if slices.Contains(phases, phaseProcesses) && o.URL != "" {
		fatalf("the %s phase starts its own processes; -url loads the agentbus phase's", phaseProcesses)
	}
	if slices.Contains(phases, phasePipeline) && (all || o.Target != targetWebhook) {
		fatalf("the %s phase serves the webhook target only", phasePipeline)
	}

	// The in-process stack runs as the standalone does, with its garbage collector target and
	// memory limit (see options.stackGC).
	o.GOGC = os.Getenv("GOGC")
	switch {
	case o.GOGC != "":
	case o.URL == "":
		o.stackGC = gogc.Default
		limit := "GOMEMLIMIT=" + os.Getenv("GOMEMLIMIT")
		if os.Getenv("GOMEMLIMIT") == "" {
			limit = gogc.FormatBytes(stackMemoryLimit())
		}
		o.GOGC = fmt.Sprintf("%d (bare phase: 100) memory limit %s (bare phase: none)", o.stackGC, limit)
	default:
		o.GOGC = "100"
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if *figureRounds > 0 {
		if all || o.Target != targetWebhook || o.URL != "" {
			fatalf("-figures measures the webhook target of the stack it starts; leave -target and -url out")
		}
		if err := runFigures(ctx, o, *figureRounds, *wrkSeconds); err != nil {
			fatalf("-figures: %v", err)
		}
		return
	}
	if *serveDir != "" {
		if err := serve(ctx, o, phases, *serveDir); err != nil {
			fatalf("-serve: %v", err)
		}
		return
	}
	if !all {
		_, failed := execute(ctx, o, phases, rates, runClosed, prof, g)
		writeAllocProfile(memprofile)
		exit(ctx, failed)
		return
	}
	// -target all: each target's closed loop, then the open loop of webhook, then the ratios.
	ratios := map[string]float64{}
	failed := false
	for _, t := range suiteTargets {
		to := o
		to.Target = t
		// The open loop and the regression guard are webhook's.
		var (
			tr []float64
			tg guard
		)
		if t == targetWebhook {
			tr, tg = rates, g
		}
		rounds, f := execute(ctx, to, phases, tr, true, profiles{}, tg)
		ratios[t], failed = median(rounds, ratioFig(phaseAgentbus, phaseBare)), failed || f
		fmt.Println()
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Println("ratios agentbus/bare req/s, closed loop, same run:")
	for _, t := range suiteTargets {
		fmt.Printf("  %-9s %.3f   (target >= %.2f: %s)\n", t, ratios[t], targetRatio, verdict(ratios[t] >= targetRatio))
	}
	exit(ctx, failed)
}

// parsePhases reads -phase: "both", or a list of phases, run in the order bare, pipeline,
// agentbus, processes whatever the list's.
func parsePhases(list string) ([]string, error) {
	if list == "both" {
		return []string{phaseBare, phaseAgentbus}, nil
	}
	given := strings.Split(list, ",")
	var phases []string
	for _, p := range []string{phaseBare, phasePipeline, phaseAgentbus, phaseProcesses} {
		if slices.Contains(given, p) {
			phases = append(phases, p)
		}
	}
	for _, g := range given {
		if !slices.Contains(phases, g) {
			return nil, fmt.Errorf("%q is not a phase: want both, or a list of bare, pipeline, agentbus and processes", g)
		}
	}
	return phases, nil
}

// suiteTargets are what -target all runs, in order.
var suiteTargets = []string{targetWebhook, targetSend, targetConverse}

// exit ends the command: 130 when interrupted, 1 when a run failed.
func exit(ctx context.Context, failed bool) {
	removeBuilt()
	if ctx.Err() != nil {
		fmt.Println("\ninterrupted: figures cover only part of the run")
		os.Exit(130)
	}
	if failed {
		os.Exit(1)
	}
}

// guard holds the regression guard's bounds on the closed loop's medians (each 0: off).
type guard struct {
	MinRatio         float64       // agentbus/bare req/s
	MinPipelineRatio float64       // agentbus/pipeline req/s
	MaxP99           time.Duration // agentbus p99
}

// check prints each bound the medians of rounds miss and reports whether one was missed.
func (g guard) check(phases []string, rounds []map[string]result) (missed bool) {
	if !slices.Contains(phases, phaseAgentbus) {
		return false
	}
	below := func(name, a, b string, bound float64) {
		if bound <= 0 || !slices.Contains(phases, b) {
			return
		}
		if r := median(rounds, ratioFig(a, b)); r < bound {
			fmt.Printf("REGRESSION: ratio %s/%s %.3f below the %s guard %.2f\n", a, b, r, name, bound)
			missed = true
		}
	}
	below("-min-ratio", phaseAgentbus, phaseBare, g.MinRatio)
	below("-min-pipeline-ratio", phaseAgentbus, phasePipeline, g.MinPipelineRatio)
	if g.MaxP99 > 0 {
		p99 := time.Duration(median(rounds, p99Fig(phaseAgentbus)) * float64(time.Millisecond))
		if p99 > g.MaxP99 {
			fmt.Printf("REGRESSION: agentbus p99 %s above the -max-p99 guard %s\n", p99.Round(10*time.Microsecond), g.MaxP99)
			missed = true
		}
	}
	return missed
}

// execute runs the phases' closed loop (when runClosed) and open loop at each rate, o.Rounds
// times in turn, prints each round's tables and the rounds' medians, and returns each round's
// results and whether a request failed or the guard g was missed.
func execute(ctx context.Context, o options, phases []string, rates []float64, runClosed bool, prof profiles, g guard) ([]map[string]result, bool) {
	// The runs of a round, in order: the closed loop's phases, then for each rate the open loop's.
	var runs []run
	if runClosed {
		for _, name := range phases {
			runs = append(runs, run{phase: name})
		}
	}
	for _, r := range rates {
		for _, name := range phases {
			runs = append(runs, run{phase: name, rate: r})
		}
	}
	profiled := map[string]int{} // runs of each profiled phase in a round
	for _, r := range runs {
		profiled[r.phase]++
	}
	rounds := max(o.Rounds, 1)

	// The bare phase answers as the agentbus phase would; measure that once for all its runs.
	if o.Target != targetWebhook && slices.Contains(phases, phaseBare) {
		fmt.Fprintf(os.Stderr, "measuring the agentbus answers of %s…\n", o.Target)
		var err error
		if o.answers, err = probeAnswers(ctx, o); err != nil {
			fatalf("%v", err)
		}
	}

	load := "" // the closed loop alone keeps the header it always had
	if len(rates) > 0 {
		load = "open loop at " + strings.Join(fmtRates(rates), ", ") + " req/s"
		if runClosed {
			load = "closed loop, then " + load
		}
		load = " load=" + load
	}
	if rounds > 1 {
		load += fmt.Sprintf(" rounds=%d", rounds)
	}
	if o.Tenants > 1 {
		load += fmt.Sprintf(" tenants=%d", o.Tenants)
	}
	if o.RemoteAgents > 0 {
		load += fmt.Sprintf(" remote-agents=%d", o.RemoteAgents)
	}
	if slices.Contains(phases, phaseProcesses) {
		load += " processes=nats-server,ingress,workflowhost"
		if os.Getenv("GOGC") == "" {
			load += fmt.Sprintf(" (GOGC=%d)", gogc.Default)
		}
		if env := o.ProcEnv.String(); env != "" {
			load += " penv=" + env
		}
	}
	fmt.Printf("agentbus bench: %s GOMAXPROCS=%d NumCPU=%d GOGC=%s target=%s clients=%d instances=%d partitions=%d warmup=%s duration=%s body=%dB%s\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), o.GOGC, o.Target, o.Clients, o.Instances, o.Partitions, o.Warmup, o.Duration, len(o.Body), load)

	client := newClient(o.Clients)
	defer client.CloseIdleConnections()

	failed := false
	var all []map[string]result // each round's results
	for round := 1; round <= rounds && ctx.Err() == nil; round++ {
		results := map[string]result{}
		var sites allocSites // the closed loop's agentbus phase, when the stack runs in this process
		for _, r := range runs {
			po := o
			po.Rate = r.rate
			if prof.any() && (r.phase == phaseAgentbus || r.phase == phaseProcesses) {
				suffix := ""
				if profiled[r.phase] > 1 && r.rate > 0 {
					suffix = ".rate" + fmtRate(r.rate)
				}
				if rounds > 1 {
					suffix += fmt.Sprintf(".round%d", round)
				}
				if r.phase == phaseProcesses {
					// The load generator's profile beside the servers'.
					suffix += "." + phaseProcesses
					if prof.cpu != "" {
						po.ProfileServers = prof.cpu + suffix
					}
					suffix += ".bench"
				}
				po.OnMeasure = prof.hook(suffix)
			}
			if r.phase == phaseAgentbus && r.rate == 0 && o.URL == "" {
				po.OnMeasure = allocHook(&sites, po.OnMeasure)
			}
			label := r.String()
			if rounds > 1 {
				label = fmt.Sprintf("%s (round %d of %d)", r, round, rounds)
			}
			fmt.Fprintf(os.Stderr, "running %s: %s warm-up, %s measured…\n", label, o.Warmup, o.Duration)
			stopLimit := func() {}
			if o.stackGC > 0 {
				gc := o.stackGC
				if r.phase == phaseBare || r.phase == phaseProcesses {
					gc = 100 // the load generator alone, or net/http's bare handler
				} else {
					stopLimit = stackLimit()
				}
				debug.SetGCPercent(gc)
			}
			runtime.GC() // do not bill one phase's garbage to the next
			res, err := runTarget(ctx, r.phase, po, client)
			stopLimit()
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: %v\n", r, err)
				failed = true
				if res.Requests == 0 {
					continue
				}
			}
			results[r.String()] = res
			if ctx.Err() != nil {
				break
			}
		}
		all = append(all, results)

		fmt.Println()
		if rounds > 1 {
			fmt.Printf("round %d of %d:\n", round, rounds)
		}
		var labels []string
		if runClosed {
			if len(rates) > 0 {
				fmt.Printf("closed loop, %d clients:\n", o.Clients)
			}
			printTable(os.Stdout, phases, results)
			sites.print(os.Stdout, 12, results[phaseAgentbus].AllocsPerCall())
			labels = append(labels, phases...)
		}
		if len(rates) > 0 {
			if runClosed {
				fmt.Println()
			}
			fmt.Printf("open loop, fixed offered load, at most %d in flight; latency from each request's scheduled start:\n", o.Clients)
			printRateTable(os.Stdout, phases, rates, results)
			for _, r := range rates {
				for _, name := range phases {
					labels = append(labels, run{name, r}.String())
				}
			}
		}
		if printErrors(os.Stdout, labels, results) {
			failed = true
		}
	}
	if rounds > 1 && runClosed {
		fmt.Println()
		printRounds(os.Stdout, phases, all)
	}
	if runClosed && g.check(phases, all) {
		failed = true
	}
	return all, failed
}

// roundFigure is a figure of one round's closed-loop results, by phase; ok where it is defined.
type roundFigure = func(res map[string]result) (float64, bool)

// ratioFig is phase a's req/s over phase b's.
func ratioFig(a, b string) roundFigure {
	return func(res map[string]result) (float64, bool) { return ratioOf(res, a, b) }
}

// p99Fig is phase p's p99, in milliseconds.
func p99Fig(p string) roundFigure {
	return func(res map[string]result) (float64, bool) {
		r, ok := res[p]
		return float64(r.P99) / float64(time.Millisecond), ok
	}
}

// cpuFig is phase p's CPU per call, in microseconds, where it was measured.
func cpuFig(p string) roundFigure {
	return func(res map[string]result) (float64, bool) {
		r, ok := res[p]
		return float64(r.CPUPerCall()) / float64(time.Microsecond), ok && r.CPU > 0
	}
}

// ratioOf is the closed loop's req/s of phase a over phase b in res; ok is false unless both ran.
func ratioOf(res map[string]result, a, b string) (float64, bool) {
	ra, okA := res[a]
	rb, okB := res[b]
	if !okA || !okB || rb.RPS() == 0 {
		return 0, false
	}
	return ra.RPS() / rb.RPS(), true
}

// median is the median of the values f defines over the rounds (0 where it defines none).
func median[R any](rounds []R, f func(R) (float64, bool)) float64 {
	var vs []float64
	for _, r := range rounds {
		if v, ok := f(r); ok {
			vs = append(vs, v)
		}
	}
	return medianOfValues(vs)
}

// medianOfValues is the median of vs, 0 when it is empty; it sorts vs.
func medianOfValues(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

// printRounds prints the closed loop's req/s, p99 and ratios of each round, and their medians.
func printRounds(w io.Writer, phases []string, rounds []map[string]result) {
	type col struct {
		head string
		f    func(map[string]result) (float64, bool)
		unit string
	}
	var cols []col
	for _, p := range phases {
		cols = append(cols, col{p + " req/s", func(res map[string]result) (float64, bool) {
			r, ok := res[p]
			return r.RPS(), ok
		}, "%.0f"})
	}
	ratio := func(a, b string) {
		if slices.Contains(phases, a) && slices.Contains(phases, b) {
			cols = append(cols, col{a + "/" + b, ratioFig(a, b), "%.3f"})
		}
	}
	ratio(phaseAgentbus, phaseBare)
	ratio(phaseAgentbus, phasePipeline)
	ratio(phaseProcesses, phaseBare)
	ratio(phaseProcesses, phaseAgentbus)
	if slices.Contains(phases, phasePipeline) {
		cols = append(cols, col{phasePipeline + " CPU/call µs", cpuFig(phasePipeline), "%.0f"})
	}
	for _, p := range []string{phaseAgentbus, phaseProcesses} {
		if slices.Contains(phases, p) {
			cols = append(cols, col{p + " p99 ms", p99Fig(p), "%.2f"}, col{p + " CPU/call µs", cpuFig(p), "%.0f"})
		}
	}
	if slices.Contains(phases, phaseProcesses) && slices.Contains(phases, phaseAgentbus) {
		// What the req/s ratio would be were both phases bound by the same CPUs alone.
		cols = append(cols, col{"CPU/call agentbus/processes", cpuRatio, "%.3f"})
	}
	fmt.Fprintf(w, "closed loop, %d rounds, phases in turn:\n", len(rounds))
	fmt.Fprintf(w, "%-7s", "round")
	for _, c := range cols {
		fmt.Fprintf(w, " %*s", max(len(c.head), 8), c.head)
	}
	fmt.Fprintln(w)
	cell := func(c col, v float64, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf(c.unit, v)
	}
	for i, res := range rounds {
		fmt.Fprintf(w, "%-7d", i+1)
		for _, c := range cols {
			v, ok := c.f(res)
			fmt.Fprintf(w, " %*s", max(len(c.head), 8), cell(c, v, ok))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-7s", "median")
	for _, c := range cols {
		v := median(rounds, c.f)
		fmt.Fprintf(w, " %*s", max(len(c.head), 8), cell(c, v, v != 0))
	}
	fmt.Fprintln(w)
	if slices.Contains(phases, phaseProcesses) && slices.Contains(phases, phaseAgentbus) {
		m := median(rounds, ratioFig(phaseProcesses, phaseAgentbus))
		fmt.Fprintf(w, "median ratio processes/agentbus req/s: %.3f   (target >= %.2f: %s)\n", m, targetProcessesRatio, verdict(m >= targetProcessesRatio))
		c := median(rounds, cpuRatio)
		fmt.Fprintf(w, "median ratio of CPU per call agentbus/processes: %.3f   (the req/s ratio were both bound by the same CPUs alone)\n", c)
	}
}

// cpuRatio is the agentbus phase's CPU per call over the processes phase's in res.
func cpuRatio(res map[string]result) (float64, bool) {
	a, okA := res[phaseAgentbus]
	p, okP := res[phaseProcesses]
	if !okA || !okP || a.CPU == 0 || p.CPU == 0 {
		return 0, false
	}
	return float64(a.CPUPerCall()) / float64(p.CPUPerCall()), true
}

// maxRate bounds -rate and -rates; far beyond what loopback HTTP can do.
const maxRate = 1e9

// run is one phase of the command: a closed loop when rate is 0, else an open loop at rate.
type run struct {
	phase string
	rate  float64
}

// String is the run's label and key in the results: the phase, and "@rate" for an open loop.
func (r run) String() string {
	if r.rate == 0 {
		return r.phase
	}
	return r.phase + "@" + fmtRate(r.rate)
}

// parseRates parses a comma-separated list of positive request rates.
func parseRates(list string) ([]float64, error) {
	var rates []float64
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || !(r > 0 && r <= maxRate) {
			return nil, fmt.Errorf("%q: want positive numbers of requests per second", f)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

func fmtRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

func fmtRates(rates []float64) []string {
	out := make([]string, len(rates))
	for i, r := range rates {
		out[i] = fmtRate(r)
	}
	return out
}

// printTable prints one row per phase that ran, then the ratio and targets when both did.
func printTable(w io.Writer, phases []string, results map[string]result) {
	fmt.Fprintf(w, "%-9s %10s %9s %9s %9s %9s %9s %8s %7s\n", "phase", "req/s", "p50", "p90", "p99", "max", "requests", "errors", "resp B")
	for _, name := range phases {
		r, ok := results[name]
		if !ok {
			fmt.Fprintf(w, "%-9s (did not run)\n", name)
			continue
		}
		note := ""
		if r.Interrupted {
			note = fmt.Sprintf("  (interrupted after %s)", r.Elapsed.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "%-9s %10.0f %9s %9s %9s %9s %9d %8d %7.0f%s\n", name, r.RPS(),
			fmtDur(r.P50), fmtDur(r.P90), fmtDur(r.P99), fmtDur(r.Max), r.Requests, r.Errors, r.AvgRespBytes(), note)
	}
	ab, okA := results[phaseAgentbus]
	bare, okB := results[phaseBare]
	if okA && okB && bare.RPS() > 0 {
		ratio := ab.RPS() / bare.RPS()
		fmt.Fprintf(w, "ratio agentbus/bare req/s: %.3f   (target >= %.2f: %s)\n", ratio, targetRatio, verdict(ratio >= targetRatio))
	}
	if pipe, ok := results[phasePipeline]; ok && pipe.RPS() > 0 {
		if okB && bare.RPS() > 0 {
			fmt.Fprintf(w, "ratio pipeline/bare req/s: %.3f   (the floor)\n", pipe.RPS()/bare.RPS())
		}
		if okA {
			ratio := ab.RPS() / pipe.RPS()
			fmt.Fprintf(w, "ratio agentbus/pipeline req/s: %.3f   (target >= %.2f: %s)\n", ratio, targetPipelineRatio, verdict(ratio >= targetPipelineRatio))
		}
	}
	if pr, ok := results[phaseProcesses]; ok && pr.RPS() > 0 {
		if okB && bare.RPS() > 0 {
			fmt.Fprintf(w, "ratio processes/bare req/s: %.3f\n", pr.RPS()/bare.RPS())
		}
		if okA && ab.RPS() > 0 {
			ratio := pr.RPS() / ab.RPS()
			fmt.Fprintf(w, "ratio processes/agentbus req/s: %.3f   (target >= %.2f: %s)\n", ratio, targetProcessesRatio, verdict(ratio >= targetProcessesRatio))
		}
	}
	if okA {
		fmt.Fprintf(w, "agentbus p99: %s   (target < %s: %s)\n", fmtDur(ab.P99), fmtDur(targetP99), verdict(ab.P99 < targetP99))
	}
	if pr, ok := results[phaseProcesses]; ok {
		fmt.Fprintf(w, "processes p99: %s   (target < %s: %s)\n", fmtDur(pr.P99), fmtDur(targetP99), verdict(pr.P99 < targetP99))
		if pr.CPU > 0 {
			// All four processes: load generator, nats-server, ingress and workflow host.
			line := fmt.Sprintf("CPU per call: processes %s (load generator and servers)", fmtDur(pr.CPUPerCall()))
			if okA && ab.CPU > 0 {
				line += fmt.Sprintf(", agentbus %s, ratio agentbus/processes %.3f", fmtDur(ab.CPUPerCall()), float64(ab.CPUPerCall())/float64(pr.CPUPerCall()))
			}
			fmt.Fprintln(w, line)
			var parts []string
			for _, name := range append([]string{"bench"}, procNames...) {
				if u, ok := pr.Procs[name]; ok && pr.Requests > 0 {
					n := float64(pr.Requests)
					parts = append(parts, fmt.Sprintf("%s %s (%.1f reads, %.1f writes)", name, fmtDur(u.CPU/time.Duration(pr.Requests)), float64(u.Reads)/n, float64(u.Writes)/n))
				}
			}
			if len(parts) > 0 {
				fmt.Fprintf(w, "per call by process, CPU and read and write system calls: %s\n", strings.Join(parts, "; "))
			}
			if pr.NATSIn > 0 && pr.Requests > 0 {
				fmt.Fprintf(w, "NATS messages per call: %.2f in, %.2f out\n", float64(pr.NATSIn)/float64(pr.Requests), float64(pr.NATSOut)/float64(pr.Requests))
			}
		}
	}
	if okA && okB {
		// The bare phase's allocations are the load generator's and net/http's; what agentbus
		// allocates on top is the difference (with -url, the other processes' are not counted).
		fmt.Fprintf(w, "allocations per call: agentbus %.0f, bare %.0f, agentbus's own %.0f (%.1f KB of %.1f KB)\n",
			ab.AllocsPerCall(), bare.AllocsPerCall(), ab.AllocsPerCall()-bare.AllocsPerCall(),
			(ab.AllocBytesPerCall()-bare.AllocBytesPerCall())/1024, ab.AllocBytesPerCall()/1024)
		if ab.CPU > 0 && bare.CPU > 0 {
			// What the machine gives to other processes is not in these: on a shared machine
			// their ratio drifts less than the req/s ratio, which it approaches when both
			// phases keep every CPU busy.
			fmt.Fprintf(w, "CPU per call: agentbus %s, bare %s, ratio bare/agentbus %.3f\n",
				fmtDur(ab.CPUPerCall()), fmtDur(bare.CPUPerCall()), float64(bare.CPUPerCall())/float64(ab.CPUPerCall()))
		}
	}
	if okA && !okB && ab.CPU > 0 {
		// Alone, the agentbus phase has no same-run baseline; its CPU per call still compares
		// runs made one after another (alternate them: the machine drifts).
		fmt.Fprintf(w, "CPU per call: agentbus %s; allocations per call: agentbus %.0f (%.1f KB)\n", fmtDur(ab.CPUPerCall()), ab.AllocsPerCall(), ab.AllocBytesPerCall()/1024)
	}
	if okA && ab.NATSIn > 0 && ab.Requests > 0 {
		// Counted at the in-process server: every client message it read and wrote.
		fmt.Fprintf(w, "NATS messages per call: agentbus %.2f in, %.2f out\n", float64(ab.NATSIn)/float64(ab.Requests), float64(ab.NATSOut)/float64(ab.Requests))
	}
	if okA && ab.Backlog != nil && ab.Elapsed > 0 {
		// A 202 comes before the handler runs: the host may end the window behind the ingress,
		// or catch up in it. What it handled in the window is the sustained rate.
		handled := int64(ab.Requests-ab.Errors) + ab.Backlog[0] - ab.Backlog[1]
		line := fmt.Sprintf("backlog: %d requests accepted and not yet handled at the start of the window, %d at the end: handled %.0f a second",
			ab.Backlog[0], ab.Backlog[1], float64(handled)/ab.Elapsed.Seconds())
		if handled > 0 && ab.CPU > 0 {
			line += ", CPU per handled request " + fmtDur(ab.CPU/time.Duration(handled))
		}
		fmt.Fprintln(w, line)
	}
	if pipe, ok := results[phasePipeline]; ok && pipe.CPU > 0 && okA && ab.CPU > 0 {
		fmt.Fprintf(w, "CPU per call: pipeline %s, ratio pipeline/agentbus %.3f; allocations per call: pipeline %.0f\n",
			fmtDur(pipe.CPUPerCall()), float64(pipe.CPUPerCall())/float64(ab.CPUPerCall()), pipe.AllocsPerCall())
	}
}

// printRateTable prints one row per phase and rate of the open loop, grouped by rate, then the
// agentbus p99 at each rate against the target.
func printRateTable(w io.Writer, phases []string, rates []float64, results map[string]result) {
	fmt.Fprintf(w, "%-9s %8s %10s %9s %9s %9s %9s %9s %8s %8s %7s %9s %5s %9s\n", "phase", "rate", "req/s", "p50", "p90", "p99", "max", "requests", "errors", "late", "resp B", "CPU/call", "GCs", "GC/call")
	unsent := false
	for _, rate := range rates {
		for _, name := range phases {
			r, ok := results[run{name, rate}.String()]
			if !ok {
				fmt.Fprintf(w, "%-9s %8s (did not run)\n", name, fmtRate(rate))
				continue
			}
			note := ""
			if r.Interrupted {
				note = fmt.Sprintf("  (interrupted after %s)", r.Elapsed.Round(time.Millisecond))
			}
			if r.Unsent > 0 {
				note += fmt.Sprintf("  (%d due not sent)", r.Unsent)
				unsent = true
			}
			fmt.Fprintf(w, "%-9s %8s %10.0f %9s %9s %9s %9s %9d %8d %8d %7.0f %9s %5d %9s%s\n", name, fmtRate(rate), r.RPS(),
				fmtDur(r.P50), fmtDur(r.P90), fmtDur(r.P99), fmtDur(r.Max), r.Requests, r.Errors, r.Late, r.AvgRespBytes(), fmtDur(r.CPUPerCall()), r.GCs, fmtDur(r.GCCPUPerCall()), note)
		}
	}
	fmt.Fprintf(w, "late: measured requests that started more than %s after their scheduled time (every client busy, or the load generator behind)\n", fmtDur(lateAfter))
	fmt.Fprintln(w, "CPU/call: the process's CPU time over the measured window per request (at a fixed offered rate it compares builds better than the latencies do); GCs: garbage collections completed in the window; GC/call: the collector's share of CPU/call (the runtime's estimate)")
	for _, rate := range rates {
		if r, ok := results[run{phaseAgentbus, rate}.String()]; ok && r.GCs > 0 {
			fmt.Fprintf(w, "agentbus at %s req/s: the last collection in the window marked %s\n", fmtRate(rate), r.Scan)
		}
	}
	if unsent {
		fmt.Fprintln(w, "due not sent: the rate was not sustained; requests still waiting for a free client when the window ended were dropped and their latencies are missing")
	}
	best, tried := 0.0, false
	for _, rate := range rates {
		if ab, ok := results[run{phaseAgentbus, rate}.String()]; ok {
			met := ab.P99 < targetP99 && ab.Unsent == 0
			fmt.Fprintf(w, "agentbus p99 at %s req/s: %s   (target < %s: %s)\n", fmtRate(rate), fmtDur(ab.P99), fmtDur(targetP99), verdict(met))
			tried = true
			if met {
				best = max(best, rate)
			}
		}
		if pr, ok := results[run{phaseProcesses, rate}.String()]; ok {
			met := pr.P99 < targetP99 && pr.Unsent == 0
			fmt.Fprintf(w, "processes p99 at %s req/s: %s   (target < %s: %s)\n", fmtRate(rate), fmtDur(pr.P99), fmtDur(targetP99), verdict(met))
		}
	}
	switch {
	case !tried:
	case best > 0:
		fmt.Fprintf(w, "highest offered rate with agentbus p99 < %s: %s req/s (of the rates tried)\n", fmtDur(targetP99), fmtRate(best))
	default:
		fmt.Fprintf(w, "highest offered rate with agentbus p99 < %s: none of the rates tried\n", fmtDur(targetP99))
	}
}

// printErrors lists the errors of every phase loudly; it reports whether there were any.
func printErrors(w io.Writer, phases []string, results map[string]result) bool {
	found := false
	for _, name := range phases {
		r, ok := results[name]
		if !ok || r.Errors == 0 {
			continue
		}
		found = true
		fmt.Fprintf(w, "\n!!! %s: %d ERRORS out of %d requests (%.2f%%) — figures are not valid !!!\n",
			strings.ToUpper(name), r.Errors, r.Requests, 100*float64(r.Errors)/float64(r.Requests))
		for _, e := range r.topErrors(10) {
			fmt.Fprintf(w, "  %8d × %s\n", e.n, e.msg)
		}
	}
	return found
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

// fmtDur prints a latency with three significant digits in a fixed unit per magnitude.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// writeAllocProfile writes the allocation profile (every allocation sampled since the start)
// to file, if one is given. Read it with go tool pprof -sample_index=alloc_objects.
func writeAllocProfile(file string) {
	if file == "" {
		return
	}
	f, err := os.Create(file)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: memprofile: %v\n", err)
	}
}

// profiles names the files the agentbus phase's measured window is profiled into; empty names
// are not written.
type profiles struct{ cpu, trace string }

func (p profiles) any() bool { return p.cpu != "" || p.trace != "" }

// hook returns an OnMeasure hook that starts the profiles, each into its file name with suffix,
// and stops them as the window ends. A profile that cannot start is reported and skipped.
func (p profiles) hook(suffix string) func() func() {
	return func() func() {
		var stops []func() error
		start := func(what, file string, begin func(io.Writer) error, end func()) {
			f, err := os.Create(file)
			if err == nil {
				if err = begin(f); err != nil {
					_ = f.Close()
				} else {
					stops = append(stops, func() error { end(); return f.Close() })
				}
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: %v\n", what, err)
			}
		}
		if p.cpu != "" {
			start("cpuprofile", p.cpu+suffix, pprof.StartCPUProfile, pprof.StopCPUProfile)
		}
		if p.trace != "" {
			start("trace", p.trace+suffix, trace.Start, trace.Stop)
		}
		return func() {
			for _, stop := range stops {
				if err := stop(); err != nil {
					fmt.Fprintf(os.Stderr, "bench: writing a profile: %v\n", err)
				}
			}
		}
	}
}

func fatalf(format string, args ...any) {
	removeBuilt()
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}

var errNoRequests = errors.New("no requests completed in the measured window")

// stackMemoryLimit is the standalone's memory limit: AGENTBUS_MEMORY_LIMIT, or its default.
func stackMemoryLimit() int64 {
	v, ok := os.LookupEnv("AGENTBUS_MEMORY_LIMIT")
	if !ok {
		return gogc.DefaultMemoryLimit
	}
	n, ok := gogc.ParseBytes(v)
	if !ok {
		fatalf("AGENTBUS_MEMORY_LIMIT=%q is not a byte count", v)
	}
	return n
}

// stackLimit sets the standalone's memory limit (stackMemoryLimit, or GOMEMLIMIT when set, as
// the standalone takes them) for a phase that embeds the NATS server, and returns the function
// that lifts it.
func stackLimit() (lift func()) {
	stop, _ := gogc.Limit(os.LookupEnv, stackMemoryLimit())
	return func() {
		stop()
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(math.MaxInt64)
		}
	}
}
