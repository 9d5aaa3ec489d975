package proctest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/registry"
)

// Under a load of idempotent count calls and of ordered messages, one of three workflow host
// processes is killed with SIGKILL, ten times in a row, and started again each time. Afterwards
// every instance counted exactly its accepted calls (each answer 1..n once), every conversation's
// history shows its messages in the order they were sent, nothing is dead-lettered, and the time
// from each kill until the survivors answered the dead host's instances is printed.
//
// Each kill comes at a random moment of the victim's heartbeat cycle, as a crash does: the
// survivors take a host for dead registry.DeadAfter after its last heartbeat, so the takeover
// comes between DeadAfter-HeartbeatInterval and DeadAfter after the kill, plus the takeover's
// own time. Without the pause the kills would all come just after a heartbeat (the restarted
// victim's heartbeats are in step with waitSettled), the slowest case.
func TestProcessesSurviveHostKills(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	ids := []string{"host-1", "host-2", "host-3"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)

	const instances = 48
	counts := startCountLoad(sys, "crash", instances, 16)
	order := startOrderLoad(sys, "order", 16, 25*time.Millisecond)
	time.Sleep(2 * time.Second)

	const kills = 10
	var recoveries []time.Duration
	for round := range kills {
		victim := ids[round%len(ids)]
		theirs := sys.instancesOf(victim, "crash", instances)
		time.Sleep(rand.N(registry.HeartbeatInterval))
		sys.hosts[victim].Kill()
		took := sys.waitServedElsewhere(victim, theirs, 2*time.Minute)
		worst := slices.Max(append(took, 0))
		recoveries = append(recoveries, worst)
		t.Logf("kill %d: %s (%d of its instances probed) — survivors answered them all %v after the kill (fastest %v); %d calls accepted so far",
			round+1, victim, len(theirs), worst.Round(time.Millisecond), slices.Min(append(took, worst)).Round(time.Millisecond), counts.accepted())
		sys.startHost(victim)
		sys.waitSettled(ids, time.Minute)
		time.Sleep(time.Second)
	}
	counts.finish()
	order.finish()

	slices.Sort(recoveries)
	median := recoveries[len(recoveries)/2]
	t.Logf("kill → survivors answer the dead host's instances: median %v, worst %v over %d kills",
		median.Round(time.Millisecond), recoveries[len(recoveries)-1].Round(time.Millisecond), kills)
	t.Logf("%d count calls accepted, %d of their attempts failed and were retried", counts.accepted(), len(counts.failures))
	if reasons := counts.failureReasons(); reasons != "" {
		t.Logf("failed attempts: %s", reasons)
	}
	// The dead host's requests are redelivered when its partitions are taken over, not after the
	// ack wait (10 s): a median beyond it means they waited for it.
	assert.Less(t, median, 10*time.Second, "the dead host's requests waited for the ack wait")
	assert.Empty(t, counts.failures, "callers with an Idempotency-Key saw errors: %s", counts.failureReasons())
	counts.verify(t)
	order.verify(t)
	sys.noDeadLetters(t, 1)
}

// Under the same load, one of three hosts is stopped with SIGSTOP for 8 s, long enough to be
// taken for dead, then let go on (SIGCONT). The survivors run its requests; when it comes back
// its lease has lapsed, it finds its partitions pinned elsewhere and fences them, and whatever
// its paused handlers still try to write is refused. Counts stay exact (no request completed by
// two hosts), histories keep send order, and the paused host's log names the fencing.
func TestProcessesPausedHostIsFenced(t *testing.T) {
	t.Parallel() // beside the other parallel process tests: most of it is the 8 s pause, and it judges no time
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	ids := []string{"host-1", "host-2", "host-3"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)

	const instances = 48
	counts := startCountLoad(sys, "pause", instances, 16)
	order := startOrderLoad(sys, "order", 16, 25*time.Millisecond)
	time.Sleep(2 * time.Second)

	victim := sys.hosts["host-2"]
	theirs := sys.instancesOf("host-2", "pause", instances)
	victim.Pause()
	took := sys.waitServedElsewhere("host-2", theirs, time.Minute)
	t.Logf("host-2 paused: survivors answered its %d probed instances %v after the pause", len(theirs), slices.Max(append(took, 0)).Round(time.Millisecond))
	time.Sleep(8*time.Second - slices.Max(append(took, 0)))
	victim.Resume()
	sys.waitSettled(ids, time.Minute)
	time.Sleep(2 * time.Second)
	counts.finish()
	order.finish()

	t.Logf("%d count calls accepted, %d of their attempts failed and were retried", counts.accepted(), len(counts.failures))
	if reasons := counts.failureReasons(); reasons != "" {
		t.Logf("failed attempts: %s", reasons)
	}
	log := victim.Log()
	t.Logf("paused host's log: %d partitions fenced, %d late acts refused", strings.Count(log, "partition fenced"), strings.Count(log, "late act refused"))
	assert.Contains(t, log, "heartbeat lease lapsed", "the paused host did not notice its lease lapsed")
	assert.Contains(t, log, "partition fenced", "the paused host fenced no partition")
	counts.verify(t)
	order.verify(t)
	sys.noDeadLetters(t, 1)
}

// instancesOf returns the instances prefix-0 … prefix-(n-1) that host serves now.
func (s *system) instancesOf(host, prefix string, n int) []string {
	s.t.Helper()
	return s.instancesOfOn(echoWF, host, prefix, n)
}

// instancesOfOn is instancesOf for the agent of wf, whose host method answers host.
func (s *system) instancesOfOn(wf, host, prefix string, n int) []string {
	s.t.Helper()
	ctx := proctest.Context(s.t, time.Minute)
	var (
		mu   sync.Mutex
		mine []string
		wg   sync.WaitGroup
	)
	for i := range n {
		a := fmt.Sprintf("%s-%d", prefix, i)
		wg.Go(func() {
			h, err := s.hostOfOn(ctx, wf, a)
			if err == nil && h == host {
				mu.Lock()
				mine = append(mine, a)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return mine
}

// waitServedElsewhere calls each instance until a host other than dead answers it, and returns,
// per instance, the time from now until then.
func (s *system) waitServedElsewhere(dead string, instances []string, within time.Duration) []time.Duration {
	s.t.Helper()
	ctx := proctest.Context(s.t, within)
	start := time.Now()
	took := make([]time.Duration, len(instances))
	var wg sync.WaitGroup
	for i, a := range instances {
		wg.Go(func() {
			for ctx.Err() == nil {
				if h, err := s.hostOf(ctx, a); err == nil && h != dead {
					took[i] = time.Since(start)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			assert.Failf(s.t, "not answered elsewhere", "instance %s not answered by another host within %v", a, within)
		})
	}
	wg.Wait()
	return took
}

// noDeadLetters checks that no request was given up. Right after nodes were killed, the
// cluster may take a while to answer the stream updates of bus.Ensure (seen: over 30 s once on
// two busy cores), hence the long bound.
func (s *system) noDeadLetters(t *testing.T, replicas int) {
	t.Helper()
	ctx := proctest.Context(t, 90*time.Second)
	// Tried again until ctx ends: a cluster that has just elected leaders may not answer at once.
	var letters []deadletter.Letter
	err := retry(ctx, func() error {
		res, err := bus.Ensure(ctx, s.js, bus.Config{Partitions: partitions, Replicas: replicas})
		if err != nil {
			return err
		}
		// Each listing within 10 s: an answer lost in an election costs one try, not the wait.
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		letters, _, err = deadletter.NewStore(res, bus.NewBlobs(res.Claims, 1<<20)).List(lctx, "default", deadletter.ListOptions{})
		return err
	})
	require.NoError(t, err, "listing dead letters")
	for _, l := range letters {
		t.Logf("dead letter %d: %s %s %s after %d attempts: %s", l.ID, l.WorkflowID, l.Type, l.Method, l.Attempts, l.Error)
	}
	assert.Empty(t, letters, "requests were dead-lettered")
}
