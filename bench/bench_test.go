package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBenchSmoke runs the three phases briefly and checks that every request succeeded, that the
// phases answered the same sizes, and that they leave no goroutines behind.
func TestBenchSmoke(t *testing.T) {
	before := runtime.NumGoroutine()
	o := options{
		Duration:   300 * time.Millisecond,
		Warmup:     100 * time.Millisecond,
		Clients:    4,
		Instances:  10,
		Partitions: 4,
		Body:       []byte(`{"ping":1}`),
		Target:     targetWebhook,
	}
	client := newClient(o.Clients)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := map[string]result{}
	phases := []string{phaseBare, phasePipeline, phaseAgentbus}
	for _, phase := range phases {
		res, err := runTarget(ctx, phase, o, client)
		require.NoError(t, err, phase)
		assert.True(t, res.Requests > 0 && res.RPS() > 0, "%s: no requests measured: %+v", phase, res)
		assert.Zero(t, res.Errors, "%s: %d errors of %d requests: %v", phase, res.Errors, res.Requests, res.topErrors(5))
		assert.True(t, res.P50 > 0 && res.P50 <= res.P99 && res.P99 <= res.Max,
			"%s: inconsistent latencies p50=%s p99=%s max=%s", phase, res.P50, res.P99, res.Max)
		results[phase] = res
	}
	a, b, p := results[phaseAgentbus].AvgRespBytes(), results[phaseBare].AvgRespBytes(), results[phasePipeline].AvgRespBytes()
	assert.True(t, a == b && a == p, "response sizes differ: agentbus %.1f B, bare %.1f B, pipeline %.1f B", a, b, p)
	var out bytes.Buffer
	printTable(&out, phases, results)
	t.Log("\n" + out.String())
	client.CloseIdleConnections()
	checkGoroutines(t, before)
}

// TestBenchTenants spreads the webhook load over tenants (-tenants), each instance called with
// its tenant's key: every request succeeds, and the bare phase answers the same sizes.
func TestBenchTenants(t *testing.T) {
	o := options{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Clients: 4, Instances: 6, Tenants: 3,
		Partitions: 4, Body: []byte(`{"ping":1}`), Target: targetWebhook}
	require.NoError(t, o.validate())
	assert.Equal(t, "bench-2", tenantOf(o, 5))
	client := newClient(o.Clients)
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := map[string]result{}
	for _, phase := range []string{phaseBare, phaseAgentbus} {
		res, err := runTarget(ctx, phase, o, client)
		require.NoError(t, err, phase)
		assert.Positive(t, res.Requests, phase)
		assert.Zero(t, res.Errors, "%s: %v", phase, res.topErrors(5))
		results[phase] = res
	}
	assert.Equal(t, results[phaseBare].AvgRespBytes(), results[phaseAgentbus].AvgRespBytes())

	o.Target = targetSend
	assert.Error(t, o.validate(), "-tenants with another target")
	o.Target, o.Tenants = targetWebhook, 7
	assert.Error(t, o.validate(), "more tenants than instances")
}

// TestBenchRemoteAgents: -remote-agents registers that many idle remote agents and waits until
// their consumers are on the inbox beside Echo's (the phase fails to start otherwise); the idle
// measurement, with a call now and then, and the load then succeed.
func TestBenchRemoteAgents(t *testing.T) {
	o := options{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Clients: 4, Instances: 6,
		Partitions: 2, RemoteAgents: 3, Body: []byte(`{"ping":1}`), Target: targetWebhook,
		Idle: 300 * time.Millisecond, IdleSettle: 100 * time.Millisecond, IdleEvery: 50 * time.Millisecond}
	require.NoError(t, o.validate())
	client := newClient(o.Clients)
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := runTarget(ctx, phaseAgentbus, o, client)
	require.NoError(t, err)
	assert.Positive(t, res.Requests)
	assert.Zero(t, res.Errors, "%v", res.topErrors(5))
}

// TestBenchTargets runs both phases of every target briefly and checks that every request
// succeeded and that the bare phase answered as much as the agentbus phase. Twelve instances
// give activation names of two lengths, and answers of two sizes for all but webhook.
func TestBenchTargets(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			before := runtime.NumGoroutine()
			o := options{
				Duration:   200 * time.Millisecond,
				Warmup:     50 * time.Millisecond,
				Clients:    2,
				Instances:  12,
				Partitions: 4,
				Body:       []byte(`{"ping":1}`),
				Target:     target,
			}
			client := newClient(o.Clients)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			results := map[string]result{}
			for _, phase := range []string{phaseBare, phaseAgentbus} {
				res, err := runTarget(ctx, phase, o, client)
				require.NoError(t, err, phase)
				assert.Zero(t, res.Errors, "%s: %d errors of %d requests: %v", phase, res.Errors, res.Requests, res.topErrors(5))
				assert.True(t, res.Requests > 0 && res.RPS() > 0, "%s: no requests measured: %+v", phase, res)
				results[phase] = res
			}
			// The phases answer the same sizes to the same requests, but each ends part-way
			// through its round of instances.
			a, b := results[phaseAgentbus].AvgRespBytes(), results[phaseBare].AvgRespBytes()
			assert.NotZero(t, a, "response sizes: agentbus %.2f B, bare %.2f B", a, b)
			assert.InDelta(t, a, b, 0.5, "response sizes differ: agentbus %.2f B, bare %.2f B", a, b)
			var out bytes.Buffer
			printTable(&out, []string{phaseBare, phaseAgentbus}, results)
			t.Log("\n" + out.String())
			if backlog := results[phaseAgentbus].Backlog; target == targetSend {
				assert.NotNil(t, backlog, "send's backlog is read")
				assert.Contains(t, out.String(), "backlog: ")
			} else {
				assert.Nil(t, backlog, "a backlog read for %s", target)
			}
			client.CloseIdleConnections()
			checkGoroutines(t, before)
		})
	}
}

// TestBareAnswersLikeAgentbus sends every request of each target to both phases' servers once and
// checks that the bare phase answers each with the agentbus phase's status and as many bytes.
func TestBareAnswersLikeAgentbus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := newClient(1)
	defer client.CloseIdleConnections()
	for _, target := range targets {
		o := options{Instances: 12, Partitions: 4, Body: []byte(`{"ping":1}`), Target: target}
		sizes := map[string][]int{}
		for _, phase := range []string{phaseAgentbus, phaseBare} {
			var (
				ep   endpoint
				stop func() error
				err  error
			)
			if phase == phaseBare {
				ep, stop, err = startBare(ctx, o)
			} else {
				ep, stop, err = startAgentbus(ctx, o)
			}
			require.NoError(t, err, "%s %s", target, phase)
			for _, r := range ep.reqs {
				body, _, err := probe(ctx, client, ep, r)
				assert.NoError(t, err, "%s %s", target, phase)
				sizes[phase] = append(sizes[phase], len(body))
			}
			client.CloseIdleConnections()
			assert.NoError(t, stop(), "%s %s: stopping", target, phase)
		}
		assert.Equal(t, sizes[phaseAgentbus], sizes[phaseBare], "%s: answer sizes by instance differ (agentbus, bare)", target)
		if target != targetWebhook {
			assert.NotEqual(t, slices.Min(sizes[phaseAgentbus]), slices.Max(sizes[phaseAgentbus]),
				"%s: all answers %d bytes; want longer ones for longer activation names", target, sizes[phaseAgentbus][0])
		}
		t.Logf("%s: %v", target, sizes[phaseBare])
	}
}

// TestBenchRateSmoke runs both phases briefly as an open loop at a rate well within reach and
// checks that every request succeeded and that the schedule was kept or said not to be: about
// rate × duration requests were due in the window, each measured or counted as due but not
// sent. (On an idle machine nearly all are measured; on a busy one a stall of the race-built
// stack leaves some unsent, which the table reports. How much of a rate is reached is the
// bench's figure to print, not this test's to judge.)
func TestBenchRateSmoke(t *testing.T) {
	before := runtime.NumGoroutine()
	o := options{
		Duration: 300 * time.Millisecond,
		Warmup:   100 * time.Millisecond,
		// Enough in flight that the clients are not what holds a due request back: 256 at 200
		// req/s cover a stall of the stack of 1.28 s, the whole warm-up and measured window and
		// more (16, and then 64, did not, while other race-instrumented test binaries ran
		// beside). A stall of the whole process, load generator included, still leaves the
		// requests due in it unsent.
		Clients:    256,
		Instances:  10,
		Partitions: 4,
		Body:       []byte(`{"ping":1}`),
		Target:     targetWebhook,
		Rate:       200,
	}
	want := o.Rate * o.Duration.Seconds() // 60
	client := newClient(o.Clients)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := map[string]result{}
	for _, phase := range []string{phaseBare, phaseAgentbus} {
		res, err := runTarget(ctx, phase, o, client)
		require.NoError(t, err, phase)
		assert.Equal(t, o.Rate, res.Rate, "%s: rate", phase)
		assert.Zero(t, res.Errors, "%s: %d errors of %d requests: %v", phase, res.Errors, res.Requests, res.topErrors(5))
		assert.Positive(t, res.Requests, "%s: requests measured", phase)
		assert.InDelta(t, want, float64(res.Requests+res.Unsent), 0.3*want,
			"%s: %d requests measured and %d due but not sent, want %.0f ± 30%% due", phase, res.Requests, res.Unsent, want)
		assert.True(t, res.P50 > 0 && res.P50 <= res.P99 && res.P99 <= res.Max,
			"%s: inconsistent latencies p50=%s p99=%s max=%s", phase, res.P50, res.P99, res.Max)
		results[run{phase, o.Rate}.String()] = res
	}
	var out bytes.Buffer
	printRateTable(&out, []string{phaseBare, phaseAgentbus}, []float64{o.Rate}, results)
	rows := 0
	for line := range strings.Lines(out.String()) {
		if f := strings.Fields(line); len(f) > 2 && (f[0] == phaseBare || f[0] == phaseAgentbus) && f[1] == "200" {
			rows++
		}
	}
	assert.Equal(t, 2, rows, "want a plain row per phase:\n%s", out.String())
	assert.NotContains(t, out.String(), "interrupted", "want a plain row per phase")
	t.Log("\n" + out.String())
	client.CloseIdleConnections()
	checkGoroutines(t, before)
}

// TestOpenLoopChargesStalls overloads a server that takes 20 ms per request with one client at
// 200 requests per second: a closed loop would see 20 ms latencies, the open loop must charge
// every request the time it waited behind the ones before it, mark them late and report the
// requests it never got to send.
func TestOpenLoopChargesStalls(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
	}))
	defer srv.Close()
	o := options{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Clients: 1, Rate: 200}
	client := newClient(o.Clients)
	defer client.CloseIdleConnections()
	res := runPhase(context.Background(), phaseBare, o, client, endpoint{reqs: []request{{url: srv.URL}}, status: http.StatusOK})
	t.Logf("%+v", res)
	require.Zero(t, res.Errors, "%d errors of %d requests: %v", res.Errors, res.Requests, res.topErrors(5))
	require.NotZero(t, res.Requests, "requests measured")
	// At most 400 ms / 20 ms requests fit in the phase; 80 were due.
	assert.LessOrEqual(t, res.Requests, 16, "requests measured; a 20 ms server cannot answer that many")
	assert.Equal(t, res.Requests, res.Late, "requests late of %d, want all", res.Requests)
	// The first measured request starts at 100 ms or later and was due at 25 ms at the latest.
	assert.GreaterOrEqual(t, res.P50, 75*time.Millisecond, "p50: latency does not run from the scheduled time")
	assert.GreaterOrEqual(t, res.Unsent, 80-20, "due requests not sent, want at least 60")
}

func TestSchedule(t *testing.T) {
	s := schedule{rate: 3} // every 333.33… ms
	for i, want := range []time.Duration{0, 333333333, 666666667, time.Second, 1333333333} {
		assert.Equal(t, want, s.at(uint64(i)), "at(%d)", i)
	}
	for d, want := range map[time.Duration]uint64{
		-1: 0, 0: 0, 1: 1, 333333333: 1, 333333334: 2, time.Second: 3, time.Second + 1: 4, 10 * time.Second: 30,
	} {
		assert.Equal(t, want, s.dueBefore(d), "dueBefore(%d)", d)
	}
	s = schedule{rate: 4000}
	assert.Equal(t, uint64(40000), s.dueBefore(2*time.Second+8*time.Second), "4000/s over 10 s: due")
}

func TestParseRates(t *testing.T) {
	got, err := parseRates("1000, 2000,4000,0.5")
	assert.NoError(t, err, "parseRates")
	assert.Equal(t, []float64{1000, 2000, 4000, 0.5}, got, "parseRates")
	for _, bad := range []string{"", "1000,", "0", "-5", "x", "NaN", "Inf", "1e10"} {
		got, err := parseRates(bad)
		assert.Error(t, err, "parseRates(%q) = %v, want an error", bad, got)
	}
	assert.Equal(t, "agentbus@2000", run{phaseAgentbus, 2000}.String(), "run label")
}

func TestParsePhases(t *testing.T) {
	for in, want := range map[string][]string{
		"both":                    {phaseBare, phaseAgentbus},
		"agentbus":                {phaseAgentbus},
		"agentbus,pipeline,bare":  {phaseBare, phasePipeline, phaseAgentbus},
		"pipeline,agentbus":       {phasePipeline, phaseAgentbus},
		"processes,bare,agentbus": {phaseBare, phaseAgentbus, phaseProcesses},
	} {
		got, err := parsePhases(in)
		assert.NoError(t, err, "parsePhases(%q)", in)
		assert.Equal(t, want, got, "parsePhases(%q)", in)
	}
	for _, bad := range []string{"", "all", "bare,", "bare,nope", "Bare"} {
		got, err := parsePhases(bad)
		assert.Error(t, err, "parsePhases(%q) = %v, want an error", bad, got)
	}
}

// TestProcessesPhase runs the processes phase briefly, profiling its servers, and checks that
// every request succeeded, that the CPU per call counts the servers' processes, and that each
// server's profile was written. It builds the binaries: set AGENTBUS_PROCESS_TEST=1 to run it.
func TestProcessesPhase(t *testing.T) {
	if testing.Short() || os.Getenv("AGENTBUS_PROCESS_TEST") == "" {
		t.Skip("builds and runs nats-server, ingress and workflowhost; set AGENTBUS_PROCESS_TEST=1")
	}
	defer removeBuilt()
	o := options{
		Duration:   time.Second,
		Warmup:     300 * time.Millisecond,
		Clients:    4,
		Instances:  10,
		Partitions: 4,
		Body:       []byte(`{"ping":1}`),
		Target:     targetWebhook,
		ProcEnv:    procEnv{},
	}
	o.ProfileServers = filepath.Join(t.TempDir(), "cpu")
	client := newClient(o.Clients)
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := runTarget(ctx, phaseProcesses, o, client)
	require.NoError(t, err)
	assert.Zero(t, res.Errors, "%d errors of %d requests: %v", res.Errors, res.Requests, res.topErrors(5))
	assert.Positive(t, res.RPS())
	// The servers do most of the work: more CPU than this process alone used.
	assert.Greater(t, res.CPU, time.Duration(0))
	for _, name := range procNames {
		fi, err := os.Stat(o.ProfileServers + "." + name)
		if assert.NoError(t, err, "profile of %s", name) {
			assert.Positive(t, fi.Size(), "profile of %s", name)
		}
	}
	var out bytes.Buffer
	printTable(&out, []string{phaseProcesses}, map[string]result{phaseProcesses: res})
	t.Log("\n" + out.String())
}

func TestProcEnv(t *testing.T) {
	p := procEnv{}
	require.NoError(t, p.Set("all:GOGC=400"))
	require.NoError(t, p.Set("nats:GOMAXPROCS=1"))
	assert.Equal(t, []string{"GOGC=400", "GOMAXPROCS=1"}, p.of(procNATS))
	assert.Equal(t, []string{"GOGC=400"}, p.of(procIngress))
	assert.Equal(t, "all:GOGC=400,nats:GOMAXPROCS=1", p.String())
	for _, bad := range []string{"GOGC=400", "host:GOGC=400", "nats:GOGC", ":A=1"} {
		assert.Error(t, procEnv{}.Set(bad), bad)
	}
}

// checkGoroutines fails t if more goroutines run than before (giving closing connections a
// moment): everything the phases started must be gone.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		assert.Fail(t, "goroutines left behind", "%d goroutines before, %d after:\n%s", before, n, buf)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{0.5: 50, 0.9: 90, 0.99: 99, 1: 100} {
		assert.Equal(t, want, percentile(d, p), "percentile(%v)", p)
	}
	assert.Zero(t, percentile(nil, 0.5), "percentile of nothing")
}

// The open loop's summary names the highest offered rate whose p99 met the target, or says none
// did; a rate that was not sustained does not count.
func TestRateTableNamesHighestRateMet(t *testing.T) {
	res := func(p99 time.Duration, unsent int) result {
		return result{Requests: 100, P50: time.Millisecond, P90: time.Millisecond, P99: p99, Max: p99, Elapsed: time.Second, Unsent: unsent}
	}
	for _, tt := range []struct {
		name    string
		results map[float64]result
		want    string
	}{
		{"middle", map[float64]result{1000: res(4*time.Millisecond, 0), 2000: res(8*time.Millisecond, 0), 3000: res(30*time.Millisecond, 0)},
			"highest offered rate with agentbus p99 < 10.00ms: 2000 req/s (of the rates tried)"},
		{"none", map[float64]result{1000: res(12*time.Millisecond, 0)},
			"highest offered rate with agentbus p99 < 10.00ms: none of the rates tried"},
		{"not sustained", map[float64]result{1000: res(4*time.Millisecond, 0), 2000: res(5*time.Millisecond, 3)},
			"highest offered rate with agentbus p99 < 10.00ms: 1000 req/s (of the rates tried)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			results := map[string]result{}
			var rates []float64
			for rate, r := range tt.results {
				results[run{phaseAgentbus, rate}.String()] = r
				rates = append(rates, rate)
			}
			slices.Sort(rates)
			var out bytes.Buffer
			printRateTable(&out, []string{phaseAgentbus}, rates, results)
			assert.Contains(t, out.String(), tt.want+"\n")
		})
	}
}

// TestSleepWaitsAtLeast: the open loop's sleep never returns before its time, however short,
// and sleeps from several goroutines do not disturb each other.
func TestSleepWaitsAtLeast(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 50 * time.Microsecond, 400 * time.Microsecond, 3 * time.Millisecond} {
		for range 20 {
			start := time.Now()
			sleep(d)
			require.GreaterOrEqual(t, time.Since(start), d, "sleep(%s) returned too early", d)
		}
	}
	done := make(chan time.Duration)
	for range 4 {
		go func() {
			start := time.Now()
			sleep(2 * time.Millisecond)
			done <- time.Since(start)
		}()
	}
	for range 4 {
		require.GreaterOrEqual(t, <-done, 2*time.Millisecond, "a concurrent sleep(2ms) returned too early")
	}
}

// TestGuard: each bound of the regression guard fails on the medians of the rounds that miss it,
// and none fails when its phase did not run.
func TestGuard(t *testing.T) {
	res := func(bare, pipeline, agentbus int, p99 time.Duration) map[string]result {
		r := func(n int) result { return result{Requests: n, Elapsed: time.Second, P99: p99} }
		return map[string]result{phaseBare: r(bare), phasePipeline: r(pipeline), phaseAgentbus: r(agentbus)}
	}
	all := []string{phaseBare, phasePipeline, phaseAgentbus}
	// Medians: agentbus/bare 0.2, agentbus/pipeline 0.5, p99 20 ms; one round far off each way.
	rounds := []map[string]result{
		res(10000, 4000, 2000, 20*time.Millisecond),
		res(10000, 4000, 200, 900*time.Millisecond),
		res(10000, 4000, 2000, 20*time.Millisecond),
	}
	for _, tc := range []struct {
		g      guard
		phases []string
		missed bool
	}{
		{guard{MinRatio: 0.15, MinPipelineRatio: 0.4, MaxP99: 50 * time.Millisecond}, all, false},
		{guard{MinRatio: 0.25}, all, true},
		{guard{MinPipelineRatio: 0.6}, all, true},
		{guard{MaxP99: 10 * time.Millisecond}, all, true},
		{guard{MinPipelineRatio: 0.6}, []string{phaseBare, phaseAgentbus}, false},
		{guard{MinRatio: 0.25, MaxP99: time.Millisecond}, []string{phaseBare}, false},
	} {
		assert.Equal(t, tc.missed, tc.g.check(tc.phases, rounds), "%+v over %v", tc.g, tc.phases)
	}
}

// TestFiguresFromWrkAndBench: -figures reads bench/wrk.sh's rounds and writes the medians of both
// loads side by side, in the Markdown docs/performance.md shows.
func TestFiguresFromWrkAndBench(t *testing.T) {
	out := `round 1
bare: req/s 40000  p50 1.20ms  p99 5.00ms  non-2xx/3xx 0  errors 0
pipeline: req/s 16000  p50 3.00ms  p99 8.00ms  non-2xx/3xx 0  errors 0
standalone: req/s 8000  p50 7.00ms  p99 20.00ms  non-2xx/3xx 0  errors 0
round 2
bare: req/s 50000  p50 1.20ms  p99 5.00ms  non-2xx/3xx 0  errors 0
pipeline: req/s 20000  p50 3.00ms  p99 8.00ms  non-2xx/3xx 0  errors 0
standalone: req/s 12000  p50 7.00ms  p99 30.00ms  non-2xx/3xx 0  errors 0
`
	wrk, err := parseWrk(strings.NewReader(out))
	require.NoError(t, err)
	require.Len(t, wrk, 2)
	assert.Equal(t, wrkResult{RPS: 12000, P99: 30 * time.Millisecond}, wrk[1]["standalone"])

	_, err = parseWrk(strings.NewReader("round 1\nstandalone: req/s 8000  p50 7.00ms  p99 20.00ms  non-2xx/3xx 3  errors 0\n"))
	assert.ErrorContains(t, err, "3 non-2xx")
	_, err = parseWrk(strings.NewReader("servers did not start\n"))
	assert.Error(t, err)

	res := func(bare, pipeline, agentbus int) map[string]result {
		r := func(n int, cpu time.Duration) result {
			return result{Requests: n, Elapsed: time.Second, P99: 15 * time.Millisecond, CPU: cpu * time.Duration(n)}
		}
		return map[string]result{phaseBare: r(bare, 40*time.Microsecond), phasePipeline: r(pipeline, 100*time.Microsecond), phaseAgentbus: r(agentbus, 200*time.Microsecond)}
	}
	var b bytes.Buffer
	printFigures(&b, figures{
		Date: "2026-12-02", Commit: "abc1234", Load: "1.2 and 1.5", Rounds: 2, WrkSeconds: 10,
		Options: options{Instances: 1000, Clients: 64, Duration: 4 * time.Second, Warmup: time.Second},
		Wrk:     wrk, Bench: []map[string]result{res(40000, 16000, 8000), res(44000, 20000, 9000)},
	})
	got := b.String()
	for _, want := range []string{
		"(2026-12-02, `abc1234`; 1000 instances, 64 connections; load average 1.2 and 1.5)",
		"| req/s: bare, pipeline, agentbus | 45,000, 18,000, 10,000 | 42,000, 18,000, 8,500 | |",
		"| agentbus / pipeline | **0.550** | **0.475** | ≥ 0.65 |",
		"| agentbus / bare | **0.220** | **0.202** | ≥ 0.22 |",
		"| agentbus p99 | 25.0 ms | 15.0 ms | ≤ 10.0 ms |",
		"| CPU per call: agentbus, pipeline | | 200, 100 µs | |",
	} {
		assert.Contains(t, got, want)
	}
}
