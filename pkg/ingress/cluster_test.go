package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// clusterResult is what one webhook call got.
type clusterResult struct {
	status int
	count  int
	body   string
	err    error
}

// A three-node JetStream cluster loses the node leading the inbox in the middle of a load of
// webhook calls. Every call that was accepted is executed exactly once: callers that got no
// answer retry with their Idempotency-Key and get the original result, and the counter ends at
// exactly the number of calls.
func TestNoAcceptedRequestLostWhenANodeDies(t *testing.T) {
	if testing.Short() || os.Getenv("AGENTBUS_CLUSTER_TEST") == "" {
		// Not yet in the default run: it still fails about one run in eight (see the closing
		// note of 2026-11-22); run it with AGENTBUS_CLUSTER_TEST=1.
		t.Skip("starts a three-node NATS cluster and kills a node; set AGENTBUS_CLUSTER_TEST=1")
	}
	const (
		n       = 200
		workers = 8
		killAt  = 50
	)
	begin := time.Now()
	cl := natstest.NewCluster(t, 3)
	t.Logf("cluster formed in %v", time.Since(begin))

	busCfg := bus.Config{Replicas: 3, Partitions: 4}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ncI, err := bus.Connect(cl.URLs(), "ingress", stacktest.Logger())
	require.NoError(t, err)
	t.Cleanup(ncI.Close)
	srv, err := ingress.New(ctx, ingress.Config{Conn: ncI, Bus: busCfg, WebhookTimeout: 5 * time.Second, Logger: stacktest.Logger()})
	require.NoError(t, err, "starting ingress")
	t.Cleanup(func() { _ = srv.Close() })

	ncH, err := bus.Connect(cl.URLs(), "host", stacktest.Logger())
	require.NoError(t, err)
	t.Cleanup(ncH.Close)
	host, err := agent.NewHost(agent.HostConfig{Conn: ncH, Agents: []*agent.Agent{echo.New()}, Bus: busCfg,
		ShutdownGrace: 10 * time.Second, Logger: stacktest.Logger()})
	require.NoError(t, err)
	hctx, stopHost := context.WithCancel(context.Background())
	hostDone := make(chan error, 1)
	go func() { hostDone <- host.Run(hctx) }()
	t.Cleanup(func() {
		stopHost()
		assert.NoError(t, <-hostDone, "host")
	})
	select {
	case <-host.Ready():
	case err := <-hostDone:
		hostDone <- err
		require.Failf(t, "host did not start", "%v", err)
	case <-ctx.Done():
		require.FailNow(t, "host not ready in time")
	}

	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	js, err := jetstream.New(ncI)
	require.NoError(t, err)
	res, err := bus.Ensure(ctx, js, busCfg)
	require.NoError(t, err)
	ks := keys.NewStore(res.Keys, res.Tenants)
	require.NoError(t, ks.EnsureTenant(ctx, "default"))
	key, _, err := ks.Create(ctx, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "test"})
	require.NoError(t, err)
	for !srv.KeyKnown(key) || !srv.AgentLive("Echo") {
		require.NoError(t, ctx.Err(), "key known %v, Echo live %v", srv.KeyKnown(key), srv.AgentLive("Echo"))
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("stack ready after %v", time.Since(begin))

	client := &http.Client{Timeout: 30 * time.Second}
	wf := url.PathEscape("default:Echo:Supervisor Workflow:c")
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	idem := func(i int) string { return fmt.Sprintf("cluster-%s-%d", runID, i) }
	do := func(i int, idemKey string) clusterResult {
		u := fmt.Sprintf("%s/api/user/webhooks/%s/count?apikey=%s&participantId=p%d", hs.URL, wf, url.QueryEscape(key), i%10)
		req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(nil))
		if err != nil {
			return clusterResult{err: err}
		}
		req.Header.Set("Idempotency-Key", idemKey)
		resp, err := client.Do(req)
		if err != nil {
			return clusterResult{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		r := clusterResult{status: resp.StatusCode, body: string(b), err: err}
		if resp.StatusCode == http.StatusOK {
			var m struct {
				Count int `json:"count"`
			}
			if err := json.Unmarshal(b, &m); err != nil {
				r.err = fmt.Errorf("decoding %q: %w", b, err)
			}
			r.count = m.Count
		}
		return r
	}

	// The load, with the inbox leader killed after killAt answers.
	results := make([]clusterResult, n)
	jobs := make(chan int)
	var answered atomic.Int32
	killNow := make(chan struct{})
	var killOnce sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				results[i] = do(i, idem(i))
				if answered.Add(1) == killAt {
					killOnce.Do(func() { close(killNow) })
				}
			}
		})
	}
	var killed string
	var killedAt time.Time
	killDone := make(chan struct{})
	go func() {
		defer close(killDone)
		<-killNow
		ictx, icancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer icancel()
		// Not the test's goroutine: assert, and return on failure.
		info, err := res.Inbox.Info(ictx)
		if !assert.NoError(t, err, "finding the inbox leader") ||
			!assert.True(t, info.Cluster != nil && info.Cluster.Leader != "", "finding the inbox leader: %+v", info) {
			return
		}
		killed = info.Cluster.Leader
		i := cl.Index(killed)
		if !assert.GreaterOrEqual(t, i, 0, "inbox leader %q is not a cluster server", killed) {
			return
		}
		killedAt = time.Now()
		cl.Kill(i)
	}()
	loadStart := time.Now()
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	loadTime := time.Since(loadStart)
	killOnce.Do(func() { close(killNow) })
	<-killDone
	t.Logf("load of %d calls took %v; killed %s (inbox leader) %v into it", n, loadTime, killed, killedAt.Sub(loadStart))

	var firstStatus func([]clusterResult, []int) []string
	statuses := map[string]int{}
	var failed []int
	for i, r := range results {
		switch {
		case r.err != nil:
			statuses["error"]++
		default:
			statuses[fmt.Sprint(r.status)]++
		}
		if r.err != nil || r.status != http.StatusOK {
			failed = append(failed, i)
		}
	}
	first := make([]clusterResult, n)
	copy(first, results)
	firstStatus = func(_ []clusterResult, idx []int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, fmt.Sprintf("%d:%d", i, first[i].status))
		}
		return out
	}
	t.Logf("first answers: %v", statuses)

	// Retry every call without a 200 under its own Idempotency-Key.
	retryStart := time.Now()
	deadline := retryStart.Add(60 * time.Second)
	retries := 0
	var final500 []int // accepted calls whose stored result is the handler's 500
	for _, i := range failed {
		same500 := 0
		for {
			r := do(i, idem(i))
			retries++
			if r.err == nil && r.status == http.StatusOK {
				results[i] = r
				break
			}
			if r.err == nil && r.status == http.StatusInternalServerError {
				// The handler's own answer, kept for the Idempotency-Key: it will not change.
				if same500++; same500 == 3 {
					final500 = append(final500, i)
					results[i] = r
					break
				}
			}
			if time.Now().After(deadline) {
				dumpInbox(t, res)
				require.FailNowf(t, "a call still fails after the retry deadline", "call %d: %d %v %.200s", i, r.status, r.err, r.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("%d calls retried (%d attempts) in %v", len(failed), retries, time.Since(retryStart))

	// Every call got a distinct count: 1..n, each exactly once.
	counts := make([]int, 0, n)
	for _, r := range results {
		if r.status == http.StatusOK {
			counts = append(counts, r.count)
		}
	}
	sort.Ints(counts)
	assert.Empty(t, final500, "accepted calls ended with a stored 500 from the handler, returned again on every retry (first answers %v)", firstStatus(results, final500))
	for i, c := range counts {
		if len(final500) == 0 && c != i+1 {
			seen := map[int]int{}
			for _, c := range counts {
				seen[c]++
			}
			var dup, missing []int
			for v := 1; v <= n; v++ {
				if seen[v] == 0 {
					missing = append(missing, v)
				}
			}
			for v, k := range seen {
				if k > 1 || v < 1 || v > n {
					dup = append(dup, v)
				}
			}
			sort.Ints(dup)
			require.FailNowf(t, fmt.Sprintf("counts returned are not 1..%d", n), "duplicated or out of range %v, missing %v", dup, missing)
		}
	}

	// One more call: the counter is exactly n+1.
	var last clusterResult
	for {
		last = do(0, idem(n))
		if last.err == nil && last.status == http.StatusOK {
			break
		}
		require.False(t, time.Now().After(deadline), "final call: %d %v %.200s", last.status, last.err, last.body)
		time.Sleep(200 * time.Millisecond)
	}
	require.NotEmpty(t, counts, "no call was answered 200")
	t.Logf("200 answers carried %d distinct counts, highest %d", len(counts), counts[len(counts)-1])
	require.Equal(t, n+1, last.count, "final count: requests lost or executed twice")
	t.Logf("total %v; final count %d", time.Since(begin), last.count)
}

// dumpInbox logs the state of the inbox and its consumers, to tell where a request is stuck.
func dumpInbox(t *testing.T, res *bus.Resources) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := res.Inbox.Info(ctx)
	if err != nil {
		t.Logf("inbox info: %v", err)
		return
	}
	t.Logf("inbox: msgs %d first %d last %d leader %s replicas %+v", info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.Cluster.Leader, info.Cluster.Replicas)
	lister := res.Inbox.ListConsumers(ctx)
	for ci := range lister.Info() {
		t.Logf("consumer %s: pending %d ackPending %d redelivered %d waiting %d delivered %+v ackFloor %+v leader %s pinned %+v",
			ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered, ci.AckFloor, ci.Cluster.Leader, ci.PriorityGroups)
	}
	if err := lister.Err(); err != nil {
		t.Logf("listing consumers: %v", err)
	}
}
