package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// figure is one process figure the verdict judges, with its thresholds: a growth from the first
// third's mean to the last third's larger than both abs and rel times the first third's mean is
// a leak.
type figure struct {
	name     string
	get      func(procSample) float64
	abs, rel float64
}

// figures are the judged figures. At the default load (40 requests a second) the span between
// the thirds' middles of a 30-minute run (5-minute warm-up) is about 17 minutes, some 40,000
// requests; the thresholds catch a leak of a goroutine or a file per 1,000 requests, or of 1 KiB
// per request, over that span, and sit above what a steady process moves by (docs/performance.md
// has the figures):
//
//   - RSS: 16 MiB and 20 %. A Go process's resident memory follows its heap's cycle between
//     collections and the runtime's lazy return of freed pages; nats-server's also its block
//     caches.
//   - goroutines: 25 and 10 %. Requests in flight and instances in memory (each a goroutine of
//     its own while live; they leave after 2 s idle) come and go.
//   - open files: 16 and 10 %. Each connection is a file; the load generator's pool opens more
//     connections in a burst and closes idle ones after 30 s.
var figures = []figure{
	{"RSS MiB", func(p procSample) float64 { return p.rssMiB }, 16, 0.20},
	{"goroutines", func(p procSample) float64 { return p.goroutines }, 25, 0.10},
	{"open files", func(p procSample) float64 { return p.fds }, 16, 0.10},
}

// inboxStream holds only requests not done yet: it must not grow. inboxAbs is the growth, in
// messages, from the first third's mean to the last third's, above which the hosts fall behind.
const (
	inboxStream = "AGENTBUS_INBOX"
	inboxAbs    = 100
)

// row is the verdict on one figure of one process.
type row struct {
	proc, figure         string
	first, last, perHour float64
	threshold            float64
	leak, unread         bool
}

// streamGrowth is a stream's growth after the warm-up.
type streamGrowth struct {
	name            string
	messages, bytes int64
}

type verdict struct {
	from, to time.Duration
	samples  int
	rows     []row
	streams  []streamGrowth
	requests int64 // after the warm-up
	load     loadSummary
	reasons  []string
	pass     bool
}

// judge computes the verdict from the samples taken at warmup or later.
func judge(samples []sample, warmup time.Duration, load loadSummary) verdict {
	var post []sample
	for _, s := range samples {
		if s.at >= warmup {
			post = append(post, s)
		}
	}
	v := verdict{load: load, samples: len(post)}
	if len(post) < 3 {
		v.reasons = append(v.reasons, fmt.Sprintf("%d samples after the warm-up: too few to judge", len(post)))
		return v
	}
	v.from, v.to = post[0].at, post[len(post)-1].at
	k := len(post) / 3

	for pi, p := range post[0].procs {
		for _, f := range figures {
			xs := make([]float64, len(post))
			ts := make([]float64, len(post))
			for i, s := range post {
				xs[i] = math.NaN()
				if pi < len(s.procs) && s.procs[pi].name == p.name {
					xs[i] = f.get(s.procs[pi])
				}
				ts[i] = s.at.Hours()
			}
			r := row{proc: p.name, figure: f.name, first: mean(xs[:k]), last: mean(xs[len(xs)-k:]), perHour: slope(ts, xs)}
			r.threshold = max(f.abs, f.rel*r.first)
			switch {
			case math.IsNaN(r.first) || math.IsNaN(r.last):
				r.unread = true
				v.reasons = append(v.reasons, fmt.Sprintf("%s's %s could not be read", p.name, f.name))
			case r.last-r.first > r.threshold:
				r.leak = true
				v.reasons = append(v.reasons, fmt.Sprintf("%s's %s grew by %.1f (threshold %.1f)", p.name, f.name, r.last-r.first, r.threshold))
			}
			v.rows = append(v.rows, r)
		}
	}

	// The inbox: its message count, judged like a figure.
	xs := make([]float64, len(post))
	ts := make([]float64, len(post))
	for i, s := range post {
		xs[i] = math.NaN()
		for _, st := range s.streams {
			if st.name == inboxStream {
				xs[i] = float64(st.messages)
			}
		}
		ts[i] = s.at.Hours()
	}
	r := row{proc: "streams", figure: inboxStream + " msgs", first: mean(xs[:k]), last: mean(xs[len(xs)-k:]), perHour: slope(ts, xs), threshold: inboxAbs}
	switch {
	case math.IsNaN(r.first) || math.IsNaN(r.last):
		r.unread = true
		v.reasons = append(v.reasons, "the inbox's size could not be read")
	case r.last-r.first > r.threshold:
		r.leak = true
		v.reasons = append(v.reasons, fmt.Sprintf("the inbox grew by %.0f messages: requests are left undone", r.last-r.first))
	}
	v.rows = append(v.rows, r)

	first, last := post[0], post[len(post)-1]
	v.requests = last.load.requests - first.load.requests
	for _, st := range last.streams {
		g := streamGrowth{name: st.name, messages: st.messages, bytes: st.bytes}
		for _, b := range first.streams {
			if b.name == st.name {
				g.messages -= b.messages
				g.bytes -= b.bytes
			}
		}
		if g.messages != 0 || g.bytes != 0 {
			v.streams = append(v.streams, g)
		}
	}

	var requests, errors int64
	for _, k := range load.kinds {
		requests += k.requests
		errors += k.errors
	}
	if requests == 0 {
		v.reasons = append(v.reasons, "no request was sent")
	}
	if errors > 0 {
		v.reasons = append(v.reasons, fmt.Sprintf("%d of %d requests failed", errors, requests))
	}
	if load.listeners.errors > 0 {
		v.reasons = append(v.reasons, fmt.Sprintf("%d listen stream errors", load.listeners.errors))
	}
	v.pass = len(v.reasons) == 0
	return v
}

// mean is the mean of the numbers of xs, NaN when it has none.
func mean(xs []float64) float64 {
	sum, n := 0.0, 0
	for _, x := range xs {
		if !math.IsNaN(x) {
			sum += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// slope is the least-squares slope of ys over xs, leaving out NaNs; NaN with fewer than two
// points.
func slope(xs, ys []float64) float64 {
	var n, sx, sy, sxx, sxy float64
	for i, y := range ys {
		if math.IsNaN(y) {
			continue
		}
		x := xs[i]
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if n < 2 || den == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / den
}

func (v verdict) print(w io.Writer) {
	if v.samples >= 3 {
		fmt.Fprintf(w, "verdict on the %d samples from %s to %s: the mean of the last third against the first third's; a growth above the threshold is a leak\n",
			v.samples, clock(v.from), clock(v.to))
		fmt.Fprintf(w, "  %-8s %-22s %10s %10s %9s %10s %10s\n", "process", "figure", "first 1/3", "last 1/3", "growth", "slope/h", "threshold")
		for _, r := range v.rows {
			mark := "ok"
			switch {
			case r.unread:
				mark = "UNREAD"
			case r.leak:
				mark = "LEAK"
			}
			fmt.Fprintf(w, "  %-8s %-22s %10.1f %10.1f %+9.1f %+10.1f %10.1f  %s\n", r.proc, r.figure, r.first, r.last, r.last-r.first, r.perHour, r.threshold, mark)
		}
		fmt.Fprintf(w, "stream growth from %s to %s, by design (history, instances, topics), per request of the %d sent then:\n", clock(v.from), clock(v.to), v.requests)
		for _, g := range v.streams {
			per := ""
			if v.requests > 0 {
				per = fmt.Sprintf("%.2f msgs, %s a request", float64(g.messages)/float64(v.requests), size(g.bytes/v.requests))
			}
			fmt.Fprintf(w, "  %-26s %+9d msgs %+10s  %s\n", g.name, g.messages, signedSize(g.bytes), per)
		}
	}
	fmt.Fprintf(w, "load over the whole run:\n  %-14s %9s %7s %9s %9s %9s\n", "kind", "requests", "errors", "p50", "p99", "max")
	for _, k := range v.load.kinds {
		fmt.Fprintf(w, "  %-14s %9d %7d %9s %9s %9s\n", k.kind, k.requests, k.errors, ms(k.p50), ms(k.p99), ms(k.maxLatency))
	}
	ls := v.load.listeners
	fmt.Fprintf(w, "  listen streams: %d connections (%d reconnects), %d events, %d errors\n", ls.connects, ls.reconnects, ls.events, ls.errors)
	if v.pass {
		fmt.Fprintln(w, "PASS: no process grew beyond its thresholds, the inbox stayed flat, and every request and listen stream succeeded")
		return
	}
	fmt.Fprintf(w, "FAIL: %s\n", strings.Join(v.reasons, "; "))
}

func signedSize(b int64) string {
	if b < 0 {
		return "-" + size(-b)
	}
	return "+" + size(b)
}
