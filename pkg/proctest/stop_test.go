package proctest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// stopBound is how soon after SIGTERM every binary exits, NATS reachable or not
// (docs/deployment.md, "Stopping").
const stopBound = 10 * time.Second

// longSleep is the sleep of the load's slow calls: longer than stopBound, so that handlers still
// run when a process must exit.
const longSleep = 15 * time.Second

// Under a load of slow and quick webhook calls, the NATS server is killed (SIGKILL), and at once
// the ingress and the workflow host get SIGTERM: each exits 0 within stopBound, the host saying
// at warn level what it could not hand over. When NATS comes back, a new host handles every
// request the first one held: the inbox empties, by redelivery.
func TestProcessesStopWithNATSGone(t *testing.T) {
	t.Parallel() // beside TestProcessesSurviveNATSLeaderKills: it needs a third of a CPU
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{Dir: t.TempDir()})
	sys := newSystem(t, bins, nats.URL)
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)

	load := startStopLoad(proctest.Context(t, 2*time.Minute), sys, 8)
	time.Sleep(3 * time.Second)
	nats.Kill()
	signalled := time.Now()
	procs := []*proctest.Proc{sys.ingress.Proc, sys.hosts["host-1"]}
	exits := stopAll(procs, stopBound+20*time.Second)
	calls := load.finish()
	for i, p := range procs {
		t.Logf("%s: exit %d %v after SIGTERM (NATS killed just before)", p.Name, exits[i].code, exits[i].took.Round(time.Millisecond))
	}
	for i, p := range procs {
		e := exits[i]
		require.True(t, e.exited, "%s still runs %v after SIGTERM", p.Name, e.took)
		assert.Equal(t, 0, e.code, "%s's exit code", p.Name)
		assert.Less(t, e.took, stopBound, "%s took longer than the bound to exit", p.Name)
	}
	inFlight := 0
	for _, c := range calls {
		if c.start.Before(signalled) && (c.err != nil || c.end.After(signalled)) {
			inFlight++
		}
	}
	t.Logf("%d calls made, %d of them in flight when NATS was killed", len(calls), inFlight)
	assert.Positive(t, inFlight, "no call was in flight")
	// The host said once, at warn level, what it could not hand over.
	notHanded := regexp.MustCompile(`level=WARN msg="workflow host stopped without handing everything over[^"]*come back by redelivery[^"]*" .*`).
		FindAllString(sys.hosts["host-1"].Log(), -1)
	if assert.Len(t, notHanded, 1, "the host did not log once what it could not hand over") {
		t.Logf("host-1 logged: %s", notHanded[0][strings.Index(notHanded[0], "requestsNotAcknowledged"):])
		assert.NotContains(t, notHanded[0], "requestsNotAcknowledged=0 ", "no request held at the stop was counted")
	}

	// NATS comes back with its store, and a new host takes the partitions: every request left in
	// the inbox, the ones host-1 held among them, is handled and acknowledged.
	nats.Restart(t)
	nats.WaitHealthy(t, 30*time.Second)
	ctx := proctest.Context(t, 2*time.Minute)
	left := sys.inboxRequests(ctx)
	require.Positive(t, left, "no request was left in the inbox")
	sys.startHost("host-2")
	sys.waitSettled([]string{"host-2"}, 30*time.Second)
	start := time.Now()
	for n := left; n != 0; n = sys.inboxRequests(ctx) {
		require.NoError(t, ctx.Err(), "the inbox still holds %d requests", n)
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("when NATS came back the inbox held %d requests; host-2 handled them all within %v", left, time.Since(start).Round(time.Millisecond))
}

// inboxRequests counts the requests in Echo's inbox (its markers left out), -1 when it cannot be
// read.
func (s *system) inboxRequests(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, subject.InboxStream("Echo"))
	if err != nil {
		return -1
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return -1
	}
	n := 0
	for subj, count := range info.State.Subjects {
		if !subject.IsInboxMarker(subj) {
			n += int(count)
		}
	}
	return n
}

// The standalone gets SIGTERM under a load of slow and quick webhook calls, some handlers
// running longer than the bound: it exits 0 within stopBound.
func TestProcessesStandaloneStopsUnderLoad(t *testing.T) {
	bins := needProcesses(t)
	port := proctest.FreePort(t)
	const devKey = "proctest-standalone-dev-key-0123456789"
	p := proctest.Start(t, "standalone", bins.Standalone, nil, []string{
		"AGENTBUS_DATA_DIR=" + t.TempDir(), fmt.Sprintf("AGENTBUS_HTTP_ADDR=127.0.0.1:%d", port), "AGENTBUS_NATS_LISTEN=",
		"AGENTBUS_DEV_API_KEY=" + devKey, "AGENTBUS_RATE_LIMIT=0", "AGENTBUS_WEBHOOK_TIMEOUT=20s", "AGENTBUS_LOG_LEVEL=info",
	})
	in := &proctest.Ingress{Proc: p, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	proctest.WaitHTTP(t, in.URL+"/healthz", 30*time.Second)
	sys := &system{t: t, bins: bins, ingress: in, key: devKey,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	sys.waitServing(20 * time.Second)

	load := startStopLoad(proctest.Context(t, 2*time.Minute), sys, 8)
	time.Sleep(3 * time.Second)
	signalled := time.Now()
	e := stopAll([]*proctest.Proc{p}, stopBound+30*time.Second)[0]
	calls := load.finish()
	var answered, inFlight int
	for _, c := range calls {
		if c.err == nil && c.status == http.StatusOK {
			answered++
		}
		if c.start.Before(signalled) && (c.err != nil || c.end.After(signalled)) {
			inFlight++
		}
	}
	t.Logf("standalone: exit %d %v after SIGTERM; %d calls made, %d answered 200, %d in flight at the signal",
		e.code, e.took.Round(time.Millisecond), len(calls), answered, inFlight)
	require.True(t, e.exited, "the standalone still runs %v after SIGTERM", e.took)
	assert.Equal(t, 0, e.code, "exit code")
	assert.Less(t, e.took, stopBound, "the standalone took longer than the bound to exit")
	assert.Positive(t, inFlight, "no call was in flight")
}

// exit is how a process ended after SIGTERM.
type exit struct {
	code   int
	exited bool
	took   time.Duration
}

// stopAll sends SIGTERM to every process at once and waits up to within for each to exit.
func stopAll(procs []*proctest.Proc, within time.Duration) []exit {
	start := time.Now()
	for _, p := range procs {
		p.Terminate()
	}
	exits := make([]exit, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() {
			code, ok := p.Wait(within)
			exits[i] = exit{code: code, exited: ok, took: time.Since(start)}
		})
	}
	wg.Wait()
	return exits
}

// startStopLoad starts workers that each call one Echo instance of their own until finish: the
// even ones sleep longSleep, the odd ones count. They start apart, so that the sleeps are at
// different stages when a signal comes.
func startStopLoad(ctx context.Context, sys *system, workers int) *drainLoad {
	l := &drainLoad{ctx: ctx, sys: sys, stop: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			activation := fmt.Sprintf("stop-%d", w)
			time.Sleep(time.Duration(w) * 300 * time.Millisecond)
			for seq := 0; ; seq++ {
				select {
				case <-l.stop:
					return
				default:
				}
				c := drainCall{start: time.Now()}
				if w%2 == 0 {
					c.status, c.body, c.err = l.sys.webhook(l.ctx, activation, "sleep", url.Values{"ms": {fmt.Sprint(longSleep.Milliseconds())}})
				} else {
					c.status, c.body, c.err = l.sys.webhook(l.ctx, activation, "count", nil, "Idempotency-Key", fmt.Sprintf("%s-%d", activation, seq))
				}
				c.end = time.Now()
				l.mu.Lock()
				l.calls = append(l.calls, c)
				l.mu.Unlock()
				if c.err != nil || c.status != http.StatusOK {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	return l
}
