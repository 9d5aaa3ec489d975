package proctest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// Two hundred relays (Echo's relay: a caller instance calls count on a callee instance through
// Agent2Agent and answers with its result) are sent at once, each retried with its
// Idempotency-Key after a 5xx or a connection error, while the host that runs every caller is
// killed with SIGKILL twice, each time with relays in flight: once started again at once, as a
// supervisor restarts a crashed process, and once left dead for the other host, which runs every
// callee, to take the callers over. Every relay is answered 200, and every callee counted each
// relay sent to it exactly once: the relays' answers carry its counts 1..n once each and its
// counter is n. (A caller run again after the kill calls its callee with the same request id,
// which the callee answers with its first result instead of counting again.) The time from each
// kill until relays were answered again is printed.
func TestProcessesRelaysSurviveCallerHostKills(t *testing.T) {
	t.Parallel() // beside TestProcessesSurviveNATSLeaderKills: it needs a fifth of a CPU
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)
	callers := sys.instancesOn("host-1", "caller", 8)
	callees := sys.instancesOn("host-2", "callee", 4)

	const relays = 200
	load := startRelayLoad(t, sys, callers, callees, relays)
	restarted := sys.killCallerHost(t, load, "host-1", relays/4, callees)
	sys.startHost("host-1")
	takenOver := sys.killCallerHost(t, load, "host-1", relays/2, callees)
	load.finish()

	caught := 0
	for i, k := range []relayKill{restarted, takenOver} {
		how := [...]string{"started again at once", "left dead for host-2 to take over"}[i]
		late := load.answersSince(k.at.Add(onTheirWay))
		again := "never"
		if len(late) > 0 {
			again = late[0].at.Sub(k.at).Round(time.Millisecond).String()
		}
		n := k.caught(late)
		caught += n
		t.Logf("kill %d (%s) with %d relays answered: relays answered again %s after it; %d relays had reached their callee before it and were answered only after it",
			i+1, how, k.answered, again, n)
	}
	all := load.answersSince(time.Time{})
	t.Logf("all %d relays answered %v after the second kill; %d attempts failed and were retried", len(all),
		all[len(all)-1].at.Sub(takenOver.at).Round(time.Millisecond), load.failures)
	if reasons := load.failureReasons(); reasons != "" {
		t.Logf("failed attempts: %s", reasons)
	}
	assert.Positive(t, caught, "no kill came between a relay's call reaching its callee and the relay's answer")
	load.verify(t, sys)
	sys.noDeadLetters(t, 1)
}

// relayKill is a kill of the callers' host under the relay load.
type relayKill struct {
	at       time.Time
	answered int            // relays answered before the kill
	counted  map[string]int // per callee, its counter right after the kill
}

// onTheirWay is how long after a kill answers may still come from the killed process: its
// replies already published. An answer after that comes from a process that took over.
const onTheirWay = 500 * time.Millisecond

// caught returns how many of the answers late, which came after the kill's answers on their
// way, carry a count that their callee had reached right after the kill: their calls were made
// by the killed process, and their callers ran again and got the callee's first result.
func (k relayKill) caught(late []relayAnswer) int {
	n := 0
	for _, a := range late {
		if a.count <= k.counted[a.callee] {
			n++
		}
	}
	return n
}

// killCallerHost waits until after relays are answered, kills host with SIGKILL while relays
// are left, and reads the callees' counters right after.
func (s *system) killCallerHost(t *testing.T, l *relayLoad, host string, after int, callees []string) relayKill {
	t.Helper()
	l.waitAnswered(t, after, 2*time.Minute)
	s.hosts[host].Kill()
	k := relayKill{at: time.Now(), answered: l.answered(), counted: map[string]int{}}
	require.Less(t, k.answered, l.total, "every relay was answered before %s was killed", host)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range callees {
		k.counted[c] = s.counter(ctx, t, c)
	}
	return k
}

// instancesOn returns n instances named prefix-0, prefix-1, … that host serves now, asking about
// more names until it found them.
func (s *system) instancesOn(host, prefix string, n int) []string {
	s.t.Helper()
	return s.instancesOnAgent(echoWF, host, prefix, n)
}

// instancesOnAgent is instancesOn for the agent of wf, whose host method answers host.
func (s *system) instancesOnAgent(wf, host, prefix string, n int) []string {
	s.t.Helper()
	for probe := 4 * n; probe <= 64*n; probe *= 2 {
		if mine := s.instancesOfOn(wf, host, prefix, probe); len(mine) >= n {
			slices.Sort(mine)
			return mine[:n]
		}
	}
	require.FailNowf(s.t, "too few instances", "%s serves fewer than %d of the instances %s-0 … %s-%d", host, n, prefix, prefix, 64*n-1)
	return nil
}
