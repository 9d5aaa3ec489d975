package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// procSample is one process's figures at a sample; a figure that could not be read is NaN.
type procSample struct {
	name                    string
	rssMiB, goroutines, fds float64
	cpuSeconds              float64 // user and system time since the process started
	// heapMiB is a Go process's heap in use (objects live and not yet collected), goalMiB the
	// heap size at which its next collection starts; NaN for nats-server.
	heapMiB, goalMiB float64
}

// streamSample is a stream's size at a sample.
type streamSample struct {
	name            string
	messages, bytes int64
}

// natsSample is nats-server's own counts at a sample; NaN when they could not be read.
type natsSample struct {
	connections, subscriptions, consumers float64
}

// sample is everything read at one time.
type sample struct {
	at      time.Duration // since the load started
	procs   []procSample
	nats    natsSample
	streams []streamSample // sorted by name
	load    snapshot
	// standalone: the deployment is the standalone, whose NATS has no monitoring port.
	standalone bool
}

// sample reads the processes' and the streams' figures and the load's counts.
func (d *deployment) sample(ctx context.Context, at time.Duration, l *load) sample {
	s := sample{at: at, load: l.snapshot(), standalone: d.standalone}
	for _, p := range d.procs() {
		ps := procSample{name: p.name, rssMiB: math.NaN(), goroutines: math.NaN(), fds: math.NaN(), cpuSeconds: cpuSeconds(p.p.Pid()),
			heapMiB: math.NaN(), goalMiB: math.NaN()}
		if b, err := p.p.RSS(); err == nil {
			ps.rssMiB = float64(b) / (1 << 20)
		}
		if es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.p.Pid())); err == nil {
			ps.fds = float64(len(es))
		}
		if p.name == "nats" {
			ps.goroutines = d.natsGoroutines(ctx)
		} else {
			m := d.gauges(ctx, d.metrics[p.name], "go_goroutines", "go_memstats_heap_alloc_bytes", "go_memstats_next_gc_bytes")
			ps.goroutines, ps.heapMiB, ps.goalMiB = m[0], m[1]/(1<<20), m[2]/(1<<20)
		}
		s.procs = append(s.procs, ps)
	}
	if !d.standalone {
		s.streams, s.nats = d.jetstream(ctx)
	} else {
		s.nats = natsSample{connections: math.NaN(), subscriptions: math.NaN(), consumers: math.NaN()}
	}
	return s
}

// cpuSeconds reads a process's user and system time from /proc/{pid}/stat; NaN when it cannot.
func cpuSeconds(pid int) float64 {
	d, err := proctest.CPU(pid)
	if err != nil {
		return math.NaN()
	}
	return d.Seconds()
}

// get reads a monitoring endpoint.
func (d *deployment) get(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	return b, err
}

// gauges reads unlabelled gauges from a Prometheus endpoint, in the order of names; NaN for one
// it cannot.
func (d *deployment) gauges(ctx context.Context, base string, names ...string) []float64 {
	out := make([]float64, len(names))
	for i := range out {
		out[i] = math.NaN()
	}
	b, err := d.get(ctx, base+"/metrics")
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		for i, name := range names {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[i] = f
				}
			}
		}
	}
	return out
}

// natsGoroutines counts the goroutines in nats-server's goroutine dump; NaN when it cannot.
func (d *deployment) natsGoroutines(ctx context.Context) float64 {
	b, err := d.get(ctx, fmt.Sprintf("http://127.0.0.1:%d/stacksz", d.nats.HTTPPort))
	if err != nil {
		return math.NaN()
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "goroutine ") {
			n++
		}
	}
	return float64(n)
}

// jetstream reads every stream's message count and bytes and the count of consumers from
// nats-server's /jsz (key-value buckets are the streams KV_{bucket}, object stores OBJ_{store}),
// and the connections and subscriptions from /varz; nil and NaN for what it cannot.
func (d *deployment) jetstream(ctx context.Context) ([]streamSample, natsSample) {
	n := natsSample{connections: math.NaN(), subscriptions: math.NaN(), consumers: math.NaN()}
	if b, err := d.get(ctx, fmt.Sprintf("http://127.0.0.1:%d/varz", d.nats.HTTPPort)); err == nil {
		var varz struct {
			Connections   *float64 `json:"connections"`
			Subscriptions *float64 `json:"subscriptions"`
		}
		if json.Unmarshal(b, &varz) == nil && varz.Connections != nil && varz.Subscriptions != nil {
			n.connections, n.subscriptions = *varz.Connections, *varz.Subscriptions
		}
	}
	b, err := d.get(ctx, fmt.Sprintf("http://127.0.0.1:%d/jsz?streams=true", d.nats.HTTPPort))
	if err != nil {
		return nil, n
	}
	var jsz struct {
		Consumers *float64 `json:"consumers"`
		Accounts  []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					Messages int64 `json:"messages"`
					Bytes    int64 `json:"bytes"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if json.Unmarshal(b, &jsz) != nil {
		return nil, n
	}
	if jsz.Consumers != nil {
		n.consumers = *jsz.Consumers
	}
	out := []streamSample{}
	for _, a := range jsz.Accounts {
		for _, st := range a.Streams {
			out = append(out, streamSample{name: st.Name, messages: st.State.Messages, bytes: st.State.Bytes})
		}
	}
	slices.SortFunc(out, func(a, b streamSample) int { return strings.Compare(a.name, b.name) })
	return out, n
}

// print writes the sample: a line per process, one for the streams that hold anything, one for
// the load. prev, the sample before, gives the load's rate; header prints the columns' names.
func (s sample) print(w io.Writer, prev *sample, header bool) {
	at := clock(s.at)
	if header {
		fmt.Fprintf(w, "%6s  %-8s %8s %11s %6s %6s %9s %9s\n", "time", "process", "RSS MiB", "goroutines", "fds", "CPU %", "heap MiB", "goal MiB")
	}
	for i, p := range s.procs {
		cpu := math.NaN() // of one CPU, since the sample before
		if prev != nil && i < len(prev.procs) && s.at > prev.at {
			cpu = 100 * (p.cpuSeconds - prev.procs[i].cpuSeconds) / (s.at - prev.at).Seconds()
		}
		fmt.Fprintf(w, "%6s  %-8s %8s %11s %6s %6s %9s %9s\n", at, p.name, num(p.rssMiB, 1), num(p.goroutines, 0), num(p.fds, 0), num(cpu, 1),
			num(p.heapMiB, 1), num(p.goalMiB, 1))
	}
	var parts []string
	for _, st := range s.streams {
		if st.messages > 0 {
			parts = append(parts, fmt.Sprintf("%s %d msgs %s", st.name, st.messages, size(st.bytes)))
		}
	}
	if s.streams == nil {
		parts = []string{"(could not read /jsz)"}
	}
	if !s.standalone { // the standalone's NATS has no monitoring port
		fmt.Fprintf(w, "%6s  %-8s %s connections, %s subscriptions, %s consumers; %s\n", at, "streams",
			num(s.nats.connections, 0), num(s.nats.subscriptions, 0), num(s.nats.consumers, 0), strings.Join(parts, ", "))
	}
	rate := ""
	if prev != nil && s.at > prev.at {
		rate = fmt.Sprintf(" (%.1f/s)", float64(s.load.requests-prev.load.requests)/(s.at-prev.at).Seconds())
	}
	ls := s.load.listeners
	fmt.Fprintf(w, "%6s  %-8s %d requests%s, %d errors, p50 %s p99 %s; listen streams %d open, %d reconnects, %d events, %d errors\n",
		at, "load", s.load.requests, rate, s.load.errors, ms(s.load.p50), ms(s.load.p99), ls.open, ls.reconnects, ls.events, ls.errors)
}

// clock prints d as m:ss.
func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

func num(f float64, decimals int) string {
	if math.IsNaN(f) {
		return "?"
	}
	return strconv.FormatFloat(f, 'f', decimals, 64)
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// size prints a byte count in B, KiB or MiB.
func size(b int64) string {
	switch {
	case b < 1<<10:
		return fmt.Sprintf("%d B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
}
