package proctest_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// The Python kit's Echo (sdk/python/examples/echo.py), a process of its own, makes five durable
// steps of 500 ms each (its Data method steps, through the kit's ctx.step), served by two
// workflow host processes. It runs on twenty instances, ten at a time, each call made by a client
// with an Idempotency-Key of its own that retries it after a 5xx or a connection error; each time
// the host that serves the ten is killed with SIGKILL while all ten are in their third step (the
// Echo logs each run of a step's function), and the other host takes them over: once each way
// round. The Echo is not killed: the killed host's run of step 3 goes on there and its answer
// finds no one. Every call is answered 200 with steps 1 and 2 as the killed host's first attempt
// recorded them and steps 3 to 5 from the attempt that answered, the second, on the other host.
// Steps 1, 2, 4 and 5 ran once, step 3 at most twice, and the state, which the final answer
// writes, counts each step once.
func TestProcessesRemoteStepsSurviveHostKills(t *testing.T) {
	bins := needProcesses(t)
	py := needPython(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	// The hosts call the Echo on loopback: the tenant's registration must be on the allow-list.
	sys := newSystem(t, bins, nats.URL, "AGENTBUS_OUTBOUND_URLS=http://127.0.0.1:*")
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)

	echo := startEchoPy(t, py, webhooksig.NewStandardSecret())
	ctx := proctest.Context(t, 30*time.Second)
	status, b := sys.do(ctx, http.MethodPost, "/api/v1/admin/tenants/default/agents", sys.key, string(echo.registration))
	require.Equal(t, http.StatusCreated, status, "registering the Echo: %s", b)
	remoteIDs := remoteHostIDs(echoPy, ids...)
	sys.waitSettledAgent(echoPy, remoteIDs, 30*time.Second)
	sys.waitAnswersOn(echoPyWF, 20*time.Second)

	const (
		rounds   = 2
		perRound = 10
		steps    = 5
		killAt   = 3
		sleepMs  = 500
	)
	for round := range rounds {
		victim := ids[round%len(ids)]
		// The hosts' ids as the Echo's requests name them (hostId): each process's host of the
		// remote agent.
		victimID, survivorID := remoteIDs[round%len(ids)], remoteIDs[(round+1)%len(ids)]
		instances := sys.instancesOnAgent(echoPyWF, victimID, fmt.Sprintf("rsteps%d", round), perRound)
		calls := startStepsCallsOn(sys, echoPyWF, instances, steps, sleepMs)
		waited := waitInRemoteStep(t, echo, instances, killAt, time.Minute)
		sys.hosts[victim].Kill()
		killed := time.Now()
		answers := calls.wait()
		final := sys.stepCountsOn(echoPyWF, instances)
		ran := remoteStepRuns(echo.Log())
		twice := 0
		for _, a := range instances {
			if r := ran[echoPyWF+a]; len(r) >= killAt && len(r[killAt-1]) == 2 {
				twice++
			}
		}
		t.Logf("round %d: %s killed %v after the calls started, with all %d in step %d; answered %v after the kill (slowest); step %d ran twice on %d of them; %d attempts failed and were retried%s",
			round+1, victim, waited.Round(time.Millisecond), perRound, killAt, calls.slowest(killed).Round(time.Millisecond),
			killAt, twice, len(calls.failures), calls.reasons())
		for _, a := range instances {
			checkRemoteStepsRun(t, a, victimID, survivorID, ran[echoPyWF+a], answers[a], final[a], steps, killAt)
		}
		if round < rounds-1 {
			sys.startHost(victim)
			sys.waitSettled(ids, time.Minute)
			sys.waitSettledAgent(echoPy, remoteIDs, time.Minute)
		}
	}
	sys.noDeadLetters(t, 1)
}

// stepRunLine is the line the Python Echo logs for each run of a step's function.
var stepRunLine = regexp.MustCompile(`steps: step (\d+) of \d+ runs \(workflow (.+), request \S+, attempt (\d+)\)`)

// remoteStepRuns reads the Echo's log: for each instance (its workflow id), the attempts whose
// run of each step's function began, by step (runs[i-1] for "step i").
func remoteStepRuns(log string) map[string][][]int {
	runs := map[string][][]int{}
	for _, m := range stepRunLine.FindAllStringSubmatch(log, -1) {
		step, _ := strconv.Atoi(m[1])
		attempt, _ := strconv.Atoi(m[3])
		r := runs[m[2]]
		for len(r) < step {
			r = append(r, nil)
		}
		r[step-1] = append(r[step-1], attempt)
		runs[m[2]] = r
	}
	return runs
}

// waitInRemoteStep reads the Echo's log until the runs of all the instances are in step n at
// once: each began step n, and none a later step. It fails the test when one of them went past
// step n first, or after within, and returns how long it waited.
func waitInRemoteStep(t *testing.T, echo *pyEcho, instances []string, n int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		runs := remoteStepRuns(echo.Log())
		all := true
		for _, a := range instances {
			r := runs[echoPyWF+a]
			require.LessOrEqual(t, len(r), n, "%s went past step %d (runs %v) before all %d instances were in it", a, n, r, len(instances))
			all = all && len(r) == n
		}
		if all {
			return time.Since(start)
		}
		require.Less(t, time.Since(start), within, "the instances were not all in step %d within %v", n, within)
		time.Sleep(10 * time.Millisecond)
	}
}

// checkRemoteStepsRun checks one instance's steps call, whose host victim was killed in step
// killAt: runs are the attempts that ran each step's function (from the Echo's log), final the
// state's step counts after the answer.
func checkRemoteStepsRun(t *testing.T, a, victim, survivor string, runs [][]int, answer stepsAnswer, final []int, steps, killAt int) {
	t.Helper()
	checkStepsAnswer(t, a, victim, survivor, answer, steps, killAt)
	// The final answer writes the state, once: it counts each step once.
	assert.Equal(t, ones(steps), final, "%s: the state's step counts after the answer", a)
	if !assert.Len(t, runs, steps, "%s: the runs of the steps' functions, by step: %v", a, runs) {
		return
	}
	for i, r := range runs {
		switch {
		case i+1 < killAt:
			assert.Equal(t, []int{1}, r, "%s: the attempts that ran step %d", a, i+1)
		case i+1 == killAt:
			assert.LessOrEqual(t, len(r), 2, "%s: step %d ran %d times: %v", a, i+1, len(r), r)
		default:
			assert.Equal(t, []int{2}, r, "%s: the attempts that ran step %d", a, i+1)
		}
	}
}
