package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	revoked, _ := revokedKey(t, s, "default", keys.RoleUser, "to revoke")

	for _, tc := range []struct {
		name     string
		workflow string
		method   string
		query    url.Values
		want     int
		slug     string
	}{
		{"no key", "Echo", "echo", q(), 401, "unauthorized"},
		{"unknown key", "Echo", "echo", q("apikey", "abk_nope"), 401, "unauthorized"},
		{"revoked key", "Echo", "echo", q("apikey", revoked), 401, "unauthorized"},
		{"tenantId mismatch", "Echo", "echo", q("apikey", s.Key, "tenantId", "other"), 403, "forbidden"},
		{"empty tenantId", "Echo", "echo", q("apikey", s.Key, "tenantId", ""), 403, "forbidden"},
		{"other tenant's workflow id", "other:Echo:Supervisor Workflow:default", "echo", q("apikey", s.Key), 403, "forbidden"},
		{"unknown agent", "Nobody", "echo", q("apikey", s.Key), 404, "unknown-agent"},
		{"unknown workflow type", "Echo:Batch", "echo", q("apikey", s.Key), 404, "unknown-workflow-type"},
		{"unknown method", "Echo", "nope", q("apikey", s.Key), 404, "unknown-method"},
		{"method case differs", "Echo", "ECHO", q("apikey", s.Key), 404, "unknown-method"},
		{"three segments", "a:b:c", "echo", q("apikey", s.Key), 400, "invalid-workflow"},
		{"empty activation", "default:Echo:Conversational:", "echo", q("apikey", s.Key), 400, "invalid-workflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := call(t, s.URL, tc.workflow, tc.method, tc.query, []byte("{}"))
			p := problemOf(t, status, ct, b, tc.want)
			assert.Equal(t, "urn:agentbus:problem:"+tc.slug, p["type"])
			assert.NotContains(t, string(b), "abk_", "the answer shows key material")
		})
	}

	// The same workflow id with the caller's own tenant works; a workflow id of tenant "other"
	// works with other's key.
	status, _, b := call(t, s.URL, "other:Echo:Supervisor Workflow:default", "echo", q("apikey", s.OtherKey), nil)
	assert.Equal(t, http.StatusOK, status, "other tenant with own key: %s", b)
}

func TestWebhookNoLiveHost(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	require.NoError(t, s.StopHost())
	// The host's leaving reaches the ingress through its watch of the hosts bucket, a moment
	// after StopHost returns: a call in that moment is accepted and waits for a host.
	require.Eventually(t, func() bool {
		status, _, _ := doRequest(t, http.MethodGet, s.URL+"/readyz", nil)
		return status == http.StatusServiceUnavailable
	}, 10*time.Second, 20*time.Millisecond, "the ingress still sees the stopped host")
	start := time.Now()
	status, ct, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), nil)
	problemOf(t, status, ct, b, 503)
	assert.Less(t, time.Since(start), time.Second, "the 503 must come at once")
}

// A call with an Idempotency-Key that finds no live host is held while one may come back (the
// hosts' heartbeats stop reaching the ingress while a NATS cluster elects the hosts bucket's
// leader), and answered by the host that comes.
func TestWebhookWithKeyWaitsForAHost(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	require.NoError(t, s.StopHost())
	require.Eventually(t, func() bool {
		status, _, _ := doRequest(t, http.MethodGet, s.URL+"/readyz", nil)
		return status == http.StatusServiceUnavailable
	}, 10*time.Second, 20*time.Millisecond, "the ingress still sees the stopped host")
	go func() {
		time.Sleep(time.Second)
		stop, err := s.AddHost(context.Background(), "host-b")
		assert.NoError(t, err)
		t.Cleanup(func() { _ = stop() })
	}()
	start := time.Now()
	status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), nil, "Idempotency-Key", "held-1")
	assert.Equal(t, http.StatusOK, status, "%s", b)
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "answered before a host came")
}

func TestWebhookTimeoutStillProcessed(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{WebhookTimeout: 200 * time.Millisecond})
	wf := "Echo:Conversational"
	status, ct, b := call(t, s.URL, wf, "sleep", q("apikey", s.Key, "ms", "600"), nil, "Idempotency-Key", "sleep-1")
	p := problemOf(t, status, ct, b, 504)
	assert.Equal(t, "sleep-1", p["requestId"], "the 504 names the request")
	// The request was accepted: it still runs, and its state change shows once it has.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, _, b := call(t, s.URL, wf, "state", q("apikey", s.Key), nil)
		var st struct{ State struct{ Sleeps int } }
		require.NoError(c, json.Unmarshal(b, &st), "state: %s", b)
		assert.Equal(c, 1, st.State.Sleeps, "sleep never completed: %s", b)
	}, 5*time.Second, 50*time.Millisecond)
	// A retry with the same Idempotency-Key gets the first result and does not sleep again.
	status, _, b = call(t, s.URL, wf, "sleep", q("apikey", s.Key, "ms", "600"), nil, "Idempotency-Key", "sleep-1")
	assert.Equal(t, http.StatusOK, status, "retry: %s", b)
	assert.Contains(t, string(b), `"slept":600`, "retry")
	_, _, b = call(t, s.URL, wf, "state", q("apikey", s.Key), nil)
	assert.Contains(t, string(b), `"sleeps":1`, "the retry ran the handler again")

	status, _, b = doRequest(t, http.MethodGet, s.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	// The state reads that came while the instance slept timed out too.
	assert.Regexp(t, `(?m)^agentbus_ingress_handler_timeouts_total [1-9]`, string(b))
}

func TestWebhookIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	wf := "default:Echo:Supervisor Workflow:idem"
	_, _, first := call(t, s.URL, wf, "count", q("apikey", s.Key), nil, "Idempotency-Key", "k1")
	_, _, again := call(t, s.URL, wf, "count", q("apikey", s.Key), nil, "Idempotency-Key", "k1")
	assert.Equal(t, string(first), string(again), "a retry answers as the first call")
	status, _, b := doRequest(t, http.MethodGet, s.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, string(b), "agentbus_ingress_kept_results_total 1\n", "the retry was answered from the kept result")
	_, _, next := call(t, s.URL, wf, "count", q("apikey", s.Key), nil, "Idempotency-Key", "k2")
	assert.Equal(t, 2.0, decode(t, next)["count"], "count after a retried request")
	// The same key for a different request is refused, not answered with the first result.
	status, ct, b := call(t, s.URL, wf, "echo", q("apikey", s.Key), nil, "Idempotency-Key", "k1")
	problemOf(t, status, ct, b, 422)
	// Keys are per tenant: the same key in another tenant is a different request.
	_, _, b = call(t, s.URL, "other:Echo:Supervisor Workflow:idem", "count", q("apikey", s.OtherKey), nil, "Idempotency-Key", "k1")
	assert.Equal(t, 1.0, decode(t, b)["count"], "other tenant's first count")
}

// TestInboxDedupeIDOnlyForCallerKeys: only a requestId the caller chose carries a
// de-duplication id to the inbox; one the ingress made up cannot come again, and the server
// would keep its id for the whole dedupe window for nothing.
func TestInboxDedupeIDOnlyForCallerKeys(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	sub, err := s.Res.JS.Conn().SubscribeSync(subject.InboxSubjects("Echo"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// next is the next request published to the inbox, past the markers the host places there
	// as it acknowledges requests (bus.InboxKeeper).
	next := func() *nats.Msg {
		t.Helper()
		for {
			m, err := sub.NextMsg(5 * time.Second)
			require.NoError(t, err, "the request never reached the inbox")
			if !subject.IsInboxMarker(m.Subject) {
				return m
			}
		}
	}
	wf := "default:Echo:Supervisor Workflow:dedupe"

	status, _, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.Empty(t, next().Header.Get(subject.HeaderMsgID), "a request without Idempotency-Key")

	status, _, b = call(t, s.URL, wf, "count", q("apikey", s.Key), nil, "Idempotency-Key", "dd-1")
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.Equal(t, subject.DedupeID("default", "dd-1"), next().Header.Get(subject.HeaderMsgID), "a request with Idempotency-Key")

	auth := bearerHeader(s.Key)
	status, _, b = send(t, s, "default", "", msg("type", "Data", "text", "count"), auth...)
	require.Equal(t, http.StatusAccepted, status, "%s", b)
	assert.Empty(t, next().Header.Get(subject.HeaderMsgID), "a send without requestId")
	status, _, b = send(t, s, "default", "", msg("type", "Data", "text", "count", "requestId", "dd-2"), auth...)
	require.Equal(t, http.StatusAccepted, status, "%s", b)
	assert.Equal(t, subject.DedupeID("default", "dd-2"), next().Header.Get(subject.HeaderMsgID), "a send with requestId")
}

func TestRoutingEdges(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	// An activation name with a slash and a space, URL-encoded, is one path segment.
	status, _, b := call(t, s.URL, "default:Echo:Supervisor Workflow:a/b c", "count", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "encoded activation: %s", b)
	assert.Equal(t, 1.0, decode(t, b)["count"], "encoded activation")
	for _, tc := range []struct {
		name, method, path string
		want               int
		allow              string
	}{
		{name: "unknown path", method: http.MethodGet, path: "/nope", want: 404},
		{name: "webhook with GET", method: http.MethodGet, path: "/api/user/webhooks/Echo/echo", want: 405, allow: "POST"},
		{name: "healthz with POST", method: http.MethodPost, path: "/healthz", want: 405, allow: "GET"},
		{name: "metrics with HEAD", method: http.MethodHead, path: "/metrics", want: 405, allow: "GET"},
		{name: "missing method segment", method: http.MethodPost, path: "/api/user/webhooks/Echo", want: 404},
		{name: "trailing slash", method: http.MethodPost, path: "/api/user/webhooks/Echo/echo/", want: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, h, b := doRequest(t, tc.method, s.URL+tc.path, nil)
			if tc.method == http.MethodHead {
				// A HEAD answer has no body to check.
				assert.Equal(t, tc.want, status)
			} else {
				problemOf(t, status, h.Get("Content-Type"), b, tc.want)
			}
			assert.Equal(t, tc.allow, h.Get("Allow"), "Allow")
		})
	}

	// A path that is not clean is refused on every route, before anything else: no redirect that
	// would carry the caller's query, its apikey included, to a path it did not ask for.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{
		"/api/user/webhooks/Echo/../Echo/echo", "/api/user/webhooks//Echo/./echo", "/api/user/webhooks/Echo/echo/..",
		"/api/user/rest/../rest/converse", "/api/v1/admin/tenants/default/../default/keys", "/ui/./app.js", "//metrics",
	} {
		req, err := http.NewRequest(http.MethodPost, s.URL+path+"?apikey="+s.Key, strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := noFollow.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		p := problemOf(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, http.StatusBadRequest)
		assert.Equal(t, "urn:agentbus:problem:invalid-path", p["type"], path)
		assert.Empty(t, resp.Header.Get("Location"), path)
		assert.NotContains(t, string(b), s.Key, "%s: the answer echoes the query", path)
	}
}
