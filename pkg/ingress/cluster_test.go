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
	"slices"
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

// The load of TestNoAcceptedRequestLostWhenANodeDies: calls, the goroutines making them, and
// after how many answers the inbox leader is killed.
const (
	clusterCalls   = 200
	clusterWorkers = 8
	clusterKillAt  = 50
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
		// Off by default: it starts three NATS servers and kills one, which takes 6-25 s
		// (docs/development.md#what-ci-runs).
		t.Skip("starts a three-node NATS cluster and kills a node; set AGENTBUS_CLUSTER_TEST=1")
	}
	begin := time.Now()
	cs := startClusterStack(t)
	t.Logf("stack ready after %v", time.Since(begin))
	c := newClusterCaller(cs)

	results := loadKillingInboxLeader(t, cs, c)
	first := slices.Clone(results)
	var failed []int
	statuses := map[string]int{}
	for i, r := range results {
		if r.err != nil {
			statuses["error"]++
		} else {
			statuses[fmt.Sprint(r.status)]++
		}
		if r.err != nil || r.status != http.StatusOK {
			failed = append(failed, i)
		}
	}
	t.Logf("first answers: %v", statuses)

	deadline := time.Now().Add(60 * time.Second)
	final500 := retryFailedCalls(t, cs, c, results, failed, deadline)
	assert.Empty(t, final500, "accepted calls ended with a stored 500 from the handler, returned again on every retry (first answers %v)", firstStatus(first, final500))
	counts := clusterCounts(results)
	if len(final500) == 0 {
		checkEachCountOnce(t, counts)
	}

	// One more call: the counter is exactly clusterCalls+1.
	var last clusterResult
	for {
		last = c.do(0, c.idem(clusterCalls))
		if last.err == nil && last.status == http.StatusOK {
			break
		}
		require.False(t, time.Now().After(deadline), "final call: %d %v %.200s", last.status, last.err, last.body)
		time.Sleep(200 * time.Millisecond)
	}
	require.NotEmpty(t, counts, "no call was answered 200")
	t.Logf("200 answers carried %d distinct counts, highest %d", len(counts), counts[len(counts)-1])
	require.Equal(t, clusterCalls+1, last.count, "final count: requests lost or executed twice")
	t.Logf("total %v; final count %d", time.Since(begin), last.count)
}

// clusterStack is an ingress and a workflow host running Echo on a three-node JetStream cluster,
// the ingress served over HTTP at URL, with a tenant-admin key of tenant "default".
type clusterStack struct {
	cl  *natstest.Cluster
	res *bus.Resources
	URL string
	key string
}

// startClusterStack starts the cluster, the ingress and the host, and makes the key; it returns
// once the ingress knows the key and sees Echo live.
func startClusterStack(t *testing.T) *clusterStack {
	t.Helper()
	begin := time.Now()
	cl := natstest.NewCluster(t, 3)
	t.Logf("cluster formed in %v", time.Since(begin))
	busCfg := bus.Config{Replicas: 3, Partitions: 4}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ncI, err := bus.Connect(cl.URLs(), "ingress", stacktest.Logger(t))
	require.NoError(t, err)
	t.Cleanup(ncI.Close)
	srv, err := ingress.New(ctx, ingress.Config{Conn: ncI, Bus: busCfg, WebhookTimeout: 5 * time.Second, Logger: stacktest.Logger(t)})
	require.NoError(t, err, "starting ingress")
	t.Cleanup(func() { _ = srv.Close() })
	startClusterHost(t, ctx, cl, busCfg)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	js, err := jetstream.New(ncI)
	require.NoError(t, err)
	res, err := bus.Ensure(ctx, js, busCfg)
	require.NoError(t, err)
	ks := keys.NewStore(res.JS, res.Keys, res.Tenants)
	require.NoError(t, ks.EnsureTenant(ctx, "default"))
	key, _, err := ks.Create(ctx, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "test"})
	require.NoError(t, err)
	for !srv.KeyKnown(key) || !srv.AgentLive("Echo") {
		require.NoError(t, ctx.Err(), "key known %v, Echo live %v", srv.KeyKnown(key), srv.AgentLive("Echo"))
		time.Sleep(20 * time.Millisecond)
	}
	return &clusterStack{cl: cl, res: res, URL: hs.URL, key: key}
}

// startClusterHost runs a workflow host with Echo on its own connection to the cluster until the
// test ends, and waits until it is ready.
func startClusterHost(t *testing.T, ctx context.Context, cl *natstest.Cluster, busCfg bus.Config) {
	t.Helper()
	ncH, err := bus.Connect(cl.URLs(), "host", stacktest.Logger(t))
	require.NoError(t, err)
	t.Cleanup(ncH.Close)
	host, err := agent.NewHost(agent.HostConfig{Conn: ncH, Agents: []*agent.Agent{echo.New()}, Bus: busCfg,
		ShutdownGrace: 10 * time.Second, Logger: stacktest.Logger(t)})
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
}

// clusterCaller makes the test's calls: Echo's count, in ten conversations, each call with an
// Idempotency-Key of this run. Its methods run outside the test's goroutine and return errors.
type clusterCaller struct {
	client *http.Client
	url    string
	key    string
	runID  string
}

func newClusterCaller(cs *clusterStack) *clusterCaller {
	return &clusterCaller{
		client: &http.Client{Timeout: 30 * time.Second},
		url:    cs.URL + "/api/user/webhooks/" + url.PathEscape("default:Echo:Supervisor Workflow:c") + "/count",
		key:    cs.key,
		runID:  fmt.Sprintf("%d", time.Now().UnixNano()),
	}
}

// idem is the Idempotency-Key of call i.
func (c *clusterCaller) idem(i int) string { return fmt.Sprintf("cluster-%s-%d", c.runID, i) }

// do makes call i with the Idempotency-Key idemKey.
func (c *clusterCaller) do(i int, idemKey string) clusterResult {
	u := fmt.Sprintf("%s?apikey=%s&participantId=p%d", c.url, url.QueryEscape(c.key), i%10)
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(nil))
	if err != nil {
		return clusterResult{err: err}
	}
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := c.client.Do(req)
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

// loadKillingInboxLeader makes every call once, from clusterWorkers goroutines, and kills the
// inbox leader after clusterKillAt answers. It returns what each call got.
func loadKillingInboxLeader(t *testing.T, cs *clusterStack, c *clusterCaller) []clusterResult {
	t.Helper()
	results := make([]clusterResult, clusterCalls)
	jobs := make(chan int)
	var answered atomic.Int32
	killNow := make(chan struct{})
	var killOnce sync.Once
	var wg sync.WaitGroup
	for range clusterWorkers {
		wg.Go(func() {
			for i := range jobs {
				results[i] = c.do(i, c.idem(i))
				if answered.Add(1) == clusterKillAt {
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
		killed, killedAt = killInboxLeader(t, cs)
	}()
	loadStart := time.Now()
	for i := range clusterCalls {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	loadTime := time.Since(loadStart)
	killOnce.Do(func() { close(killNow) })
	<-killDone
	t.Logf("load of %d calls took %v; killed %s (inbox leader) %v into it", clusterCalls, loadTime, killed, killedAt.Sub(loadStart))
	return results
}

// killInboxLeader kills the cluster's server leading the inbox and returns its name and when.
// It runs outside the test's goroutine: it asserts, and returns on failure.
func killInboxLeader(t *testing.T, cs *clusterStack) (string, time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	inbox, err := cs.res.InboxOf(ctx, "Echo")
	if !assert.NoError(t, err, "finding the inbox leader") {
		return "", time.Time{}
	}
	info, err := inbox.Info(ctx)
	if !assert.NoError(t, err, "finding the inbox leader") ||
		!assert.True(t, info.Cluster != nil && info.Cluster.Leader != "", "finding the inbox leader: %+v", info) {
		return "", time.Time{}
	}
	killed := info.Cluster.Leader
	i := cs.cl.Index(killed)
	if !assert.GreaterOrEqual(t, i, 0, "inbox leader %q is not a cluster server", killed) {
		return killed, time.Time{}
	}
	at := time.Now()
	cs.cl.Kill(i)
	return killed, at
}

// retryFailedCalls retries every failed call under its own Idempotency-Key until it gets a 200,
// or the same 500 three times: the handler's own answer, kept for the key, which will not
// change. It stores the last result in results and returns the calls that ended in such a 500.
func retryFailedCalls(t *testing.T, cs *clusterStack, c *clusterCaller, results []clusterResult, failed []int, deadline time.Time) (final500 []int) {
	t.Helper()
	retryStart := time.Now()
	retries := 0
	for _, i := range failed {
		same500 := 0
		for {
			r := c.do(i, c.idem(i))
			retries++
			if r.err == nil && r.status == http.StatusOK {
				results[i] = r
				break
			}
			if r.err == nil && r.status == http.StatusInternalServerError {
				if same500++; same500 == 3 {
					final500 = append(final500, i)
					results[i] = r
					break
				}
			}
			if time.Now().After(deadline) {
				dumpInbox(t, cs.res)
				require.FailNowf(t, "a call still fails after the retry deadline", "call %d: %d %v %.200s", i, r.status, r.err, r.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("%d calls retried (%d attempts) in %v", len(failed), retries, time.Since(retryStart))
	return final500
}

// firstStatus lists the calls idx with the status of their first answer, as "call:status".
func firstStatus(first []clusterResult, idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, fmt.Sprintf("%d:%d", i, first[i].status))
	}
	return out
}

// clusterCounts are the counts the 200 answers carried, sorted.
func clusterCounts(results []clusterResult) []int {
	counts := make([]int, 0, len(results))
	for _, r := range results {
		if r.status == http.StatusOK {
			counts = append(counts, r.count)
		}
	}
	sort.Ints(counts)
	return counts
}

// checkEachCountOnce checks that every call got a distinct count: 1 to clusterCalls, each
// exactly once.
func checkEachCountOnce(t *testing.T, counts []int) {
	t.Helper()
	for i, c := range counts {
		if c == i+1 {
			continue
		}
		seen := map[int]int{}
		for _, c := range counts {
			seen[c]++
		}
		var dup, missing []int
		for v := 1; v <= clusterCalls; v++ {
			if seen[v] == 0 {
				missing = append(missing, v)
			}
		}
		for v, k := range seen {
			if k > 1 || v < 1 || v > clusterCalls {
				dup = append(dup, v)
			}
		}
		sort.Ints(dup)
		require.FailNowf(t, fmt.Sprintf("counts returned are not 1..%d", clusterCalls), "duplicated or out of range %v, missing %v", dup, missing)
	}
}

// dumpInbox logs the state of the inbox and its consumers, to tell where a request is stuck.
func dumpInbox(t *testing.T, res *bus.Resources) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	inbox, err := res.InboxOf(ctx, "Echo")
	if err != nil {
		t.Logf("inbox: %v", err)
		return
	}
	info, err := inbox.Info(ctx)
	if err != nil {
		t.Logf("inbox info: %v", err)
		return
	}
	t.Logf("inbox: msgs %d first %d last %d leader %s replicas %+v", info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.Cluster.Leader, info.Cluster.Replicas)
	lister := inbox.ListConsumers(ctx)
	for ci := range lister.Info() {
		t.Logf("consumer %s: pending %d ackPending %d redelivered %d waiting %d delivered %+v ackFloor %+v leader %s pinned %+v",
			ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered, ci.AckFloor, ci.Cluster.Leader, ci.PriorityGroups)
	}
	if err := lister.Err(); err != nil {
		t.Logf("listing consumers: %v", err)
	}
}
