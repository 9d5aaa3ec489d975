package proctest_test

import (
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// Two ingress processes serve one system (a NATS server, two workflow hosts) under a load of
// idempotent count calls spread over both, whose clients retry a call with its Idempotency-Key
// on the other ingress after a connection error or a 5xx. Each ingress in turn is killed with
// SIGKILL mid-load and started again. A call the dead ingress had published is answered by the
// other from the first request's kept result; one it had not is published there. Every call is
// answered once: each instance's count equals its accepted calls, whose answers are 1..n once
// each, and nothing is dead-lettered.
func TestProcessesSurviveIngressKills(t *testing.T) {
	t.Parallel() // beside the other parallel process tests: its callers wait up to 20 s, and it judges no time
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	second := sys.addIngress("ingress-2")
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)

	const instances = 32
	counts := startCountLoadVia(sys, []string{sys.ingress.URL, second.URL}, echoWF, "ingress", instances, 16, time.Minute)
	time.Sleep(2 * time.Second)

	var extras []time.Duration
	kept := 0 // calls answered from a kept result, by the ingresses' counters
	for round, victim := range []*proctest.Ingress{sys.ingress, second, sys.ingress, second} {
		before := counts.accepted()
		kept += keptResults(t, victim)
		killed := time.Now()
		victim.Kill()
		time.Sleep(2 * time.Second) // its clients have moved to the other one
		n, _ := counts.failedBetween(killed, time.Now())
		lat := counts.latencyAround(killed, time.Now())
		extras = append(extras, lat.extra())
		t.Logf("kill %d: %s; %d client attempts failed and were retried on the other ingress; %d calls accepted in the 2 s after the kill; %v",
			round+1, victim.Name, n, counts.accepted()-before, lat)
		victim.Restart(t)
		proctest.WaitHTTP(t, victim.URL+"/healthz", 30*time.Second)
		time.Sleep(2 * time.Second)
	}
	counts.finish()
	kept += keptResults(t, sys.ingress) + keptResults(t, second)

	slices.Sort(extras)
	t.Logf("%d count calls accepted; %d attempts failed, %d were retried on the other ingress, %d calls were answered from the result kept for a request accepted before; extra latency of the slowest call under way at a kill: median %v, worst %v",
		counts.accepted(), len(counts.failures), counts.switched, kept, extras[len(extras)/2].Round(time.Millisecond), extras[len(extras)-1].Round(time.Millisecond))
	if reasons := counts.failureReasons(); reasons != "" {
		t.Logf("failed attempts: %s", reasons)
	}
	for reason := range counts.reasons {
		assert.True(t, strings.HasPrefix(reason, "connection: "), "an attempt failed otherwise than on a dead ingress's connection: %s", reason)
	}
	counts.verify(t)
	assert.NotZero(t, counts.switched, "no call was retried on the other ingress")
	sys.noDeadLetters(t, 1)
}

// keptResults reads an ingress's count of calls answered from a kept result
// (agentbus_ingress_kept_results_total) since it started.
func keptResults(t *testing.T, in *proctest.Ingress) int {
	t.Helper()
	resp, err := http.Get(in.URL + "/metrics")
	require.NoError(t, err, "reading %s's metrics", in.Name)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "reading %s's metrics", in.Name)
	m := regexp.MustCompile(`(?m)^agentbus_ingress_kept_results_total (\d+)$`).FindSubmatch(b)
	require.NotNil(t, m, "%s serves no agentbus_ingress_kept_results_total", in.Name)
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}
