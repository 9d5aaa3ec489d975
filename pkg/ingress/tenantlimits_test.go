package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
)

const limitsPath = "/api/v1/admin/tenants/default/limits"

// gateAgent is an agent whose handlers (the webhook wait, the Data method wait) each wait for a
// token on step, or for step to be closed, and note the tenant whose request they ran.
type gateAgent struct {
	name string
	step chan struct{}

	mu      sync.Mutex
	order   []string       // the tenants of the requests that started, in order
	running map[string]int // by tenant
	done    int
}

func newGateAgent(name string) *gateAgent {
	return &gateAgent{name: name, step: make(chan struct{}), running: map[string]int{}}
}

func (g *gateAgent) agent(slots int) *agent.Agent {
	a := agent.New(g.name, agent.MaxConcurrent(slots))
	wait := func(tenant string) {
		g.mu.Lock()
		g.order = append(g.order, tenant)
		g.running[tenant]++
		g.mu.Unlock()
		<-g.step
		g.mu.Lock()
		g.running[tenant]--
		g.done++
		g.mu.Unlock()
	}
	a.WebhookFunc("wait", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		wait(r.Instance().Tenant())
		return agent.Text(http.StatusOK, "done")
	})
	a.DataFunc("wait", func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		wait(m.Instance().Tenant())
		return agent.Answer(map[string]bool{"done": true}), nil
	})
	return a
}

func (g *gateAgent) runningOf(tenant string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[tenant]
}

func (g *gateAgent) started() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

func (g *gateAgent) finished() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done
}

// sendGate sends the agent's Data method wait to an activation of the tenant through the
// ingress at base, without waiting for its answer.
func sendGate(t *testing.T, base, key, tenant, agentName, activation string) (int, http.Header, []byte) {
	t.Helper()
	return doRequest(t, http.MethodPost, base+"/api/v1/admin/tenants/"+tenant+"/messaging/send",
		jsonBody(t, map[string]any{"agentName": agentName, "activationName": activation, "participantId": "p", "type": "Data", "text": "wait"}),
		bearerHeader(key)...)
}

// putLimits sets the tenant's limits through the ingress at base and returns the record answered.
func putLimits(t *testing.T, base, tenant string, body any) tenantlimits.Record {
	t.Helper()
	status, _, b := doRequest(t, http.MethodPut, base+"/api/v1/admin/tenants/"+tenant+"/limits", jsonBody(t, body), bearerHeader(systemKey)...)
	require.Equal(t, http.StatusOK, status, "setting limits: %s", b)
	var rec tenantlimits.Record
	require.NoError(t, json.Unmarshal(b, &rec))
	return rec
}

// The limits API: a system admin sets a tenant's limits, with per-agent overrides; the tenant's
// admins read them, and may not set them; what a record leaves out is the deployment's setting,
// and {} is the deployment's settings again; values out of their range are refused naming the
// field; a deleted tenant's limits go with it.
func TestTenantLimitsAPI(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, TenantIDHold: -1}) // "gone" is made again at once

	var rec tenantlimits.Record
	adminOK(t, s, http.MethodGet, limitsPath, s.Key, nil, http.StatusOK, &rec)
	assert.Equal(t, "default", rec.Tenant)
	assert.True(t, rec.Limits.Empty())
	assert.Nil(t, rec.UpdatedAt)
	assert.Equal(t, 1, rec.Effective.Weight)
	assert.Zero(t, rec.Effective.MaxQueued)

	body := `{"weight":3,"maxQueued":100,"keyRate":{"perSecond":20,"burst":40},"maxBytes":1000000,
		"agents":{"Echo":{"maxConcurrent":2,"rate":{"perSecond":5}}}}`
	rec = putLimits(t, s.URL, "default", json.RawMessage(body))
	assert.Equal(t, 3, *rec.Limits.Weight)
	assert.Equal(t, "admin", rec.UpdatedBy)
	require.NotNil(t, rec.UpdatedAt)
	assert.Equal(t, tenantlimits.Effective{Weight: 3, MaxQueued: 100, MaxConcurrent: 2, Rate: tenantlimits.Rate{PerSecond: 5, Burst: 10}},
		rec.Effective.Agents["Echo"], "the agent's own values, and the tenant's for the rest; a burst of 0 is twice the rate")
	assert.Equal(t, tenantlimits.Rate{PerSecond: 20, Burst: 40}, rec.Effective.KeyRate)
	assert.Equal(t, int64(1000000), rec.Effective.MaxBytes)

	var read tenantlimits.Record
	adminOK(t, s, http.MethodGet, limitsPath, s.Key, nil, http.StatusOK, &read)
	assert.Equal(t, rec.Limits, read.Limits, "the tenant's admin reads what was set")
	var u struct {
		Quota struct{ Bytes int64 } `json:"quota"`
	}
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/default/usage", s.Key, nil, http.StatusOK, &u)
	assert.Equal(t, int64(1000000), u.Quota.Bytes, "the record's byte quota holds")

	for _, tc := range []adminRefusal{
		{name: "a tenant admin sets", method: http.MethodPut, path: limitsPath, key: s.Key, body: `{}`, want: http.StatusForbidden, slug: "forbidden"},
		{name: "another tenant's admin reads", method: http.MethodGet, path: limitsPath, key: s.OtherKey, want: http.StatusForbidden, slug: "forbidden"},
		{name: "an unknown tenant", method: http.MethodPut, path: "/api/v1/admin/tenants/nobody/limits", key: systemKey, body: `{}`, want: http.StatusNotFound, slug: "unknown-tenant"},
		{name: "weight 0", method: http.MethodPut, path: limitsPath, key: systemKey, body: `{"weight":0}`, want: http.StatusBadRequest, slug: "invalid-field"},
		{name: "a negative queue", method: http.MethodPut, path: limitsPath, key: systemKey, body: `{"agents":{"Echo":{"maxQueued":-1}}}`, want: http.StatusBadRequest, slug: "invalid-field"},
		{name: "a rate too high", method: http.MethodPut, path: limitsPath, key: systemKey, body: `{"rate":{"perSecond":1e9}}`, want: http.StatusBadRequest, slug: "invalid-field"},
		{name: "a fraction", method: http.MethodPut, path: limitsPath, key: systemKey, body: `{"maxConcurrent":1.5}`, want: http.StatusBadRequest, slug: "invalid-json"},
		{name: "an unknown field", method: http.MethodPut, path: limitsPath, key: systemKey, body: `{"maxRunning":3}`, want: http.StatusBadRequest, slug: "invalid-json"},
		{name: "a wrong method", method: http.MethodPost, path: limitsPath, key: systemKey, body: `{}`, want: http.StatusMethodNotAllowed, slug: "method-not-allowed", allow: "GET, PUT"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkAdminRefusal(t, s, tc) })
	}
	_, b := checkAdminRefusal(t, s, adminRefusal{method: http.MethodPut, path: limitsPath, key: systemKey,
		body: `{"agents":{"Echo":{"maxQueued":-1}}}`, want: http.StatusBadRequest, slug: "invalid-field"})
	assert.Contains(t, string(b), "agents.Echo.maxQueued must be a whole number from 0", "the detail names the field")
	var after tenantlimits.Record
	adminOK(t, s, http.MethodGet, limitsPath, s.Key, nil, http.StatusOK, &after)
	assert.Equal(t, rec.Limits, after.Limits, "a refused write changed nothing")

	rec = putLimits(t, s.URL, "default", map[string]any{})
	assert.True(t, rec.Limits.Empty())
	assert.Nil(t, rec.UpdatedAt, "nothing set")
	u.Quota.Bytes = -1
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/default/usage", s.Key, nil, http.StatusOK, &u)
	assert.Zero(t, u.Quota.Bytes, "the deployment's quota again (none in the test stack)")

	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "gone"}, http.StatusCreated, nil)
	putLimits(t, s.URL, "gone", map[string]any{"weight": 2})
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/gone", systemKey, nil, http.StatusNoContent, nil)
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "gone"}, http.StatusCreated, nil)
	var again tenantlimits.Record
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/gone/limits", systemKey, nil, http.StatusOK, &again)
	assert.True(t, again.Limits.Empty(), "a tenant made again does not inherit the limits of the one deleted")
}

// A tenant's limits set through one ingress hold on the next call through another, whose NATS
// delivers everything 100 ms late, and on the host within a second: a key's rate, an agent's
// rate, a queue cap (429 too-many-queued on send, webhook and converse, then calls go on once the
// queue has run; nothing accepted is lost), a weight (the tenant gets three turns to another's
// one) and a cap of running requests.
func TestTenantLimitsReachEveryIngressAndHost(t *testing.T) {
	t.Parallel()
	gate := newGateAgent("Gate")
	wide := newGateAgent("Wide")
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Agents: []*agent.Agent{echo.New(), gate.agent(1), wide.agent(8)}})
	second := startIngress(t, s, ingress.Config{AdminKey: systemKey})
	second.Lag(100 * time.Millisecond)
	defer close(wide.step)

	t.Run("a key's rate", func(t *testing.T) {
		calls := func() int { // calls on the second ingress until one is refused, at most 6
			for n := 1; n <= 6; n++ {
				status, h, b := doRequest(t, http.MethodGet, second.URL+"/api/user/agents", nil, bearerHeader(s.Key)...)
				if status == http.StatusTooManyRequests {
					assert.Contains(t, string(b), "rate-limited")
					assert.NotEmpty(t, h.Get("Retry-After"))
					return n
				}
				require.Equal(t, http.StatusOK, status, "%s", b)
			}
			return 7
		}
		require.Equal(t, 7, calls(), "no limit yet")
		putLimits(t, s.URL, "default", map[string]any{"keyRate": map[string]any{"perSecond": 1, "burst": 2}})
		assert.LessOrEqual(t, calls(), 3, "a rate of 1 a second in bursts of 2, on the next call through the other ingress")
		putLimits(t, s.URL, "default", map[string]any{})
		time.Sleep(time.Second) // a token back
		require.Equal(t, 7, calls(), "no limit again")
	})

	t.Run("an agent's rate", func(t *testing.T) {
		putLimits(t, s.URL, "default", map[string]any{"agents": map[string]any{"Echo": map[string]any{"rate": map[string]any{"perSecond": 1, "burst": 1}}}})
		refused := false
		for range 4 {
			status, _, b := call(t, second.URL, "Echo", "echo", q("apikey", s.Key), nil)
			if status == http.StatusTooManyRequests {
				refused = true
				assert.Contains(t, string(b), `too many requests to agent \"Echo\"`)
				break
			}
			require.Equal(t, http.StatusOK, status, "%s", b)
		}
		assert.True(t, refused, "Echo's calls are limited to one a second")
		status, _, b := call(t, second.URL, "Echo", "echo", q("apikey", s.OtherKey), nil)
		assert.Equal(t, http.StatusOK, status, "another tenant's calls to Echo are not: %s", b)
		putLimits(t, s.URL, "default", map[string]any{})
	})

	t.Run("a queue cap", func(t *testing.T) {
		defer putLimits(t, s.URL, "default", map[string]any{})
		putLimits(t, s.URL, "default", map[string]any{"agents": map[string]any{"Gate": map[string]any{"maxQueued": 3}}})
		accepted := 0
		var refusal []byte
		var retryAfter string
		for i := range 30 {
			status, h, b := sendGate(t, second.URL, s.Key, "default", "Gate", "q-"+strconv.Itoa(i))
			if status == http.StatusTooManyRequests {
				refusal, retryAfter = b, h.Get("Retry-After")
				break
			}
			require.Equal(t, http.StatusAccepted, status, "%s", b)
			accepted++
			time.Sleep(20 * time.Millisecond)
		}
		require.NotNil(t, refusal, "the queue cap refused a send")
		t.Logf("%d sends accepted before the first refusal (one runs, the cap is 3 queued)", accepted)
		assert.LessOrEqual(t, accepted, 6, "the cap of 3 queued and the one running, give or take a report")
		p := decode(t, refusal)
		assert.Equal(t, "urn:agentbus:problem:too-many-queued", p["type"])
		assert.Equal(t, float64(429), p["status"])
		assert.Contains(t, p["detail"], "limit of 3")
		assert.Equal(t, "1", retryAfter)

		// The first ingress counts the queue from the host's reports, every 250 ms. A refusal may
		// come one send early (a send counts on top of the reports until they hold it, give or
		// take a report): the queue is topped up to the cap, so that the calls below find it full
		// by the reports alone.
		var view inspect.Hosts
		var queue *inspect.TenantQueue
		for try := 0; ; try++ {
			queue = nil
			waitUntil(t, 5*time.Second, "the hosts view shows the tenant's queue of Gate", func() bool {
				adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/default/hosts", s.Key, nil, http.StatusOK, &view)
				for _, a := range view.Agents {
					if a.Agent == "Gate" && len(a.Tenants) > 0 && a.Tenants[0].Queued == accepted-1 {
						queue = &a.Tenants[0]
					}
				}
				return queue != nil
			})
			if queue.Queued >= 3 {
				break
			}
			require.Less(t, try, 5, "the queue reaches its cap of 3")
			status, _, b := sendGate(t, second.URL, s.Key, "default", "Gate", "top-"+strconv.Itoa(try))
			if status == http.StatusAccepted {
				accepted++
			} else {
				require.Equal(t, http.StatusTooManyRequests, status, "%s", b)
				time.Sleep(100 * time.Millisecond)
			}
		}
		assert.Equal(t, "default", queue.Tenant, "a tenant sees its own queues only")
		assert.Equal(t, 1, queue.Running)
		assert.Positive(t, queue.OldestWaitMs)
		assert.Equal(t, 3, queue.MaxQueued)

		status, _, b := call(t, s.URL, "Gate", "wait", q("apikey", s.Key), nil)
		assert.Equal(t, http.StatusTooManyRequests, status, "a webhook call: %s", b)
		status, _, b = converse(t, s, q("workflow", "Gate", "type", "Data", "text", "wait"), "", bearerHeader(s.Key)...)
		assert.Equal(t, http.StatusTooManyRequests, status, "a converse call: %s", b)
		status, _, b = sendGate(t, s.URL, s.OtherKey, "other", "Gate", "other")
		assert.Equal(t, http.StatusAccepted, status, "another tenant's send: %s", b)

		close(gate.step) // everything runs
		waitUntil(t, 10*time.Second, "every accepted request ran", func() bool { return gate.finished() == accepted+1 })
		var status2 int
		waitUntil(t, 5*time.Second, "sends are accepted again", func() bool {
			status2, _, _ = sendGate(t, second.URL, s.Key, "default", "Gate", "after")
			return status2 == http.StatusAccepted
		})
		waitUntil(t, 5*time.Second, "the last ran", func() bool { return gate.finished() == accepted+2 })
		putLimits(t, s.URL, "default", map[string]any{})
	})

	t.Run("a weight", func(t *testing.T) {
		gate.step = make(chan struct{})
		gate.mu.Lock()
		gate.order = nil
		gate.mu.Unlock()
		status, _, b := sendGate(t, s.URL, s.Key, "default", "Gate", "w-first")
		require.Equal(t, http.StatusAccepted, status, "%s", b)
		waitUntil(t, 5*time.Second, "the first holds the slot", func() bool { return len(gate.started()) == 1 })
		for i := range 12 {
			status, _, b = sendGate(t, s.URL, s.Key, "default", "Gate", "w-a"+strconv.Itoa(i))
			require.Equal(t, http.StatusAccepted, status, "%s", b)
			status, _, b = sendGate(t, s.URL, s.OtherKey, "other", "Gate", "w-b"+strconv.Itoa(i))
			require.Equal(t, http.StatusAccepted, status, "%s", b)
		}
		putLimits(t, second.URL, "default", map[string]any{"weight": 3})
		time.Sleep(time.Second) // the host applies it within a second
		for range 12 {
			gate.step <- struct{}{}
		}
		waitUntil(t, 5*time.Second, "the next 12 started", func() bool { return len(gate.started()) >= 13 })
		order := gate.started()[1:]
		a := strings.Count(strings.Join(order[:12], ","), "default")
		t.Logf("the 12 requests after the weight of 3 was set: %v", order[:12])
		assert.Equal(t, 9, a, "three turns of the tenant of weight 3 to one of the other")
		close(gate.step)
		putLimits(t, s.URL, "default", map[string]any{})
	})

	t.Run("a cap of running requests", func(t *testing.T) {
		putLimits(t, second.URL, "default", map[string]any{"agents": map[string]any{"Wide": map[string]any{"maxConcurrent": 2}}})
		for i := range 6 {
			status, _, b := sendGate(t, s.URL, s.Key, "default", "Wide", "c-"+strconv.Itoa(i))
			require.Equal(t, http.StatusAccepted, status, "%s", b)
		}
		waitUntil(t, 5*time.Second, "2 running", func() bool { return wide.runningOf("default") == 2 })
		time.Sleep(200 * time.Millisecond)
		assert.Equal(t, 2, wide.runningOf("default"), "no more than the cap")
		putLimits(t, second.URL, "default", map[string]any{"agents": map[string]any{"Wide": map[string]any{"maxConcurrent": 5}}})
		took := waitUntil(t, 5*time.Second, "5 running", func() bool { return wide.runningOf("default") == 5 })
		assert.Less(t, took, time.Second, "the raised cap holds on the host within a second")
		putLimits(t, s.URL, "default", map[string]any{})
	})
}

// waitUntil polls cond until it holds, for at most within, and returns how long it took.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		require.Less(t, time.Since(start), within, "not within %v: %s", within, what)
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// contractLimits: a tenant's limits read, set, refused and set back.
func contractLimits(c *contractClient) {
	t := c.t
	c.want(http.StatusOK, http.MethodGet, limitsPath, c.key, nil)
	m := c.want(http.StatusOK, http.MethodPut, limitsPath, systemKey, map[string]any{"weight": 2, "maxQueued": 10,
		"rate": map[string]any{"perSecond": 100}, "keyRate": map[string]any{"perSecond": 50, "burst": 100},
		"maxBytes": 1 << 30, "maxInstances": 1000, "agents": map[string]any{"Echo": map[string]any{"maxConcurrent": 4, "weight": 1}}})
	assert.Equal(t, "default", m["tenant"])
	c.want(http.StatusOK, http.MethodGet, limitsPath, systemKey, nil, "X-Tenant-Id", "default")
	c.want(http.StatusBadRequest, http.MethodPut, limitsPath, systemKey, map[string]any{"weight": 0})
	c.want(http.StatusBadRequest, http.MethodGet, limitsPath, c.key, nil, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodGet, limitsPath, "", nil)
	c.want(http.StatusUnauthorized, http.MethodPut, limitsPath, "", map[string]any{})
	c.want(http.StatusForbidden, http.MethodPut, limitsPath, c.key, map[string]any{})
	c.want(http.StatusForbidden, http.MethodGet, limitsPath, c.other, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nobody/limits", systemKey, nil)
	c.want(http.StatusRequestEntityTooLarge, http.MethodPut, limitsPath, systemKey, map[string]any{"agents": map[string]any{strings.Repeat("x", 64<<10): map[string]any{}}})
	c.want(http.StatusOK, http.MethodPut, limitsPath, systemKey, map[string]any{})
}

// While an ingress instance that is present does not confirm it, a write of limits answers 202
// with what it set, which is stored and holds on the instances that confirm.
func TestUnconfirmedLimits(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	startSilentIngress(t, s)
	s.Ingress.SetConfirmTimeout(300 * time.Millisecond)
	var rec tenantlimits.Record
	adminOK(t, s, http.MethodPut, limitsPath, systemKey, map[string]any{"weight": 5}, http.StatusAccepted, &rec)
	assert.Equal(t, 5, *rec.Limits.Weight)
	var read tenantlimits.Record
	adminOK(t, s, http.MethodGet, limitsPath, s.Key, nil, http.StatusOK, &read)
	assert.Equal(t, 5, *read.Limits.Weight, "stored all the same")
}

// While a host reports a tenant crowding a partition of an agent (inspect.LoadEntry's Crowded:
// the partition holds half the requests a host takes of it at once, and the tenant at least its
// share), every call of that tenant to an instance of the agent whose requests go to that
// partition is refused with 429 too-many-queued, storing nothing; the tenant's calls to the
// agent's other partitions and to other agents, and the other tenants' calls to the agent, go
// on, and the tenant's go on again once no current report names the partition. The report here
// is written as a host writes it, on the real bus; the host's side is
// TestLoadMarksTheTenantsCrowdingAPartition (package agent) and the whole path
// TestProcessesCrowdedPartitionLeavesRoomForOthers.
func TestCrowdingTenantIsRefusedOnThatAgentOnly(t *testing.T) {
	t.Parallel()
	gate := newGateAgent("Gate")
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(), gate.agent(1)}})
	defer close(gate.step)
	conn := natstest.Conn(t, s.NATS)
	report := func(entries ...inspect.LoadEntry) {
		b, err := json.Marshal(inspect.Load{V: inspect.LoadVersion, Host: "crowded-host", Entries: append([]inspect.LoadEntry{}, entries...)})
		require.NoError(t, err)
		require.NoError(t, conn.Publish(subject.HostLoad, b))
		require.NoError(t, conn.Flush())
	}
	// The default activation's partition of Echo's 4 (the stack's inbox partitions), crowded by
	// the tenant, and an activation whose requests go to another one.
	const partitions = 4
	hot := subject.InboxPartition("default", echoWF, partitions)
	cool := ""
	for i := 0; cool == ""; i++ {
		if a := "cool-" + strconv.Itoa(i); subject.InboxPartition("default", "default:Echo:Supervisor Workflow:"+a, partitions) != hot {
			cool = a
		}
	}
	// Reported every 100 ms until the checks are done, as a host reports every 250 ms: one
	// report counts for a second.
	stop := make(chan struct{})
	reporting := make(chan struct{})
	go func() {
		defer close(reporting)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			report(inspect.LoadEntry{Tenant: "default", Agent: "Echo", Queued: 2100, Running: 1, Crowded: []int{hot}, Partitions: partitions})
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	waitUntil(t, 5*time.Second, "the ingress takes the report in", func() bool {
		status, _, _ := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), nil)
		return status == http.StatusTooManyRequests
	})
	status, h, b := doRequest(t, http.MethodPost, s.URL+"/api/user/webhooks/Echo/echo?"+q("apikey", s.Key).Encode(), strings.NewReader(`{"n":1}`))
	require.Equal(t, http.StatusTooManyRequests, status, "a webhook call: %s", b)
	p := decode(t, b)
	assert.Equal(t, "urn:agentbus:problem:too-many-queued", p["type"])
	assert.Contains(t, p["detail"], `the partition of agent "Echo" this instance's requests go to holds half the requests`)
	assert.Equal(t, "1", h.Get("Retry-After"))
	status, _, b = converse(t, s, q("workflow", "Echo", "type", "Data", "text", "echo"), "{}", bearerHeader(s.Key)...)
	assert.Equal(t, http.StatusTooManyRequests, status, "a converse call: %s", b)
	status, _, b = doRequest(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send",
		jsonBody(t, map[string]any{"agentName": "Echo", "activationName": "default", "participantId": "crowd", "type": "Data", "text": "echo"}), bearerHeader(s.Key)...)
	assert.Equal(t, http.StatusTooManyRequests, status, "a send: %s", b)
	status, _, b = doRequest(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true",
		jsonBody(t, map[string]any{"agentName": "Echo", "activationName": cool, "participantId": "p", "type": "Data", "text": "echo"}), bearerHeader(s.Key)...)
	assert.Equal(t, http.StatusOK, status, "the tenant's call to an instance of another partition: %s", b)

	var view inspect.Hosts
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/default/hosts", s.Key, nil, http.StatusOK, &view)
	crowding := map[string]bool{}
	for _, a := range view.Agents {
		for _, tq := range a.Tenants {
			crowding[tq.Tenant+"/"+tq.Agent] = tq.Crowding
		}
	}
	assert.True(t, crowding["default/Echo"], "the hosts view shows the tenant crowding Echo: %v", crowding)

	status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", s.OtherKey), nil)
	assert.Equal(t, http.StatusOK, status, "another tenant's call to the agent: %s", b)
	status, _, b = sendGate(t, s.URL, s.Key, "default", "Gate", "elsewhere")
	assert.Equal(t, http.StatusAccepted, status, "the tenant's call to another agent: %s", b)
	refused := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "crowd"), bearerHeader(s.Key)...)
	assert.Empty(t, refused.Messages, "the refused send stored nothing")

	close(stop)
	<-reporting
	report() // the host holds nothing any more
	status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", s.Key), nil)
	assert.Equal(t, http.StatusOK, status, "the tenant's calls go on once no report marks it: %s", b)
}
