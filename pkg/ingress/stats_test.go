package ingress_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// statsAnswer is the answer of the stats routes, as a client reads it.
type statsAnswer struct {
	Tenant        string    `json:"tenant"`
	WindowSeconds int       `json:"windowSeconds"`
	SlotSeconds   int       `json:"slotSeconds"`
	From          time.Time `json:"from"`
	To            time.Time `json:"to"`
	Ingresses     struct {
		Answered   int `json:"answered"`
		Unanswered int `json:"unanswered"`
	} `json:"ingresses"`
	Totals  statsCounts  `json:"totals"`
	Agents  []agentStats `json:"agents"`
	Tenants []struct {
		Tenant string       `json:"tenant"`
		Totals statsCounts  `json:"totals"`
		Agents []agentStats `json:"agents"`
	} `json:"tenants"`
	OtherTenants *struct {
		Tenants int `json:"tenants"`
	} `json:"otherTenants"`
}

type statsCounts struct {
	Requests     int      `json:"requests"`
	Errors       int      `json:"errors"`
	ClientErrors int      `json:"clientErrors"`
	P50Ms        *float64 `json:"p50Ms"`
	P99Ms        *float64 `json:"p99Ms"`
}

type agentStats struct {
	Agent  string      `json:"agent"`
	Totals statsCounts `json:"totals"`
	Slots  []struct {
		Start time.Time `json:"start"`
		statsCounts
	} `json:"slots"`
}

// getStats GETs a stats route on the ingress at base with key, and decodes the answer.
func getStats(t *testing.T, base, path, key string) statsAnswer {
	t.Helper()
	status, h, b := do(t, http.MethodGet, base+path, key, nil)
	require.Equal(t, http.StatusOK, status, "GET %s: %s", path, b)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	var ans statsAnswer
	require.NoError(t, json.Unmarshal(b, &ans), "%s", b)
	return ans
}

// agentOf returns the stats of one agent of an answer.
func agentOf(t *testing.T, agents []agentStats, name string) agentStats {
	t.Helper()
	for _, a := range agents {
		if a.Agent == name {
			return a
		}
	}
	require.Failf(t, "agent missing", "no stats of %s in %v", name, agents)
	return agentStats{}
}

// tally counts the calls a test made, as the window should.
type tally struct{ requests, errors, clientErrors int }

func (c *tally) add(status int) {
	c.requests++
	switch {
	case status >= 500:
		c.errors++
	case status >= 400:
		c.clientErrors++
	}
}

// TestStatsCountCallsPerAgent: webhook, converse and send calls to Echo show up in the tenant's
// stats, in the slot of their time, with their errors, client errors and plausible latency
// quantiles; a call to an agent nobody registered does not; another tenant sees none of them.
func TestStatsCountCallsPerAgent(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	key := s.Key
	var c tally
	before := time.Now()
	webhook := func(method string, want int, kv ...string) {
		t.Helper()
		status, _, b := call(t, s.URL, "Echo", method, q(append([]string{"apikey", key}, kv...)...), []byte(`{}`))
		require.Equal(t, want, status, "%s: %s", method, b)
		c.add(status)
	}
	for range 20 {
		webhook("echo", http.StatusOK)
	}
	for range 4 {
		webhook("status", http.StatusInternalServerError, "code", "500")
	}
	webhook("status", http.StatusNotFound, "code", "404")
	webhook("nope", http.StatusNotFound) // a method Echo lacks: Echo is known, the call counts
	for range 3 {
		webhook("sleep", http.StatusOK, "ms", "300")
	}
	// Converse, send with and without wait.
	status, _, b := converse(t, s, q("workflow", "Echo", "type", "Chat", "text", "hi", "apikey", key), "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	c.add(status)
	chat := msg("activationName", "stats", "participantId", "ada", "type", "Chat", "text", "hi")
	for _, query := range []string{"wait=true", ""} {
		status, _, b = send(t, s, "default", query, chat, bearerHeader(key)...)
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, "%s", b)
		c.add(status)
	}
	// A streamed call whose handler outlasts its timeout ends with an error event: an error.
	status, _, b = converse(t, s, q("workflow", "Echo", "type", "Data", "text", "sleep", "timeoutSeconds", "1", "apikey", key),
		`{"ms":1500}`, "Accept", "text/event-stream")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(b), "handler-timeout")
	c.add(http.StatusGatewayTimeout)
	// Not counted: an agent nobody registered, and a call refused before its agent is known.
	status, _, _ = call(t, s.URL, "Nobody", "echo", q("apikey", key), nil)
	require.Equal(t, http.StatusNotFound, status)
	status, _, _ = call(t, s.URL, "Echo", "echo", q("apikey", "wrong"), nil)
	require.Equal(t, http.StatusUnauthorized, status)
	after := time.Now()

	var ans statsAnswer
	require.Eventually(t, func() bool {
		ans = getStats(t, s.URL, "/api/v1/admin/tenants/default/stats", key)
		return len(ans.Agents) == 1 && ans.Agents[0].Totals.Requests == c.requests
	}, 5*time.Second, 50*time.Millisecond, "the stats count every call")
	assert.Equal(t, "default", ans.Tenant)
	assert.Equal(t, 900, ans.WindowSeconds)
	assert.Equal(t, 30, ans.SlotSeconds)
	assert.Equal(t, 1, ans.Ingresses.Answered)
	assert.Equal(t, 0, ans.Ingresses.Unanswered)
	echo := agentOf(t, ans.Agents, "Echo")
	assert.Equal(t, c.errors, echo.Totals.Errors, "4 status 500 and the stream's timeout")
	assert.Equal(t, 5, echo.Totals.Errors)
	assert.Equal(t, c.clientErrors, echo.Totals.ClientErrors)
	assert.Equal(t, 2, echo.Totals.ClientErrors)
	assert.Equal(t, ans.Totals, echo.Totals, "one agent: its totals are the tenant's")
	// Most calls take a few milliseconds; one in nine sleeps 300 ms or more.
	require.NotNil(t, echo.Totals.P50Ms)
	require.NotNil(t, echo.Totals.P99Ms)
	assert.Less(t, *echo.Totals.P50Ms, 250.0, "p50")
	assert.Greater(t, *echo.Totals.P99Ms, 300/1.42, "p99")
	assert.Less(t, *echo.Totals.P99Ms, 1500*1.42, "p99")

	// Every slot of the window is listed; the calls are in the slots of their time.
	require.Len(t, echo.Slots, 30)
	slot := 30 * time.Second
	assert.Equal(t, ans.From, echo.Slots[0].Start)
	assert.WithinDuration(t, ans.To, echo.Slots[29].Start, slot)
	sum := 0
	for i, sl := range echo.Slots {
		if i > 0 {
			assert.Equal(t, slot, sl.Start.Sub(echo.Slots[i-1].Start))
		}
		if sl.Requests == 0 {
			assert.Nil(t, sl.P50Ms)
			continue
		}
		sum += sl.Requests
		assert.False(t, sl.Start.Before(before.Truncate(slot)), "slot %v before the calls", sl.Start)
		assert.False(t, sl.Start.After(after), "slot %v after the calls", sl.Start)
		assert.NotNil(t, sl.P99Ms)
	}
	assert.Equal(t, c.requests, sum)

	// A shorter window; and another tenant sees none of these calls.
	short := getStats(t, s.URL, "/api/v1/admin/tenants/default/stats?window=45s", key)
	assert.Equal(t, 60, short.WindowSeconds, "rounded up to whole slots")
	if len(short.Agents) > 0 {
		assert.Len(t, short.Agents[0].Slots, 2)
	}
	other := getStats(t, s.URL, "/api/v1/admin/tenants/other/stats", s.OtherKey)
	assert.Equal(t, "other", other.Tenant)
	assert.Empty(t, other.Agents)
	assert.Zero(t, other.Totals.Requests)
	status, _, _ = do(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/stats", s.OtherKey, nil)
	assert.Equal(t, http.StatusForbidden, status)
	status, _, _ = do(t, http.MethodGet, s.URL+"/api/v1/admin/stats", key, nil)
	assert.Equal(t, http.StatusForbidden, status, "a tenant admin does not see every tenant")

	// The system admin sees every tenant.
	all := getStats(t, s.URL, "/api/v1/admin/stats", systemKey)
	require.Len(t, all.Tenants, 1)
	assert.Equal(t, "default", all.Tenants[0].Tenant)
	assert.Equal(t, echo.Totals, all.Tenants[0].Totals)
	assert.Equal(t, echo.Totals, all.Totals)
	assert.Nil(t, all.OtherTenants)

	// With its host gone, Echo's calls fail with 503 no-host, and count as errors.
	require.NoError(t, s.StopHost())
	require.Eventually(t, func() bool {
		status := callEcho(t, s.URL, key)
		c.add(status)
		return status == http.StatusServiceUnavailable
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		ans = getStats(t, s.URL, "/api/v1/admin/tenants/default/stats", key)
		return ans.Totals.Requests == c.requests
	}, 5*time.Second, 50*time.Millisecond)
	assert.Equal(t, c.errors, ans.Totals.Errors)
}

// TestStatsMergeIngressInstances: two ingress instances on one NATS each count the calls they
// answered, and each one's stats route merges both windows.
func TestStatsMergeIngressInstances(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	second := startIngress(t, s, ingress.Config{AdminKey: systemKey})
	// Two CPUs shared with other work may hold an answer longer than the 300 ms a route waits.
	s.Ingress.SetStatsDeadline(2 * time.Second)
	second.SetStatsDeadline(2 * time.Second)
	for i := range 10 {
		require.Equal(t, http.StatusOK, callEcho(t, s.URL, s.Key))
		base := second.URL
		if i < 3 {
			base = s.URL
		}
		status, _, _ := call(t, base, "Echo", "status", q("apikey", s.Key, "code", "503"), nil)
		require.Equal(t, http.StatusServiceUnavailable, status)
	}
	for _, base := range []string{s.URL, second.URL} {
		ans := getStats(t, base, "/api/v1/admin/tenants/default/stats", s.Key)
		assert.Equal(t, 2, ans.Ingresses.Answered, base)
		echo := agentOf(t, ans.Agents, "Echo")
		assert.Equal(t, 20, echo.Totals.Requests, base)
		assert.Equal(t, 10, echo.Totals.Errors, base)
		all := getStats(t, base, "/api/v1/admin/stats", systemKey)
		assert.Equal(t, 2, all.Ingresses.Answered, base)
		assert.Equal(t, 20, all.Totals.Requests, base)
	}

	// An instance that stops answering is told as unanswered, and its calls are missing.
	second.conn.Close()
	ans := getStats(t, s.URL, "/api/v1/admin/tenants/default/stats", s.Key)
	assert.Equal(t, 1, ans.Ingresses.Answered)
	assert.Equal(t, 1, ans.Ingresses.Unanswered)
	assert.Equal(t, 13, ans.Totals.Requests, "the first instance answered 10 echo and 3 status calls")
}

// TestStatsWindowParameter: the window is a duration up to 15 minutes.
func TestStatsWindowParameter(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	for _, w := range []string{"15m", "1s", "30s", "5m", "899s"} {
		ans := getStats(t, s.URL, "/api/v1/admin/tenants/default/stats?window="+w, s.Key)
		d, _ := time.ParseDuration(w)
		assert.Equal(t, int((d+29*time.Second)/(30*time.Second))*30, ans.WindowSeconds, w)
	}
	for _, w := range []string{"", "0s", "-1m", "16m", "1h", "soon", "15"} {
		for _, p := range []string{"/api/v1/admin/tenants/default/stats", "/api/v1/admin/stats"} {
			status, ct, b := doCT(t, http.MethodGet, s.URL+p+"?window="+url.QueryEscape(w), nil, bearerHeader(systemKey)...)
			pr := problemOf(t, status, ct, b, http.StatusBadRequest)
			assert.Equal(t, "urn:agentbus:problem:invalid-parameter", pr["type"], "window=%q", w)
		}
	}
}

// contractStats: the stats routes, for TestOpenAPIContract.
func contractStats(c *contractClient) {
	t := c.t
	const p = "/api/v1/admin/tenants/default/stats"
	m := c.want(http.StatusOK, http.MethodGet, p, c.key, nil)
	assert.NotEmpty(t, m["agents"], "the calls of the steps before")
	c.want(http.StatusOK, http.MethodGet, p+"?window=5m", c.key, nil, "X-Tenant-Id", "default")
	c.want(http.StatusOK, http.MethodGet, p, systemKey, nil)
	c.want(http.StatusBadRequest, http.MethodGet, p+"?window=1h", c.key, nil)
	c.want(http.StatusBadRequest, http.MethodGet, p, c.key, nil, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodGet, p, "", nil)
	c.want(http.StatusForbidden, http.MethodGet, p, c.other, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nobody/stats", systemKey, nil)
	c.want(http.StatusMethodNotAllowed, http.MethodPost, p, c.key, nil)

	m = c.want(http.StatusOK, http.MethodGet, "/api/v1/admin/stats?window=15m", systemKey, nil)
	assert.NotEmpty(t, m["tenants"])
	c.want(http.StatusBadRequest, http.MethodGet, "/api/v1/admin/stats?window=0s", systemKey, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, "/api/v1/admin/stats", "", nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/stats", c.key, nil)
}

// TestStatsIsolation: tenant A's admin sees A's calls only, and is refused B's stats and the
// system-wide ones, by every way of naming B (docs/security.md#stats).
func TestStatsIsolation(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	for range 3 {
		require.Equal(t, http.StatusOK, callEcho(t, s.URL, s.OtherKey))
	}
	require.Equal(t, http.StatusOK, callEcho(t, s.URL, s.Key))
	userKey, _ := storeKey(t, s, "default", keys.RoleUser, "stats-user")

	own := getStats(t, s.URL, "/api/v1/admin/tenants/default/stats", s.Key)
	require.Len(t, own.Agents, 1)
	assert.Equal(t, 1, own.Totals.Requests, "A's one call, none of B's three")
	for _, tc := range []struct {
		name, path, key string
		hdr             []string
		want            int
	}{
		{"B's path", "/api/v1/admin/tenants/other/stats", s.Key, nil, http.StatusForbidden},
		{"an unknown tenant's path", "/api/v1/admin/tenants/nobody/stats", s.Key, nil, http.StatusForbidden},
		{"X-Tenant-Id of B on A's path", "/api/v1/admin/tenants/default/stats", s.Key, []string{"X-Tenant-Id", "other"}, http.StatusBadRequest},
		{"tenantId query of B", "/api/v1/admin/tenants/default/stats?tenantId=other", s.Key, nil, http.StatusForbidden},
		{"a user key of A", "/api/v1/admin/tenants/default/stats", userKey, nil, http.StatusForbidden},
		{"the system-wide stats", "/api/v1/admin/stats", s.Key, nil, http.StatusForbidden},
		{"the system-wide stats with B's key", "/api/v1/admin/stats", s.OtherKey, nil, http.StatusForbidden},
	} {
		status, _, b := doRequest(t, http.MethodGet, s.URL+tc.path, nil, append(bearerHeader(tc.key), tc.hdr...)...)
		assert.Equal(t, tc.want, status, "%s: %s", tc.name, b)
		assert.NotContains(t, string(b), `"requests"`, tc.name)
	}

	all := getStats(t, s.URL, "/api/v1/admin/stats", systemKey)
	require.Len(t, all.Tenants, 2)
	assert.Equal(t, "other", all.Tenants[0].Tenant, "busiest first")
	assert.Equal(t, 3, all.Tenants[0].Totals.Requests)
	assert.Equal(t, "default", all.Tenants[1].Tenant)
	assert.Equal(t, 4, all.Totals.Requests)
}

// TestStatsCountMCPToolCalls: each MCP tool call counts under its agent, a failed method with
// its status; a call refused before it names a known agent does not count.
func TestStatsCountMCPToolCalls(t *testing.T) {
	t.Parallel()
	st := stacktest.Start(t, stacktest.Options{})
	tool := func(id int, name, args string) map[string]any {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`
		status, _, out := mcpPost(t, st, st.Key, body)
		require.Equal(t, http.StatusOK, status, "%v", out)
		return out
	}
	for i := range 3 {
		out := tool(i, "Echo.sum", `{"values":[1,2]}`)
		require.NotNil(t, out["result"], "%v", out)
	}
	out := tool(10, "Echo.fail", `{"status":503}`)
	assert.Equal(t, true, out["result"].(map[string]any)["isError"], "%v", out)
	out = tool(11, "Echo.fail", `{"status":422}`)
	assert.Equal(t, true, out["result"].(map[string]any)["isError"], "%v", out)
	tool(12, "Echo.sum", `{"workflow":"Vault"}`) // invalid arguments: not counted

	var ans statsAnswer
	require.Eventually(t, func() bool {
		ans = getStats(t, st.URL, "/api/v1/admin/tenants/default/stats", st.Key)
		return len(ans.Agents) == 1 && ans.Agents[0].Totals.Requests >= 5
	}, 5*time.Second, 50*time.Millisecond, "the stats count the tool calls")
	echo := agentOf(t, ans.Agents, "Echo")
	assert.Equal(t, 5, echo.Totals.Requests)
	assert.Equal(t, 1, echo.Totals.Errors)
	assert.Equal(t, 1, echo.Totals.ClientErrors)
}
