package proctest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// servesAgainBound is how soon after nats-server starts again, on its port and store, a webhook
// call to Echo through an ingress that kept running answers 200 (docs/deployment.md, "A lost
// NATS connection").
const servesAgainBound = 5 * time.Second

// exitBound is how soon after NATS closes the connections of an ingress and a workflow host for
// good (here: it comes back requiring a token they do not have) each process exits 1
// (docs/deployment.md, "A lost NATS connection").
const exitBound = 5 * time.Second

// nats-server is killed (SIGKILL) under an idle system of an ingress and a workflow host, twice,
// stays down for 3 s and starts again on the same port and store. Neither process restarts:
// /readyz of each answers 503 while NATS is down and 200 again after, and a webhook call to Echo
// through the ingress answers 200 within servesAgainBound of nats-server starting again.
func TestProcessesServeAgainAfterNATSRestarts(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	hostOps := fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t))
	sys.startHost("host-1", "AGENTBUS_METRICS_ADDR="+strings.TrimPrefix(hostOps, "http://"))
	host := sys.hosts["host-1"]
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	ingressPid, hostPid := sys.ingress.Pid(), host.Pid()

	for round := range 2 {
		require.Equal(t, http.StatusOK, probe(sys.ingress.URL+"/readyz"), "ingress not ready before the kill")
		require.Equal(t, http.StatusOK, probe(hostOps+"/readyz"), "host not ready before the kill")
		nats.Kill()
		killed := time.Now()
		ingressDown := waitProbe(t, sys.ingress.URL+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
		hostDown := waitProbe(t, hostOps+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
		time.Sleep(3*time.Second - time.Since(killed))
		assert.Equal(t, http.StatusServiceUnavailable, probe(sys.ingress.URL+"/readyz"), "ingress ready while NATS is down")
		assert.Equal(t, http.StatusServiceUnavailable, probe(hostOps+"/readyz"), "host ready while NATS is down")

		nats.Restart(t)
		back := time.Now()
		ingressReady := readyAgain(sys.ingress.URL+"/readyz", back, 30*time.Second)
		hostReady := readyAgain(hostOps+"/readyz", back, 30*time.Second)
		nats.WaitHealthy(t, 30*time.Second)
		healthy := time.Since(back)
		sys.waitEchoAnswers(fmt.Sprintf("natsback-%d", round), servesAgainBound+20*time.Second)
		served := time.Since(back)
		ir, hr := <-ingressReady, <-hostReady
		t.Logf("NATS restart %d: /readyz 503 %v (ingress) and %v (host) after the kill; from NATS's start again: healthy %v, Echo answered 200 through the ingress %v, /readyz 200 %v (ingress) and %v (host)",
			round+1, ingressDown.Round(time.Millisecond), hostDown.Round(time.Millisecond), healthy.Round(time.Millisecond),
			served.Round(time.Millisecond), ir.Round(time.Millisecond), hr.Round(time.Millisecond))
		assert.Positive(t, ir, "the ingress's /readyz did not answer 200 again")
		assert.Positive(t, hr, "the host's /readyz did not answer 200 again")
		assert.Less(t, served, servesAgainBound, "Echo answered too late after NATS came back")
	}
	assert.Equal(t, ingressPid, sys.ingress.Pid(), "the ingress restarted")
	assert.Equal(t, hostPid, host.Pid(), "the host restarted")

	// A stop is still no failure: SIGTERM, and each exits 0 within its bound.
	procs := []*proctest.Proc{sys.ingress.Proc, host}
	for i, e := range stopAll(procs, stopBound+20*time.Second) {
		t.Logf("%s: exit %d %v after SIGTERM", procs[i].Name, e.code, e.took.Round(time.Millisecond))
		require.True(t, e.exited, "%s still runs %v after SIGTERM", procs[i].Name, e.took)
		assert.Equal(t, 0, e.code, "%s's exit code", procs[i].Name)
		assert.Less(t, e.took, stopBound, "%s took longer than the bound to exit", procs[i].Name)
	}
}

// nats-server starts again requiring an authorization token that the ingress and the workflow
// host do not have: nats.go closes their connections for good, and each process exits 1 within
// exitBound, saying why at error level. Started again by hand (as a supervisor would) once the
// token is gone, they serve: a webhook call to Echo answers 200.
func TestProcessesExitWhenNATSClosesTheirConnections(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	sys.startHost("host-1")
	host := sys.hosts["host-1"]
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)

	nats.Kill()
	nats.SetToken(t, "a-token-the-processes-do-not-have")
	nats.Restart(t)
	back := time.Now()
	procs := []*proctest.Proc{sys.ingress.Proc, host}
	for _, p := range procs {
		code, exited := p.Wait(exitBound + 20*time.Second - time.Since(back))
		took := time.Since(back)
		require.True(t, exited, "%s still runs %v after NATS came back with a token", p.Name, took)
		t.Logf("%s: exit %d %v after NATS came back with a token", p.Name, code, took.Round(time.Millisecond))
		assert.Equal(t, 1, code, "%s's exit code", p.Name)
		assert.Less(t, took, exitBound, "%s exited too late", p.Name)
		log := p.Log()
		assert.Contains(t, log, `level=ERROR msg="NATS connection closed for good`, "%s logged no error", p.Name)
		assert.Contains(t, strings.ToLower(log), "closed: nats: authorization violation", "%s named no cause", p.Name)
	}

	nats.Kill()
	nats.SetToken(t, "")
	nats.Restart(t)
	nats.WaitHealthy(t, 30*time.Second)
	restarted := time.Now()
	sys.ingress.Restart(t)
	host.Restart(t)
	proctest.WaitHTTP(t, sys.ingress.URL+"/healthz", 30*time.Second)
	sys.waitEchoAnswers("natsclosed", 30*time.Second)
	t.Logf("started again without the token: Echo answered 200 through the ingress %v after the processes started", time.Since(restarted).Round(time.Millisecond))
}

// waitEchoAnswers calls Echo's echo method through the ingress, each time on an instance of its
// own (prefix-1, prefix-2, …, so that no call waits behind one held before), until one answers
// 200.
func (s *system) waitEchoAnswers(prefix string, within time.Duration) {
	s.t.Helper()
	ctx := proctest.Context(s.t, within)
	var last string
	for i := 1; ; i++ {
		status, body, err := s.webhook(ctx, fmt.Sprintf("%s-%d", prefix, i), "echo", nil)
		if err == nil && status == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%d %s %v", status, body, err)
		require.NoError(s.t, ctx.Err(), "Echo did not answer 200 within %v; last: %s", within, last)
		time.Sleep(50 * time.Millisecond)
	}
}

// probe answers the status of a GET of url, 0 when it got none.
func probe(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// readyAgain polls url from now on until it answers 200 and then sends the time since from;
// it sends 0 when within passed first.
func readyAgain(url string, from time.Time, within time.Duration) <-chan time.Duration {
	took := make(chan time.Duration, 1)
	go func() {
		for time.Since(from) < within {
			if probe(url) == http.StatusOK {
				took <- time.Since(from)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		took <- 0
	}()
	return took
}

// waitProbe polls url until it answers status and returns how long that took.
func waitProbe(t *testing.T, url string, status int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for probe(url) != status {
		require.Less(t, time.Since(start), within, "%s did not answer %d within %v", url, status, within)
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}
