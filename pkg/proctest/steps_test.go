package proctest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// Echo's steps makes five durable steps of 500 ms each, whose functions count their runs in the
// instance's state. It runs on twenty instances, ten at a time, each call made by a client with
// an Idempotency-Key of its own that retries it after a 5xx or a connection error; each time the
// host that runs the ten is killed with SIGKILL while all ten are in their third step (their
// states, read through the admin API, count steps 1 to 3 once and step 4 not yet), and the other
// host takes them over: once each way round. Every call is answered 200 with the answer of
// steps 1 and 2 as the killed host's first attempt recorded them, and of steps 3 to 5 from the
// attempt that answered, the second, on the other host. Each attempt starts from the state the
// request found, and a replayed step gives the state back the count it made: the state the
// answering attempt left counts each step once. With what the killed attempt counted, steps 1,
// 2, 4 and 5 ran once and step 3 at most twice.
func TestProcessesStepsSurviveHostKills(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)

	const (
		rounds   = 2
		perRound = 10
		steps    = 5
		killAt   = 3
		sleepMs  = 500
	)
	for round := range rounds {
		victim, survivor := ids[round%len(ids)], ids[(round+1)%len(ids)]
		instances := sys.instancesOn(victim, fmt.Sprintf("steps%d", round), perRound)
		calls := startStepsCalls(sys, instances, steps, sleepMs)
		waited := sys.waitInStep(instances, killAt, time.Minute)
		sys.hosts[victim].Kill()
		killed := time.Now()
		// Read before the survivor takes the requests over (at least DeadAfter less a heartbeat
		// interval after the kill) and undoes the killed attempt's state.
		left := sys.stepCounts(instances)
		answers := calls.wait()
		t.Logf("round %d: %s killed %v after the calls started, with all %d in step %d; answered %v after the kill (slowest); %d attempts failed and were retried%s",
			round+1, victim, waited.Round(time.Millisecond), perRound, killAt, calls.slowest(killed).Round(time.Millisecond), len(calls.failures), calls.reasons())
		final := sys.stepCounts(instances)
		for _, a := range instances {
			checkStepsRun(t, a, victim, survivor, left[a], answers[a], final[a], steps, killAt)
		}
		if round < rounds-1 {
			sys.startHost(victim)
			sys.waitSettled(ids, time.Minute)
		}
	}
	sys.noDeadLetters(t, 1)
}

// checkStepsAnswer checks the answer of one instance's steps call, killed in step killAt on
// victim: the second attempt answered, on survivor, with the steps before killAt replayed from the
// first attempt's run. It reports whether the call was answered.
func checkStepsAnswer(t *testing.T, a, victim, survivor string, answer stepsAnswer, steps, killAt int) bool {
	t.Helper()
	if !assert.Empty(t, answer.err, "%s: the call was not answered", a) {
		return false
	}
	assert.Equal(t, steps, answer.Steps, "%s: the answer's steps", a)
	assert.Equal(t, 2, answer.Attempt, "%s: the answering attempt", a)
	if assert.Len(t, answer.Ran, steps, "%s: the answer's ran", a) {
		for i, r := range answer.Ran {
			want := stepRun{Attempt: 1, HostID: victim}
			if i+1 >= killAt {
				want = stepRun{Attempt: answer.Attempt, HostID: survivor}
			}
			assert.Equal(t, want, r, "%s: the attempt and host whose run gave step %d", a, i+1)
		}
	}
	return true
}

// ones is n ones: the step counts of n steps that each ran once.
func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// checkStepsRun checks one instance's steps call, killed in step killAt on victim: left is the
// state's step counts the killed attempt left, final those after the answer.
func checkStepsRun(t *testing.T, a, victim, survivor string, left []int, answer stepsAnswer, final []int, steps, killAt int) {
	t.Helper()
	assert.Equal(t, ones(killAt), left, "%s: the state's step counts the killed attempt left", a)
	if !checkStepsAnswer(t, a, victim, survivor, answer, steps, killAt) {
		return
	}
	// The answering attempt started from the state the request found, and each step it replayed
	// gave the state back the count the step made: every step is counted once.
	assert.Equal(t, ones(steps), final, "%s: the state's step counts after the answer", a)
	// Runs of each step's function: the killed attempt's (left), and the answering attempt's
	// (its ran entries).
	runs := make([]int, steps)
	for i := range runs {
		if i < len(left) {
			runs[i] += left[i]
		}
		if i < len(answer.Ran) && answer.Ran[i].Attempt == answer.Attempt {
			runs[i]++
		}
	}
	for i, n := range runs {
		switch {
		case i+1 == killAt:
			assert.LessOrEqual(t, n, 2, "%s: step %d's function ran %d times", a, i+1, n)
		default:
			assert.Equal(t, 1, n, "%s: step %d's function ran %d times", a, i+1, n)
		}
	}
}

// stepRun is what Echo's steps answers of a step: the attempt and host that ran it.
type stepRun struct {
	Attempt int    `json:"attempt"`
	HostID  string `json:"hostId"`
}

// stepsAnswer is Echo's answer to steps, or why the call was given up.
type stepsAnswer struct {
	Steps   int       `json:"steps"`
	Attempt int       `json:"attempt"`
	Ran     []stepRun `json:"ran"`
	err     string
}

// stepsCalls are steps calls under way, one per instance, each retried with its key.
type stepsCalls struct {
	wg sync.WaitGroup

	mu       sync.Mutex
	answers  map[string]stepsAnswer
	answered []time.Time
	failures map[string]int // failed attempts by reason
}

// startStepsCalls calls Echo's steps, with n steps of sleepMs each, on every instance at once,
// through converse with an Idempotency-Key, again after a 5xx or a connection error.
func startStepsCalls(sys *system, instances []string, n, sleepMs int) *stepsCalls {
	return startStepsCallsOn(sys, echoWF, instances, n, sleepMs)
}

// startStepsCallsOn is startStepsCalls with the agent of wf (Echo's, or a remote Echo's).
func startStepsCallsOn(sys *system, wf string, instances []string, n, sleepMs int) *stepsCalls {
	c := &stepsCalls{answers: map[string]stepsAnswer{}, failures: map[string]int{}}
	run := time.Now().UnixNano()
	for _, a := range instances {
		c.wg.Go(func() {
			key := fmt.Sprintf("steps-%d-%s", run, a)
			b, err := untilAnswered(context.Background(), 2*time.Minute, func(ctx context.Context) (int, []byte, error) {
				return sys.converseOn(ctx, wf, a, "steps", map[string]int{"n": n, "sleepMs": sleepMs}, nil, "Idempotency-Key", key)
			}, c.failed)
			var reply struct {
				Response struct {
					Data stepsAnswer `json:"data"`
				} `json:"response"`
			}
			if err == nil {
				err = json.Unmarshal(b, &reply)
			}
			if err != nil {
				reply.Response.Data.err = err.Error()
			}
			c.mu.Lock()
			c.answers[a] = reply.Response.Data
			c.answered = append(c.answered, time.Now())
			c.mu.Unlock()
		})
	}
	return c
}

func (c *stepsCalls) failed(reason string) {
	c.mu.Lock()
	c.failures[reason]++
	c.mu.Unlock()
}

// wait waits until every call was answered or given up, and returns the answers by instance.
func (c *stepsCalls) wait() map[string]stepsAnswer {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answers
}

// slowest returns how long after since the last call was answered.
func (c *stepsCalls) slowest(since time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.answered) == 0 {
		return 0
	}
	return slices.MaxFunc(c.answered, time.Time.Compare).Sub(since)
}

// reasons lists the failed attempts' reasons, after a colon; empty when none failed.
func (c *stepsCalls) reasons() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) == 0 {
		return ""
	}
	return ": " + formatReasons(c.failures)
}

// waitInStep reads the instances' states until all of them are in step n of Echo's steps at
// once: the state counts steps 1 to n once each and no step after n. It fails the test when one
// of them went past step n first, or after within, and returns how long it waited.
func (s *system) waitInStep(instances []string, n int, within time.Duration) time.Duration {
	s.t.Helper()
	ctx := proctest.Context(s.t, within)
	start := time.Now()
	want := ones(n)
	for {
		counts := s.stepCountsCtx(ctx, echoWF, instances)
		require.NoError(s.t, ctx.Err(), "the instances were not all in step %d within %v: %v", n, within, counts)
		all := true
		for _, a := range instances {
			c := counts[a]
			require.LessOrEqual(s.t, len(c), n, "%s went past step %d (step counts %v) before all %d instances were in it", a, n, c, len(instances))
			all = all && slices.Equal(c, want)
		}
		if all {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stepCounts reads the step counts (Echo's state "steps") of the instances.
func (s *system) stepCounts(instances []string) map[string][]int {
	s.t.Helper()
	return s.stepCountsOn(echoWF, instances)
}

// stepCountsOn is stepCounts of the agent of wf (Echo's, or a remote Echo's).
func (s *system) stepCountsOn(wf string, instances []string) map[string][]int {
	s.t.Helper()
	ctx := proctest.Context(s.t, time.Minute)
	counts := s.stepCountsCtx(ctx, wf, instances)
	for _, a := range instances {
		_, ok := counts[a]
		require.True(s.t, ok, "the state of %s could not be read", a)
	}
	return counts
}

// stepCountsCtx reads the step counts of the agent of wf's instances at once, each from the
// admin API's instance record, again after a failed read until ctx ends; an instance whose state
// could not be read is left out.
func (s *system) stepCountsCtx(ctx context.Context, wf string, instances []string) map[string][]int {
	var (
		mu     sync.Mutex
		counts = map[string][]int{}
		wg     sync.WaitGroup
	)
	for _, a := range instances {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := s.instanceStepCounts(ctx, wf, a)
				if err == nil {
					mu.Lock()
					counts[a] = c
					mu.Unlock()
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return counts
}

// instanceStepCounts reads Echo's state "steps" of the instance wf+activation from the admin
// API, which reads the instance record: it does not wait for the instance's requests.
func (s *system) instanceStepCounts(ctx context.Context, wf, activation string) ([]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		s.ingress.URL+"/api/v1/admin/tenants/default/instances/"+url.PathEscape(wf+activation), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, unwrapURL(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading %s: %d %s", activation, resp.StatusCode, b)
	}
	var inst struct {
		State *struct {
			Steps []int `json:"steps"`
		} `json:"state"`
	}
	if err := json.Unmarshal(b, &inst); err != nil {
		return nil, err
	}
	if inst.State == nil || inst.State.Steps == nil {
		return []int{}, nil
	}
	return inst.State.Steps, nil
}
