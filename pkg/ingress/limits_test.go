package ingress_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/subscription"
)

// listKeys is a cheap authenticated request: GET the tenant's keys.
func (s *customStack) listKeys(t *testing.T, tenant, key string) (int, http.Header, []byte) {
	t.Helper()
	return do(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/"+tenant+"/keys", key, nil)
}

// listKeysOK makes n cheap requests with key that must all succeed; what says which they are.
func (s *customStack) listKeysOK(t *testing.T, tenant, key string, n int, what string) {
	t.Helper()
	for i := range n {
		status, _, b := s.listKeys(t, tenant, key)
		require.Equal(t, http.StatusOK, status, "request %d %s: %s", i+1, what, b)
	}
}

// wantRateLimited checks a 429 rate-limited problem whose Retry-After lies in [1, most] seconds.
func wantRateLimited(t *testing.T, status int, h http.Header, b []byte, most int) {
	t.Helper()
	p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusTooManyRequests)
	require.Equal(t, "urn:agentbus:problem:rate-limited", p["type"], "problem type")
	secs, err := strconv.Atoi(h.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q, want 1 to %d seconds", h.Get("Retry-After"), most)
	require.True(t, secs >= 1 && secs <= most, "Retry-After %q, want 1 to %d seconds", h.Get("Retry-After"), most)
}

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	// 0.2/s: a token every 5 s, so nothing refills during the test.
	s := startStack(t, stack.Config{Ingress: ingress.Config{
		RateLimit: ingress.Rate{PerSecond: 0.2, Burst: 3},
		TenantRateLimits: map[string]ingress.Rate{
			"acme": {PerSecond: 0.2, Burst: 6},
			"free": {}, // no limit
		},
	}}, "default", "acme", "free")

	t.Run("default rate", func(t *testing.T) {
		key := s.keys["default"]
		s.listKeysOK(t, "default", key, 3, "within the burst")
		status, h, b := s.listKeys(t, "default", key)
		wantRateLimited(t, status, h, b, 5)
		assert.Equal(t, "5", h.Get("Retry-After"), "Retry-After: one token at 0.2/s")

		// The bucket is the key's, whatever the endpoint: a webhook is refused too.
		webhook := s.URL + "/api/user/webhooks/Echo:Conversational/echo?" + q("apikey", key).Encode()
		status, h, b = do(t, http.MethodPost, webhook, "", nil)
		wantRateLimited(t, status, h, b, 5)

		// Authentication comes first: a wrong key is still 401, not 429.
		status, h, b = s.listKeys(t, "default", key+"x")
		problemOf(t, status, h.Get("Content-Type"), b, http.StatusUnauthorized)

		// Another key of the same tenant has its own bucket.
		other, _ := storeKey(t, s.Stack, "default", keys.RoleTenantAdmin, "second")
		status, _, b = s.listKeys(t, "default", other)
		assert.Equal(t, http.StatusOK, status, "second key of the tenant: %s", b)
	})

	t.Run("tenant override", func(t *testing.T) {
		key := s.keys["acme"]
		s.listKeysOK(t, "acme", key, 6, "within acme's burst of 6")
		status, h, b := s.listKeys(t, "acme", key)
		wantRateLimited(t, status, h, b, 5)
	})

	t.Run("tenant without limit", func(t *testing.T) {
		s.listKeysOK(t, "free", s.keys["free"], 20, "of an unlimited tenant")
	})
}

func TestMaxWaitingPerTenant(t *testing.T) {
	s := startStack(t, stack.Config{Ingress: ingress.Config{MaxWaitingPerTenant: 1}}, "default", "other")
	key := s.keys["default"]
	webhook := func(workflow, method string, kv ...string) string {
		return s.URL + "/api/user/webhooks/" + url.PathEscape(workflow) + "/" + method + "?" + q(append([]string{"apikey", key}, kv...)...).Encode()
	}

	// The slow call retries while a probe holds the place (probes hold it only for a moment).
	slow := make(chan int, 1)
	go func() {
		for {
			if status := <-postLater(webhook("Echo:Conversational", "sleep", "ms", "2000", "participantId", "slow"), "", nil); status != http.StatusServiceUnavailable {
				slow <- status
				return
			}
		}
	}()

	// Once the slow call holds the tenant's only place, a second synchronous call is refused.
	// The probe names no method the agent has: admitted, it is a quick 404 with no effect.
	probe := webhook("Echo:Conversational", "no-such-method")
	deadline := time.Now().Add(1500 * time.Millisecond)
	for {
		status, h, b := do(t, http.MethodPost, probe, "", nil)
		if status == http.StatusServiceUnavailable {
			p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusServiceUnavailable)
			require.Equal(t, "urn:agentbus:problem:too-many-waiting", p["type"], "refusal %v", p)
			require.Equal(t, "1", h.Get("Retry-After"), "refusal's Retry-After")
			break
		}
		require.Equal(t, http.StatusNotFound, status, "probe: %s", b)
		require.False(t, time.Now().After(deadline), "the second concurrent call was never refused")
		time.Sleep(5 * time.Millisecond)
	}
	// A refused call is not enqueued: this count never runs.
	counter := webhook("default:Echo:Supervisor Workflow:capped", "count")
	status, h, b := do(t, http.MethodPost, counter, "", nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusServiceUnavailable)
	// Other tenants have their own places.
	other := s.URL + "/api/user/webhooks/Echo:Conversational/echo?" + q("apikey", s.keys["other"]).Encode()
	status, _, b = do(t, http.MethodPost, other, "", nil)
	assert.Equal(t, http.StatusOK, status, "other tenant while default waits: %s", b)

	require.Equal(t, http.StatusOK, <-slow, "slow call")
	// The place is given back: the count runs now, and it is the first.
	status, _, b = do(t, http.MethodPost, counter, "", nil)
	require.Equal(t, http.StatusOK, status, "count after the slow call: %s", b)
	assert.Equal(t, 1.0, decode(t, b)["count"], "count: the refused call must not have been processed")
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Config{Ingress: ingress.Config{MaxBodyBytes: 1024}}, "default")
	key := s.keys["default"]
	tests := []struct {
		name string
		url  string
		body string
	}{
		{
			name: "webhook over MaxBodyBytes",
			url:  s.URL + "/api/user/webhooks/Echo:Conversational/echo?" + q("apikey", key).Encode(),
			body: strings.Repeat("a", 1025),
		},
		{
			name: "converse Data over 1 MiB",
			url:  s.URL + "/api/user/rest/converse?" + q("apikey", key, "workflow", "Echo:Conversational", "type", "Data", "text", "sum").Encode(),
			body: `{"a":"` + strings.Repeat("a", 1<<20) + `"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, b := do(t, http.MethodPost, tt.url, "", strings.NewReader(tt.body))
			p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusRequestEntityTooLarge)
			assert.Equal(t, "urn:agentbus:problem:body-too-large", p["type"], "problem type")
		})
	}
	// At the limit the body is accepted.
	u := s.URL + "/api/user/webhooks/Echo:Conversational/echo?" + q("apikey", key).Encode()
	status, _, b := do(t, http.MethodPost, u, "", strings.NewReader(strings.Repeat("a", 1024)))
	assert.Equal(t, http.StatusOK, status, "body of exactly MaxBodyBytes: %s", b)
}

func TestSlowHeadersCutOff(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	s := startStack(t, stack.Config{Ingress: ingress.Config{ReadHeaderTimeout: timeout}})
	// The server's clock starts when it accepts the connection, so ours starts before dialling.
	start := time.Now()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	// A request line and one header, then nothing: the server must not wait for the rest.
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: agentbus\r\n")
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The server closes the connection, possibly after a 408; either way reading ends in EOF.
	rd := bufio.NewReader(conn)
	if line, err := rd.ReadString('\n'); err == nil {
		require.Contains(t, line, "408", "the server answered an unfinished request")
	}
	_, err = io.Copy(io.Discard, rd)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "connection still open after %v", time.Since(start))
	elapsed := time.Since(start)
	assert.GreaterOrEqual(t, elapsed, timeout, "connection closed before the header timeout")
	assert.LessOrEqual(t, elapsed, 3*time.Second, "connection closed after %v, want about %v", elapsed, timeout)
}

// writeRateStack runs a stack of tenants acme and other whose configuration writes have a
// burst of burst and a token every 10 s (so that nothing refills during a test), and whose
// remote agents and subscriptions may be on loopback.
func writeRateStack(t *testing.T, burst int) *customStack {
	t.Helper()
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	require.NoError(t, err)
	return startStack(t, stack.Config{Ingress: ingress.Config{AdminKey: systemKey, Subscriptions: subscription.Config{Allow: allow},
		TenantWriteRate: ingress.Rate{PerSecond: 0.1, Burst: burst}}}, "acme", "other")
}

// TestTenantWriteRate: a tenant's configuration writes (keys, remote agents, subscriptions,
// whichever of its keys makes them) share one rate; reads, calls, other tenants and system
// admins are not held by it.
func TestTenantWriteRate(t *testing.T) {
	t.Parallel()
	s := writeRateStack(t, 4)
	acme := s.keys["acme"]
	second, _ := storeKey(t, s.Stack, "acme", keys.RoleTenantAdmin, "second")
	const keysPath = "/api/v1/admin/tenants/acme/keys"

	// Four writes of three kinds, by two keys, take the burst.
	k := createKey(t, s.Stack, "acme", acme, "k", "user")
	adminOK(t, s.Stack, http.MethodDelete, keysPath+"/"+k.ID, second, nil, http.StatusNoContent, nil)
	var sub struct{ ID string }
	adminOK(t, s.Stack, http.MethodPost, "/api/v1/admin/tenants/acme/subscriptions", acme,
		map[string]any{"url": "http://127.0.0.1:9/hooks", "events": []string{"message.incoming"}}, http.StatusCreated, &sub)
	adminOK(t, s.Stack, http.MethodDelete, "/api/v1/admin/tenants/acme/subscriptions/"+sub.ID, second, nil, http.StatusNoContent, nil)

	// The fifth is refused, whatever it writes and whichever key makes it, and changes nothing.
	for _, w := range []struct{ method, path string }{
		{http.MethodPost, keysPath},
		{http.MethodPost, keysPath + "/" + k.ID + "/rotate"},
		{http.MethodDelete, keysPath + "/" + k.ID},
		{http.MethodPost, "/api/v1/admin/tenants/acme/agents"},
		{http.MethodPut, "/api/v1/admin/tenants/acme/agents/Hook"},
		{http.MethodDelete, "/api/v1/admin/tenants/acme/agents/Hook"},
		{http.MethodPost, "/api/v1/admin/tenants/acme/subscriptions"},
		{http.MethodDelete, "/api/v1/admin/tenants/acme/subscriptions/" + sub.ID},
	} {
		status, h, b := adminReq(t, s.Stack, w.method, w.path, second, map[string]any{"name": "Hook", "role": "user"})
		wantRateLimited(t, status, h, b, 10)
	}
	var list keyList
	adminOK(t, s.Stack, http.MethodGet, keysPath, acme, nil, http.StatusOK, &list)
	assert.Len(t, list.Keys, 3, "acme's keys: its two and the revoked one")

	// Reads and calls are not writes; another tenant and a system admin acting for acme are
	// not held by acme's rate.
	status, h, b := do(t, http.MethodPost, s.URL+"/api/user/webhooks/Echo/echo?"+q("apikey", acme).Encode(), "", nil)
	assert.Equal(t, http.StatusOK, status, "a webhook call: %s", b)
	createKey(t, s.Stack, "other", s.keys["other"], "k", "user")
	createKey(t, s.Stack, "acme", systemKey, "by the system admin", "user")

	// A system admin sets a tenant's own rate in its limits: none for acme, a burst of one for
	// other (whose bucket keeps no more than one token).
	adminOK(t, s.Stack, http.MethodPut, "/api/v1/admin/tenants/acme/limits", systemKey,
		map[string]any{"writeRate": map[string]any{"perSecond": 0}}, http.StatusOK, nil)
	createKey(t, s.Stack, "acme", acme, "no limit", "user")
	var rec struct {
		Effective struct{ WriteRate map[string]float64 } `json:"effective"`
	}
	adminOK(t, s.Stack, http.MethodPut, "/api/v1/admin/tenants/other/limits", systemKey,
		map[string]any{"writeRate": map[string]any{"perSecond": 0.1, "burst": 1}}, http.StatusOK, &rec)
	assert.Equal(t, map[string]float64{"perSecond": 0.1, "burst": 1}, rec.Effective.WriteRate, "other's effective write rate")
	createKey(t, s.Stack, "other", s.keys["other"], "k2", "user")
	status, h, b = adminReq(t, s.Stack, http.MethodPost, "/api/v1/admin/tenants/other/keys", s.keys["other"], map[string]any{"name": "k3", "role": "user"})
	wantRateLimited(t, status, h, b, 10)
}

// A remote agent's registration whose schemas take long to compile counts as more than one
// configuration write, in proportion to what they would hold compiled: a tenant cannot spend an
// ingress's CPU compiling schemas at its write rate's pace.
func TestRegistrationCountsItsSchemas(t *testing.T) {
	t.Parallel()
	s := writeRateStack(t, 40)
	repeated := func(n int) map[string]any { // about 2,100 pattern steps each
		props := map[string]any{}
		for i := range n {
			props[fmt.Sprintf("p%d", i)] = map[string]any{"type": "string", "pattern": "^.{1,1000}$"}
		}
		return map[string]any{"type": "object", "properties": props}
	}
	register := func(tenant, name string, schema map[string]any) {
		t.Helper()
		status, _, b := adminReq(t, s.Stack, http.MethodPost, "/api/v1/admin/tenants/"+tenant+"/agents", s.keys[tenant],
			map[string]any{"name": name, "url": "http://127.0.0.1:9/agentbus",
				"methods": []map[string]any{{"name": "one", "schema": schema}, {"name": "two", "schema": schema}}})
		require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, status, "%s", b)
	}
	writes := func(tenant string) int { // key creations until refused
		for n := 0; ; n++ {
			status, _, b := adminReq(t, s.Stack, http.MethodPost, "/api/v1/admin/tenants/"+tenant+"/keys", s.keys[tenant],
				map[string]any{"name": fmt.Sprint("k", n), "role": "user"})
			if status != http.StatusCreated {
				require.Equal(t, http.StatusTooManyRequests, status, "%s", b)
				return n
			}
		}
	}
	// Two schemas of 38 such patterns: about 7.8 MB compiled, 29 writes more than one.
	register("acme", "Heavy", repeated(38))
	got := writes("acme")
	assert.GreaterOrEqual(t, got, 9)
	assert.LessOrEqual(t, got, 11, "40 - 1 - 29 writes left (a token may come back meanwhile)")
	// Small schemas count as one write.
	register("other", "Light", map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}})
	got = writes("other")
	assert.GreaterOrEqual(t, got, 39)
	assert.LessOrEqual(t, got, 40)
}

// TestTenantWriteRateAcrossInstances: the rate of a tenant's configuration writes is the
// deployment's, not each ingress instance's: a burst of writes spread over two instances gets
// the burst once.
func TestTenantWriteRateAcrossInstances(t *testing.T) {
	t.Parallel()
	cfg := ingress.Config{TenantWriteRate: ingress.Rate{PerSecond: 0.1, Burst: 4}}
	s := startStack(t, stack.Config{Ingress: cfg}, "default", "acme")
	second := startIngress(t, s.Stack, cfg)
	require.Eventually(t, func() bool {
		return len(s.Ingress.PresentIngresses()) == 1 && len(second.PresentIngresses()) == 1
	}, 5*time.Second, 10*time.Millisecond, "the instances never heard of each other")
	// Each instance's limiter counts the instances at its next exchange (every 100 ms).
	time.Sleep(time.Second)
	created := 0
	for i := range 10 {
		base := []string{s.URL, second.URL}[i%2]
		status, h, b := doRequest(t, http.MethodPost, base+"/api/v1/admin/tenants/acme/keys",
			jsonBody(t, map[string]string{"name": "k", "role": "user"}), bearerHeader(s.keys["acme"])...)
		if status == http.StatusCreated {
			created++
			continue
		}
		// A token at an even share of the rate: 2 instances / 0.1 a second.
		wantRateLimited(t, status, h, b, 20)
	}
	assert.Equal(t, 4, created, "keys created through two instances with a burst of 4")
}

// TestTenantListenRate: the listen streams a tenant opens, with any of its keys, share one rate,
// opened one after another as much as at once; other tenants and system admins are not held.
func TestTenantListenRate(t *testing.T) {
	t.Parallel()
	// 0.1/s: a token every 10 s, so nothing refills during the test.
	s := startStack(t, stack.Config{Ingress: ingress.Config{AdminKey: systemKey,
		TenantListenRate: ingress.Rate{PerSecond: 0.1, Burst: 3}}}, "acme", "other")
	second, _ := storeKey(t, s.Stack, "acme", keys.RoleUser, "second")
	listenOf := func(tenant, key string) string {
		return s.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/listen?" +
			url.Values{"apikey": {key}, "agentName": {"Echo"}, "activationName": {"rate"}, "participantId": {"p"}}.Encode()
	}
	opened := func(tenant, key string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := http.DefaultClient.Do(newRequest(t, ctx, http.MethodGet, listenOf(tenant, key), nil))
		require.NoError(t, err)
		cancel()
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "a listen stream of %s", tenant)
	}
	opened("acme", s.keys["acme"])
	opened("acme", second)
	opened("acme", s.keys["acme"])
	for _, key := range []string{s.keys["acme"], second} {
		// A stream that opens is cut after a second rather than read to its end.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := http.DefaultClient.Do(newRequest(t, ctx, http.MethodGet, listenOf("acme", key), nil))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		wantRateLimited(t, resp.StatusCode, resp.Header, b, 10)
		assert.Contains(t, string(b), "too many listen streams opened for this tenant")
	}
	// History pages are not listen streams; another tenant and the system admin are not held.
	status, _, b := doRequest(t, http.MethodGet, strings.Replace(listenOf("acme", s.keys["acme"]), "/listen?", "/history?", 1), nil)
	assert.Equal(t, http.StatusOK, status, "a history page: %s", b)
	opened("other", s.keys["other"])
	opened("acme", systemKey)
}
