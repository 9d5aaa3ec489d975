// Command bench measures webhook echo round trips through the whole agentbus stack over loopback
// HTTP and, in the same run and with the same load, a bare net/http handler that answers with a
// body of the same size, then prints throughput, latency percentiles and the ratio of the two.
//
// The agentbus phase starts the stack in-process (package stack: embedded NATS with JetStream on a
// temporary store, the workflow host running the Echo agent, and the ingress on 127.0.0.1), seeds
// a tenant-admin key and sends
//
//	POST /api/user/webhooks/default:Echo:Supervisor%20Workflow:bench-{i}/echo?apikey=…&n=1
//
// spreading requests round-robin over -instances workflow instances. The bare phase serves the
// same load from a plain handler on 127.0.0.1, so the ratio shows what agentbus costs on top of
// Go's HTTP stack on the same machine. Load generator and servers share the machine's CPUs.
//
// Each phase runs -warmup unmeasured, then -duration measured, and stops by itself. Every
// response must be a 200; anything else is counted, shown and makes the command exit with
// status 1.
//
// Usage:
//
//	go run ./bench [-duration 10s] [-warmup 2s] [-clients 64] [-instances 1000] [-partitions 32]
//	               [-body '{"ping":1}'] [-phase both|bare|agentbus] [-cpuprofile FILE]
//
// -cpuprofile writes a CPU profile of the measured window of the agentbus phase (the whole
// process: load generator, ingress, NATS server and workflow host). Build a binary first so that
// pprof has symbols:
//
//	go build -o /tmp/bench ./bench && /tmp/bench -cpuprofile /tmp/agentbus.cpu
//	go tool pprof -top -nodecount=40 /tmp/bench /tmp/agentbus.cpu
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// Targets that the benchmark reports against.
const (
	targetRatio = 0.25
	targetP99   = 10 * time.Millisecond
)

func main() {
	var o options
	var cpuprofile string
	flag.DurationVar(&o.Duration, "duration", 10*time.Second, "measured duration of each phase")
	flag.DurationVar(&o.Warmup, "warmup", 2*time.Second, "unmeasured warm-up before each phase")
	flag.IntVar(&o.Clients, "clients", 64, "concurrent client goroutines")
	flag.IntVar(&o.Instances, "instances", 1000, "workflow instances to spread requests over")
	flag.IntVar(&o.Partitions, "partitions", 32, "inbox partitions of the bus")
	body := flag.String("body", `{"ping":1}`, "request body")
	flag.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the agentbus phase's measured window to `file`")
	phase := flag.String("phase", "both", "phases to run: both, bare or agentbus")
	flag.Parse()
	o.Body = []byte(*body)

	var phases []string
	switch *phase {
	case "both":
		phases = []string{phaseBare, phaseAgentbus}
	case phaseBare, phaseAgentbus:
		phases = []string{*phase}
	default:
		fatalf("-phase %q: want both, bare or agentbus", *phase)
	}
	if err := o.validate(); err != nil {
		fatalf("%v", err)
	}
	if cpuprofile != "" && *phase == phaseBare {
		fatalf("-cpuprofile profiles the agentbus phase, which -phase bare does not run")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	fmt.Printf("agentbus bench: %s GOMAXPROCS=%d NumCPU=%d clients=%d instances=%d partitions=%d warmup=%s duration=%s body=%dB\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), o.Clients, o.Instances, o.Partitions, o.Warmup, o.Duration, len(o.Body))

	client := newClient(o.Clients)
	defer client.CloseIdleConnections()

	results := map[string]result{}
	failed := false
	for _, name := range phases {
		po := o
		if name == phaseAgentbus && cpuprofile != "" {
			po.OnMeasure = cpuProfiler(cpuprofile)
		}
		fmt.Fprintf(os.Stderr, "running %s: %s warm-up, %s measured…\n", name, o.Warmup, o.Duration)
		runtime.GC() // do not bill one phase's garbage to the next
		res, err := runTarget(ctx, name, po, client)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
			failed = true
			if res.Requests == 0 {
				continue
			}
		}
		results[name] = res
		if ctx.Err() != nil {
			break
		}
	}

	fmt.Println()
	printTable(os.Stdout, phases, results)
	if printErrors(os.Stdout, phases, results) {
		failed = true
	}
	if ctx.Err() != nil {
		fmt.Println("\ninterrupted: figures cover only part of the run")
		os.Exit(130)
	}
	if failed {
		os.Exit(1)
	}
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
	if okA {
		fmt.Fprintf(w, "agentbus p99: %s   (target < %s: %s)\n", fmtDur(ab.P99), fmtDur(targetP99), verdict(ab.P99 < targetP99))
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

// cpuProfiler returns an OnMeasure hook that profiles the measured window into file.
func cpuProfiler(file string) func() func() {
	return func() func() {
		f, err := os.Create(file)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: cpuprofile: %v\n", err)
			return func() {}
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench: cpuprofile: %v\n", err)
			_ = f.Close()
			return func() {}
		}
		return func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: cpuprofile: %v\n", err)
			}
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}

var errNoRequests = errors.New("no requests completed in the measured window")
