package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/subject"
)

// figure is one process figure the verdict judges, with its thresholds: a growth from the first
// third's level to the last third's larger than both abs and rel times the first third's level
// is a leak. The level is the mean, or for a count that follows the requests in flight (floor)
// the least value: a sample taken in a burst of slow calls counts their goroutines and
// connections, which end with them, while a leak raises the floor too.
type figure struct {
	name     string
	get      func(procSample) float64
	abs, rel float64
	floor    bool
}

// figureRSS names the resident memory figure.
const figureRSS = "RSS MiB"

// figures are the judged figures. At the default load (40 requests a second) the span between
// the thirds' middles of a 30-minute run (5-minute warm-up) is about 17 minutes, some 40,000
// requests; the thresholds catch a leak of a goroutine or a file per 1,000 requests, or of 1 KiB
// per request, over that span, and sit above what a steady process moves by (docs/performance.md
// has the figures):
//
//   - RSS: 16 MiB and 20 %. A Go process's resident memory follows its heap's cycle between
//     collections and the runtime's lazy return of freed pages; nats-server's also its block
//     caches.
//   - goroutines: 25 and 10 %. Requests in flight and a host's drainer goroutines (they end after
//     a second without a request) come and go.
//   - open files: 16 and 10 %. Each connection is a file; the load generator's pool opens more
//     connections in a burst and closes idle ones after 30 s.
var figures = []figure{
	{figureRSS, func(p procSample) float64 { return p.rssMiB }, 16, 0.20, false},
	{"goroutines", func(p procSample) float64 { return p.goroutines }, 25, 0.10, true},
	{"open files", func(p procSample) float64 { return p.fds }, 16, 0.10, true},
}

// natsRSSWindow is the shortest judged window over which nats-server's resident memory is
// judged. It climbs for the first minutes of a run, while the server's file store fills its
// caches and block buffers (8 MiB each for the history stream), from 24 to 66 MiB in the first
// 2.5 minutes at 40 requests a second, and then moves up and down with its collections
// (docs/soak.md), so a short run (CI's two minutes) cannot tell that from a leak: it
// prints the figure and leaves it unjudged.
const natsRSSWindow = 10 * time.Minute

// natsFigures are nats-server's own figures, judged like the processes': connections (the
// ingress's and the hosts', which stay), subscriptions and JetStream consumers, which a client
// that forgets to end one would leave behind (a listen stream's, a reply's); the last two by
// their floors, since listen streams and calls in flight hold some for a while.
var natsFigures = []struct {
	name     string
	get      func(natsSample) float64
	abs, rel float64
	floor    bool
}{
	{"connections", func(n natsSample) float64 { return n.connections }, 2, 0, false},
	{"subscriptions", func(n natsSample) float64 { return n.subscriptions }, 25, 0.10, true},
	{"consumers", func(n natsSample) float64 { return n.consumers }, 8, 0.10, true},
}

// The agents' inbox streams hold only requests not done yet: together they must not grow.
// inboxAbs is the growth, in messages, from the first third's mean to the last third's, above
// which the hosts fall behind.
const inboxAbs = 100

// row is the verdict on one figure of one process.
type row struct {
	proc, figure         string
	floor                bool // first and last are the thirds' least values, not their means
	first, last, perHour float64
	threshold            float64
	leak, unread         bool
	unjudged             string // why the figure is not judged
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
	hours := make([]float64, len(post))
	for i, s := range post {
		hours[i] = s.at.Hours()
	}
	// judgeSeries judges one figure, whose value at each sample get gives (NaN: not read), by the
	// means of its thirds or, with floor, their least values.
	judgeSeries := func(proc, name string, abs, rel float64, floor bool, minWindow time.Duration, get func(sample) float64) {
		xs := make([]float64, len(post))
		for i, s := range post {
			xs[i] = get(s)
		}
		level := mean
		if floor {
			level = least
		}
		r := row{proc: proc, figure: name, floor: floor, first: level(xs[:k]), last: level(xs[len(xs)-k:]), perHour: slope(hours, xs)}
		r.threshold = max(abs, rel*r.first)
		switch {
		case v.to-v.from < minWindow:
			r.unjudged = fmt.Sprintf("not judged under %v", minWindow)
		case math.IsNaN(r.first) || math.IsNaN(r.last):
			r.unread = true
			v.reasons = append(v.reasons, fmt.Sprintf("%s's %s could not be read", proc, name))
		case r.last-r.first > r.threshold:
			r.leak = true
			v.reasons = append(v.reasons, fmt.Sprintf("%s's %s grew by %.1f (threshold %.1f)", proc, name, r.last-r.first, r.threshold))
		}
		v.rows = append(v.rows, r)
	}

	for pi, p := range post[0].procs {
		for _, f := range figures {
			var minWindow time.Duration
			if p.name == "nats" && f.name == figureRSS {
				minWindow = natsRSSWindow
			}
			judgeSeries(p.name, f.name, f.abs, f.rel, f.floor, minWindow, func(s sample) float64 {
				if pi < len(s.procs) && s.procs[pi].name == p.name {
					return f.get(s.procs[pi])
				}
				return math.NaN()
			})
		}
		if p.name == "nats" {
			for _, f := range natsFigures {
				judgeSeries(p.name, f.name, f.abs, f.rel, f.floor, 0, func(s sample) float64 { return f.get(s.nats) })
			}
		}
	}
	if !post[0].standalone { // the standalone's streams are not read
		judgeSeries("streams", subject.InboxStreamPrefix+"* msgs", inboxAbs, 0, false, 0, func(s sample) float64 {
			n, found := 0.0, false
			for _, st := range s.streams {
				if strings.HasPrefix(st.name, subject.InboxStreamPrefix) {
					n, found = n+float64(st.messages), true
				}
			}
			if !found {
				return math.NaN()
			}
			return n
		})
	}

	first, last := post[0], post[len(post)-1]
	v.requests = last.load.requests - first.load.requests
	for _, st := range last.streams {
		g := streamGrowth(st)
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

// least is the least of the numbers of xs, NaN when it has none.
func least(xs []float64) float64 {
	out := math.NaN()
	for _, x := range xs {
		if !math.IsNaN(x) && (math.IsNaN(out) || x < out) {
			out = x
		}
	}
	return out
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
		fmt.Fprintf(w, "verdict on the %d samples from %s to %s: the last third against the first, by their means (floor: their least values); a growth above the threshold is a leak\n",
			v.samples, clock(v.from), clock(v.to))
		fmt.Fprintf(w, "  %-8s %-22s %10s %10s %9s %10s %10s\n", "process", "figure", "first 1/3", "last 1/3", "growth", "slope/h", "threshold")
		for _, r := range v.rows {
			mark := "ok"
			switch {
			case r.unjudged != "":
				mark = r.unjudged
			case r.unread:
				mark = "UNREAD"
			case r.leak:
				mark = "LEAK"
			}
			name := r.figure
			if r.floor {
				name += " (floor)"
			}
			fmt.Fprintf(w, "  %-8s %-22s %10.1f %10.1f %+9.1f %+10.1f %10.1f  %s\n", r.proc, name, r.first, r.last, r.last-r.first, r.perHour, r.threshold, mark)
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
