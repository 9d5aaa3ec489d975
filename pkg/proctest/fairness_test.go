package proctest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/remote/remotetest"
)

// A remote agent of two tenants, with 8 slots (maxConcurrent) and a method that takes 100 ms,
// served by a workflow host process behind an ingress process: tenant A queues 400 requests
// (5 s of work; AGENTBUS_FAIRNESS_BACKLOG sets another number), each a conversation of its own,
// plus one conversation of ten; tenant B's 20 concurrent calls made then are each answered
// within a second, not after A's backlog. Every request of A is handled, each conversation's in
// order. The host's resident memory before the backlog and while it holds it is printed.
func TestProcessesTenantsTakeTurnsForSlots(t *testing.T) {
	const (
		slots   = 8
		sleepMS = 100
		bCalls  = 20
		seqLen  = 10
	)
	backlog := 400
	if v := os.Getenv("AGENTBUS_FAIRNESS_BACKLOG"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "AGENTBUS_FAIRNESS_BACKLOG")
		backlog = n
	}
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	ctx := proctest.Context(t, 3*time.Minute)
	otherKey := sys.tenantKey(ctx, "other", "tenant-admin")

	ep := sys.registerSleeper(ctx, t, "Slow", slots)
	sleep := func(tenant, key, activation string, n int, wait bool) (int, []byte, error) {
		return sys.sleep(ctx, "Slow", tenant, key, activation, sleepMS, n, wait)
	}
	rssBefore, err := sys.hosts["host-1"].RSS()
	require.NoError(t, err)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { // one conversation of A with several requests, sent in order
		for n := 1; n <= seqLen; n++ {
			status, b, err := sleep("default", sys.key, "a-seq", n, false)
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusAccepted, status, "send: %s", b)
			}
		}
	})
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				status, b, err := sleep("default", sys.key, "a-"+strconv.Itoa(i), 1, false)
				if assert.NoError(t, err) {
					assert.Equal(t, http.StatusAccepted, status, "send: %s", b)
				}
			}
		})
	}
	for i := range backlog {
		next <- i
	}
	close(next)
	wg.Wait()
	handled := func(tenant string) int {
		n := 0
		for conv, ns := range ep.Slept() {
			if len(conv) > len(tenant) && conv[:len(tenant)+1] == tenant+" " {
				n += len(ns)
			}
		}
		return n
	}
	t.Logf("tenant A's %d requests accepted in %v; %d handled by then", backlog+seqLen, time.Since(start).Round(time.Millisecond), handled("default"))
	require.Less(t, handled("default"), backlog/2, "the backlog is gone before B calls: the test measures nothing")
	time.Sleep(time.Second) // the host pulls the backlog
	if rss, err := sys.hosts["host-1"].RSS(); err == nil {
		t.Logf("the host's resident memory: %.1f MiB before the backlog, %.1f MiB holding it", float64(rssBefore)/(1<<20), float64(rss)/(1<<20))
	}

	sorted := callsAtOnce(t, bCalls, func(i int) (int, []byte, error) {
		return sleep("other", otherKey, "b-"+strconv.Itoa(i), 1, true)
	})
	t.Logf("tenant B's %d calls answered in %v at the slowest (median %v), while A had %d requests left",
		bCalls, sorted[bCalls-1].Round(time.Millisecond), sorted[bCalls/2].Round(time.Millisecond), backlog+seqLen-handled("default"))
	assert.Less(t, sorted[bCalls-1], time.Second, "B's calls wait behind A's backlog")

	deadline := time.Now().Add(time.Minute + time.Duration(backlog)*sleepMS*time.Millisecond/slots)
	for handled("default") < backlog+seqLen && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("all of A's requests handled %v after the first was sent", time.Since(start).Round(time.Millisecond))
	slept := ep.Slept()
	assert.Equal(t, backlog+seqLen, handled("default"), "A's requests handled, each once")
	assert.Len(t, slept, backlog+1+bCalls, "conversations handled")
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, slept["default default:Slow:Supervisor Workflow:a-seq p"], "A's conversation of several requests, in order")
}

// tenantKey creates the tenant (if it is not there) and a key of it with role, and returns the
// key.
func (s *system) tenantKey(ctx context.Context, tenant, role string) string {
	s.t.Helper()
	status, b := s.do(ctx, http.MethodPost, "/api/v1/admin/tenants", adminKey, fmt.Sprintf(`{"id":%q}`, tenant))
	require.Contains(s.t, []int{http.StatusCreated, http.StatusOK, http.StatusConflict}, status, "creating the tenant: %s", b)
	status, b = s.do(ctx, http.MethodPost, "/api/v1/admin/tenants/"+tenant+"/keys", adminKey, fmt.Sprintf(`{"name":"proctest","role":%q}`, role))
	require.Equal(s.t, http.StatusCreated, status, "creating a key: %s", b)
	var k struct {
		Key string `json:"key"`
	}
	require.NoError(s.t, json.Unmarshal(b, &k))
	return k.Key
}

// sendAs posts a message through the admin send endpoint of the tenant with its key and returns
// the status and body; with wait, the call waits for the handler's answer.
// callsAtOnce makes n calls at once, each of which must be answered 200, and returns how long
// each took, the quickest first.
func callsAtOnce(t *testing.T, n int, call func(i int) (int, []byte, error)) []time.Duration {
	t.Helper()
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t0 := time.Now()
			status, b, err := call(i)
			took[i] = time.Since(t0)
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusOK, status, "call %d: %s", i, b)
			}
		})
	}
	wg.Wait()
	slices.Sort(took)
	return took
}

// registerSleeper registers a remote agent of tenants default and other with the methods of
// remotetest's endpoint and its Data method sleep (remotetest.Sleep), the given slots
// (maxConcurrent), and waits until it answers.
func (s *system) registerSleeper(ctx context.Context, t *testing.T, name string, slots int) *remotetest.Endpoint {
	t.Helper()
	ep := remotetest.New(t, remotetest.Faults{})
	reg := ep.Registration(name)
	reg.Methods = append(reg.Methods, remotetest.Sleep)
	reg.Tenants = []string{"default", "other"}
	reg.MaxConcurrent = slots
	body, err := json.Marshal(reg)
	require.NoError(t, err)
	start := time.Now()
	status, b := s.do(ctx, http.MethodPost, "/api/v1/admin/agents", adminKey, string(body))
	require.Equal(t, http.StatusCreated, status, "registering the agent: %s", b)
	for {
		status, b, err := s.webhookOn(ctx, "default:"+name+":Supervisor Workflow:", "ready-probe", "echo", nil)
		if err == nil && status == http.StatusOK {
			return ep
		}
		require.Less(t, time.Since(start), 20*time.Second, "the agent does not answer (last: %d %s %v)", status, b, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// sleep sends a sleeper's (registerSleeper) Data method sleep for ms milliseconds, noting n, to
// an activation of the tenant, waiting for its answer or not.
func (s *system) sleep(ctx context.Context, agentName, tenant, key, activation string, ms, n int, wait bool) (int, []byte, error) {
	return s.sendAs(ctx, tenant, key, wait, map[string]any{"agentName": agentName, "activationName": activation, "participantId": "p",
		"type": "Data", "text": "sleep", "data": map[string]int{"ms": ms, "n": n}})
}

func (s *system) sendAs(ctx context.Context, tenant, key string, wait bool, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	u := s.ingress.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/send"
	if wait {
		u += "?wait=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, unwrapURL(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}
