package proctest_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// An ingress process gets SIGTERM under a steady load of slow and quick webhook calls: every
// call that got an HTTP answer got its handler's 200 (the calls waiting when the signal came
// included), calls made after the listener closed fail to connect rather than get a 5xx, and
// the process exits 0 well within its shutdown timeout.
func TestProcessesIngressDrainsOnSIGTERM(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	const shutdownTimeout = 10 * time.Second
	sys := newSystem(t, bins, nats.URL, fmt.Sprintf("AGENTBUS_SHUTDOWN_TIMEOUT=%v", shutdownTimeout))
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)

	load := startDrainLoad(proctest.Context(t, time.Minute), sys, 8)
	time.Sleep(3 * time.Second)
	signalled := time.Now()
	sys.ingress.Terminate()
	code, exited := sys.ingress.Wait(shutdownTimeout + 5*time.Second)
	took := time.Since(signalled)
	time.Sleep(300 * time.Millisecond) // calls after the exit meet a closed port
	calls := load.finish()

	require.True(t, exited, "the ingress still runs %v after SIGTERM", took)
	assert.Equal(t, 0, code, "exit code")
	assert.Less(t, took, shutdownTimeout, "the drain took longer than the shutdown timeout")
	assert.Contains(t, sys.ingress.Log(), "ingress drained")
	checkDrainCalls(t, calls, signalled, code, took)
}

// checkDrainCalls checks the calls made while an ingress signalled at signalled drained: every
// answered call got a 200, only calls made after the signal failed to connect, some calls were
// in flight at the signal and one of them waited more than a second for its answer, and some
// were refused. It logs the counts with the exit code and the time the drain took.
func checkDrainCalls(t *testing.T, calls []drainCall, signalled time.Time, code int, took time.Duration) {
	t.Helper()
	var answered, inFlight, refused int
	var lastAnswer time.Duration
	for _, c := range calls {
		if c.err != nil {
			refused++
			// Only a call made once the server stopped taking requests may fail to connect (a
			// few milliseconds of slack: the signal's delivery).
			assert.True(t, c.start.After(signalled.Add(-100*time.Millisecond)), "a call made %v before SIGTERM failed: %v",
				signalled.Sub(c.start), c.err)
			continue
		}
		answered++
		assert.Equal(t, http.StatusOK, c.status, "a call made %v after SIGTERM got %d %s", c.start.Sub(signalled), c.status, c.body)
		if c.start.Before(signalled) && c.end.After(signalled) {
			inFlight++
			lastAnswer = max(lastAnswer, c.end.Sub(signalled))
		}
	}
	t.Logf("%d calls answered (%d of them in flight at SIGTERM, the last answered %v after it), %d refused after it; exit %d after %v",
		answered, inFlight, lastAnswer.Round(time.Millisecond), refused, code, took.Round(time.Millisecond))
	assert.Positive(t, inFlight, "no call was in flight at SIGTERM")
	assert.Greater(t, lastAnswer, time.Second, "no call waited through the drain for its answer")
	assert.Positive(t, refused, "no call was made after the listener closed")
}

// One of two workflow host processes gets SIGTERM under a load of idempotent count calls: it
// exits 0 after handing its partitions over, the survivor takes them all, and every instance
// counted exactly its accepted calls.
func TestProcessesHostDrainsOnSIGTERM(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)

	const instances = 32
	counts := startCountLoad(sys, "hostdrain", instances, 8)
	time.Sleep(2 * time.Second)
	theirs := sys.instancesOf("host-2", "hostdrain", instances)
	before := counts.accepted()
	signalled := time.Now()
	sys.hosts["host-2"].Terminate()
	code, exited := sys.hosts["host-2"].Wait(40 * time.Second)
	took := time.Since(signalled)
	require.True(t, exited, "host-2 still runs %v after SIGTERM", took)
	assert.Equal(t, 0, code, "host-2's exit code")
	settled := sys.waitSettled([]string{"host-1"}, 10*time.Second)
	moved := sys.waitServedElsewhere("host-2", theirs, 30*time.Second)
	time.Sleep(2 * time.Second)
	counts.finish()

	failed, _ := counts.failedBetween(signalled, time.Now())
	t.Logf("host-2 (serving %d of %d instances) exited %d %v after SIGTERM; host-1 owned every partition %v later; %d calls accepted before, %d in all; %d attempts failed after the signal",
		len(theirs), instances, code, took.Round(time.Millisecond), settled.Round(time.Millisecond), before, counts.accepted(), failed)
	if reasons := counts.failureReasons(); reasons != "" {
		t.Logf("failed attempts: %s", reasons)
	}
	assert.Len(t, moved, len(theirs))
	assert.Greater(t, counts.accepted(), before, "no call was accepted after the signal")
	counts.verify(t)
	sys.noDeadLetters(t, 1)
}
