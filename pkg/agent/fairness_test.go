package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/fairshare"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// slowAgent is an agent whose Data method work sleeps, then records which request of its
// conversation it was (its parameter n) and when it ended, by tenant.
type slowAgent struct {
	name string
	// sleep is how long each handler sleeps, in nanoseconds; a test that has measured what it
	// needs sets it to 0 so that the rest of a backlog drains at once.
	sleep atomic.Int64
	// gate, when set, holds every handler until it is closed.
	gate chan struct{}

	mu    sync.Mutex
	order map[string][]int       // by tenant, workflow and participant: each request's n, as handled
	ended map[string][]time.Time // by tenant: when each request ended
	conc  map[string]int         // by tenant: handlers running now
	peak  map[string]int         // by tenant: the most handlers that ran at once
}

func newSlowAgent(name string, sleep time.Duration) *slowAgent {
	a := &slowAgent{name: name, order: map[string][]int{}, ended: map[string][]time.Time{},
		conc: map[string]int{}, peak: map[string]int{}}
	a.sleep.Store(int64(sleep))
	return a
}

func (a *slowAgent) agent(opts ...agent.Option) *agent.Agent {
	ag := agent.New(a.name, opts...)
	ag.DataFunc("work", func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		var in struct {
			N int `json:"n"`
		}
		if err := json.Unmarshal(m.Data, &in); err != nil {
			return agent.Reply{}, err
		}
		inst := m.Instance()
		tenant := inst.Tenant()
		a.mu.Lock()
		a.conc[tenant]++
		a.peak[tenant] = max(a.peak[tenant], a.conc[tenant])
		a.mu.Unlock()
		if a.gate != nil {
			<-a.gate
		}
		time.Sleep(time.Duration(a.sleep.Load()))
		a.mu.Lock()
		defer a.mu.Unlock()
		a.conc[tenant]--
		conv := tenant + "/" + inst.WorkflowID() + "/" + m.ParticipantID
		a.order[conv] = append(a.order[conv], in.N)
		a.ended[tenant] = append(a.ended[tenant], time.Now())
		return agent.Answer(map[string]int{"n": in.N}), nil
	})
	return ag
}

// handled counts the tenant's requests handled so far.
func (a *slowAgent) handled(tenant string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ended[tenant])
}

// endedWithin counts the tenant's requests that ended in [from, to).
func (a *slowAgent) endedWithin(tenant string, from, to time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, at := range a.ended[tenant] {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// sendWork sends the agent's Data method work with n to a conversation of the tenant (its
// activation and participant), as the tenant's admin with key: with wait, the call waits for the
// answer (send's wait=true); without, it is answered 202 once the request is stored. It may run
// on goroutines other than the test's.
func sendWork(t *testing.T, s *stacktest.Stack, key, tenant, agentName, activation, participant string, n int, wait bool) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"agentName": agentName, "activationName": activation, "participantId": participant,
		"type": "Data", "text": "work", "data": map[string]int{"n": n}})
	if !assert.NoError(t, err) {
		return 0, nil
	}
	u := s.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/send"
	if wait {
		u += "?wait=true"
	}
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if !assert.NoError(t, err) {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if !assert.NoError(t, err) {
		return 0, nil
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

// backlog sends count requests of the tenant without waiting for their answers, each to a
// conversation of its own, from 16 clients.
func backlog(t *testing.T, s *stacktest.Stack, key, tenant, agentName, prefix string, count int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				status, b := sendWork(t, s, key, tenant, agentName, prefix+strconv.Itoa(i), "p", 1, false)
				assert.Equal(t, http.StatusAccepted, status, "send: %s", b)
			}
		})
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
}

// backlogSize is how many requests tenant A queues in TestTenantsTakeTurnsForSlots: 800 by
// default, a 10 s backlog; AGENTBUS_FAIRNESS_BACKLOG sets another (8000 is a 100 s backlog).
func backlogSize(t *testing.T) int {
	t.Helper()
	v := os.Getenv("AGENTBUS_FAIRNESS_BACKLOG")
	if v == "" {
		return 800
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "AGENTBUS_FAIRNESS_BACKLOG")
	return n
}

// An agent with 8 handler slots, whose method takes 100 ms: tenant A queues a backlog of
// requests (800 by default, 10 s of work), each a conversation of its own, plus one conversation
// of ten requests. Tenant B's 20 concurrent calls made then are each answered long before A's
// backlog could be (about half a second on a quiet machine; judged against half the time the
// least backlog left takes, 2.5 s, so that a busy machine's stalls do not fail it): free slots go
// to the tenants in turn. A's requests all run (the rest of
// them without the sleep once B's calls are answered), and each conversation's in order.
func TestTenantsTakeTurnsForSlots(t *testing.T) {
	const (
		slots  = 8
		sleep  = 100 * time.Millisecond
		bCalls = 20
		seqLen = 10
	)
	count := backlogSize(t)
	sa := newSlowAgent("Slow", sleep)
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{sa.agent()}, Host: agent.HostConfig{MaxConcurrent: slots}})

	start := time.Now()
	var seq sync.WaitGroup
	seq.Go(func() { // one conversation of A with several requests, sent in order
		for n := 1; n <= seqLen; n++ {
			status, b := sendWork(t, s, s.Key, "default", "Slow", "a-seq", "p", n, false)
			assert.Equal(t, http.StatusAccepted, status, "send: %s", b)
		}
	})
	backlog(t, s, s.Key, "default", "Slow", "a-", count)
	seq.Wait()
	t.Logf("tenant A's %d requests accepted in %v; %d handled by then", count+seqLen, time.Since(start).Round(time.Millisecond), sa.handled("default"))
	require.Less(t, sa.handled("default"), count/2, "the backlog is gone before B calls: the test measures nothing")

	took := make([]time.Duration, bCalls)
	var wg sync.WaitGroup
	for i := range bCalls {
		wg.Go(func() {
			t0 := time.Now()
			status, b := sendWork(t, s, s.OtherKey, "other", "Slow", "b-"+strconv.Itoa(i), "p", 1, true)
			took[i] = time.Since(t0)
			assert.Equal(t, http.StatusOK, status, "B's call: %s", b)
		})
	}
	wg.Wait()
	slowest := slices.Max(took)
	t.Logf("tenant B's %d calls answered in %v at the slowest (median %v), while A had %d requests left",
		bCalls, slowest.Round(time.Millisecond), median(took).Round(time.Millisecond), count+seqLen-sa.handled("default"))
	// At least half of A's backlog is left (required above): with the slots in arrival order,
	// B's calls would wait for all of it.
	bound := time.Duration(count/2) * sleep / slots / 2
	assert.Less(t, slowest, bound, "B's calls wait behind A's backlog")

	// B's calls are measured: the rest of A's backlog runs without the sleep, and must still
	// run whole, each request once and each conversation in order.
	sa.sleep.Store(0)
	total := count + seqLen
	waitFor(t, time.Duration(total)*sleep/slots+time.Minute, "every request of A handled", func() bool { return sa.handled("default") >= total })
	t.Logf("all of A's %d requests handled %v after the first was sent", total, time.Since(start).Round(time.Millisecond))
	sa.mu.Lock()
	defer sa.mu.Unlock()
	assert.Equal(t, total, len(sa.ended["default"]), "A's requests handled, each once")
	assert.LessOrEqual(t, sa.peak["default"]+sa.peak["other"], 2*slots) // sanity: tenants count apart
	for conv, order := range sa.order {
		if len(order) > 1 {
			assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, order, "conversation %s out of order", conv)
		}
	}
	assert.Len(t, sa.order, count+1+bCalls, "conversations handled")
}

// weightWindow is how long TestWeightsShareSlots counts completed requests: 5 s by default;
// AGENTBUS_FAIRNESS_WINDOW sets another (a Go duration, such as 30s).
func weightWindow(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("AGENTBUS_FAIRNESS_WINDOW")
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "AGENTBUS_FAIRNESS_WINDOW")
	return d
}

// Under saturation, tenants of weights 3 and 1 (HostConfig.Share) get their requests handled
// 3:1, within 10 %, over a window while both have a backlog.
func TestWeightsShareSlots(t *testing.T) {
	const (
		slots = 8
		sleep = 100 * time.Millisecond
		warm  = time.Second
	)
	window := weightWindow(t)
	sa := newSlowAgent("Slow", sleep)
	weights := map[string]int{"default": 3, "other": 1}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{sa.agent()}, Host: agent.HostConfig{MaxConcurrent: slots,
		Share: func(tenant, agentName string) fairshare.Share {
			assert.Equal(t, "Slow", agentName)
			return fairshare.Share{Weight: weights[tenant]}
		}}})

	// Half as much again as each tenant can have handled by the window's end.
	rate := float64(slots) / sleep.Seconds()
	need := func(weight int) int { return int(1.5 * rate * (warm + window).Seconds() * float64(weight) / 4) }
	var wg sync.WaitGroup
	wg.Go(func() { backlog(t, s, s.Key, "default", "Slow", "a-", need(3)) })
	wg.Go(func() { backlog(t, s, s.OtherKey, "other", "Slow", "b-", need(1)) })
	wg.Wait()

	from := time.Now().Add(warm)
	to := from.Add(window)
	time.Sleep(time.Until(to) + sleep)
	a, b := sa.endedWithin("default", from, to), sa.endedWithin("other", from, to)
	require.Positive(t, b)
	ratio := float64(a) / float64(b)
	t.Logf("over %v: tenant of weight 3 handled %d requests, tenant of weight 1 %d: %.3f:1", window, a, b, ratio)
	assert.InEpsilon(t, 3.0, ratio, 0.10, "weights 3:1")
	assert.Less(t, sa.handled("default"), need(3), "tenant of weight 3 ran out of backlog within the window")
	assert.Less(t, sa.handled("other"), need(1), "tenant of weight 1 ran out of backlog within the window")
}

// An agent with slots of its own (agent.MaxConcurrent) runs at most that many requests at once,
// and the host's other agents, which share the host's slots, answer while its slots are full. A
// tenant's cap (HostConfig.Share's MaxConcurrent) holds within them, while another tenant takes
// the rest.
func TestAgentWithSlotsOfItsOwn(t *testing.T) {
	t.Parallel()
	sa := newSlowAgent("Slow", 0)
	sa.gate = make(chan struct{})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{sa.agent(agent.MaxConcurrent(3)), echo.New()},
		Host: agent.HostConfig{MaxConcurrent: 2, Share: func(tenant, agentName string) fairshare.Share {
			if tenant == "other" && agentName == "Slow" {
				return fairshare.Share{MaxConcurrent: 1}
			}
			return fairshare.Share{}
		}}})
	running := func() (a, b int) {
		sa.mu.Lock()
		defer sa.mu.Unlock()
		return sa.conc["default"], sa.conc["other"]
	}
	// Tenant other's calls first, so that default's cannot take every slot by arriving first:
	// other runs one at a time however many it sends.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			status, b := sendWork(t, s, s.OtherKey, "other", "Slow", "b-"+strconv.Itoa(i), "p", 1, true)
			assert.Equal(t, http.StatusOK, status, "send: %s", b)
		})
	}
	waitFor(t, 10*time.Second, "a call of tenant other runs", func() bool { _, b := running(); return b > 0 })
	for i := range 3 {
		wg.Go(func() {
			status, b := sendWork(t, s, s.Key, "default", "Slow", "a-"+strconv.Itoa(i), "p", 1, true)
			assert.Equal(t, http.StatusOK, status, "send: %s", b)
		})
	}
	waitFor(t, 10*time.Second, "Slow's slots are full", func() bool { a, b := running(); return a+b == 3 })
	a, b := running()
	assert.Equal(t, 1, b, "tenant other's cap")
	assert.Equal(t, 2, a, "tenant default takes the slots other may not")
	for i := range 4 { // more than the host's 2 slots, which Slow does not use
		status, _, body := post(t, s, "default:Echo:Supervisor Workflow:e"+strconv.Itoa(i), "echo", "")
		assert.Equal(t, http.StatusOK, status, "Echo: %s", body)
	}
	a, b = running()
	assert.Equal(t, 3, a+b, "Slow's slots while Echo answered")
	close(sa.gate)
	wg.Wait()
	sa.mu.Lock()
	defer sa.mu.Unlock()
	assert.Equal(t, 1, sa.peak["other"], "tenant other's cap")
	assert.Equal(t, 2, sa.peak["default"])
	assert.Len(t, sa.ended["default"], 3)
	assert.Len(t, sa.ended["other"], 3)
}

func TestMaxConcurrentMustBePositive(t *testing.T) {
	assert.Panics(t, func() { agent.New("Zero", agent.MaxConcurrent(0)) })
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
