package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/subject"
)

// samplesOf makes one sample a minute for each of rss, with the other figures flat, the inbox at
// two messages and the history growing by 40 messages a minute.
func samplesOf(rss []float64, goroutines func(i int) float64) []sample {
	var out []sample
	for i, r := range rss {
		out = append(out, sample{
			at: time.Duration(i) * time.Minute,
			procs: []procSample{
				{name: "nats", rssMiB: 40, goroutines: 150, fds: 30},
				{name: "host-1", rssMiB: r, goroutines: goroutines(i), fds: 12},
			},
			streams: []streamSample{{name: subject.InboxStream("Echo"), messages: 2, bytes: 200}, {name: "AGENTBUS_MESSAGES", messages: int64(40 * i), bytes: int64(32000 * i)}},
			load:    snapshot{requests: int64(40 * i)},
		})
	}
	return out
}

func flat(int) float64 { return 70 }

func okLoad() loadSummary {
	return loadSummary{kinds: []kindSummary{{kind: kindWebhookEcho, requests: 400}}}
}

func TestJudgePassesFlatFigures(t *testing.T) {
	// Noise around 30 MiB, and a first minute that the warm-up leaves out.
	rss := []float64{12, 30, 31, 29, 30, 32, 30, 29, 31, 30}
	v := judge(samplesOf(rss, flat), time.Minute, okLoad())
	if !v.pass {
		t.Fatalf("flat figures judged a failure: %v", v.reasons)
	}
	if v.samples != 9 || v.requests != 320 {
		t.Errorf("samples %d, requests %d; want 9 and 320", v.samples, v.requests)
	}
	var b strings.Builder
	v.print(&b)
	if !strings.Contains(b.String(), "AGENTBUS_MESSAGES") || !strings.Contains(b.String(), "1.00 msgs, 800 B a request") {
		t.Errorf("the stream growth per request is missing:\n%s", b.String())
	}
}

func TestJudgeFindsGrowth(t *testing.T) {
	// RSS up 3 MiB a minute: 18 MiB between the thirds' means, above 16 MiB and 20 % of 30.
	var rss []float64
	for i := range 10 {
		rss = append(rss, 30+3*float64(i))
	}
	v := judge(samplesOf(rss, flat), time.Minute, okLoad())
	if v.pass || len(v.reasons) != 1 || !strings.Contains(v.reasons[0], "host-1's RSS MiB grew") {
		t.Fatalf("growing RSS: pass %v, reasons %v", v.pass, v.reasons)
	}

	// A goroutine per request at 40 requests a minute.
	v = judge(samplesOf([]float64{30, 30, 30, 30, 30, 30, 30, 30, 30, 30}, func(i int) float64 { return 70 + 40*float64(i) }), time.Minute, okLoad())
	if v.pass || !strings.Contains(strings.Join(v.reasons, ";"), "host-1's goroutines grew") {
		t.Fatalf("growing goroutines: pass %v, reasons %v", v.pass, v.reasons)
	}
}

func TestJudgeTakesNoBurstForALeak(t *testing.T) {
	// CI's two minutes, a sample every 10 s: the last one taken in a burst of slow calls, whose
	// goroutines end with them (the ingress of a CI run: 76–85, then 128).
	s := samplesOf(make([]float64, 13), func(i int) float64 {
		if i == 12 {
			return 128
		}
		return 76 + float64(i%3)*4
	})
	for i := range s {
		s[i].at = time.Duration(i) * 10 * time.Second
		s[i].procs[1].rssMiB = 30
	}
	v := judge(s, time.Minute, okLoad())
	if !v.pass {
		t.Fatalf("a burst in the last sample judged a leak: %v", v.reasons)
	}
	// A goroutine kept per request, 40 a sample, raises the floor: a leak all the same.
	for i := range s {
		s[i].procs[1].goroutines = 76 + 40*float64(i)
	}
	if v := judge(s, time.Minute, okLoad()); v.pass {
		t.Error("goroutines growing 40 a sample passed")
	}
}

func TestJudgeFailsOnErrorsAndUnreadFigures(t *testing.T) {
	s := samplesOf([]float64{30, 30, 30, 30, 30, 30}, flat)
	for i := range s {
		s[i].procs[0].goroutines = math.NaN()
	}
	load := okLoad()
	load.kinds[0].errors = 2
	load.listeners.errors = 1
	v := judge(s, 0, load)
	want := []string{"nats's goroutines could not be read", "2 of 400 requests failed", "1 listen stream errors"}
	if v.pass || strings.Join(v.reasons, "; ") != strings.Join(want, "; ") {
		t.Fatalf("reasons %q, want %q", v.reasons, want)
	}
}

func TestJudgeNeedsThreeSamples(t *testing.T) {
	v := judge(samplesOf([]float64{30, 30, 30}, flat), 90*time.Second, okLoad())
	if v.pass {
		t.Fatal("one sample after the warm-up was judged a pass")
	}
}

func TestSlopeLeavesOutNaN(t *testing.T) {
	if got := slope([]float64{0, 1, 2, 3}, []float64{1, 3, math.NaN(), 7}); math.Abs(got-2) > 1e-9 {
		t.Errorf("slope %v, want 2", got)
	}
}

func TestJudgeLeavesNATSMemoryOfShortRunsUnjudged(t *testing.T) {
	// Samples every 10 s over two minutes; nats-server's memory climbs 3 MiB a sample.
	s := samplesOf(make([]float64, 13), flat)
	for i := range s {
		s[i].at = time.Duration(i) * 10 * time.Second
		s[i].procs[0].rssMiB = 30 + 3*float64(i)
		s[i].procs[1].rssMiB = 30
	}
	v := judge(s, time.Minute, okLoad())
	if !v.pass {
		t.Fatalf("nats-server's memory judged over two minutes: %v", v.reasons)
	}
	if r := v.rows[0]; r.proc != "nats" || r.figure != figureRSS || r.unjudged == "" {
		t.Errorf("first row %+v, want nats-server's memory, unjudged", r)
	}
	// The host's memory is judged all the same.
	for i := range s {
		s[i].procs[1].rssMiB = 30 + 5*float64(i)
	}
	if v := judge(s, time.Minute, okLoad()); v.pass {
		t.Error("a host's memory growing 5 MiB every 10 s passed")
	}
}
