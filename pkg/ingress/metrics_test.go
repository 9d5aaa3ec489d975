package ingress_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestMetricsCountByRouteTemplate makes a webhook call and finds it on GET /metrics under its
// route template, never its raw path, with its status class and tenant.
func TestMetricsCountByRouteTemplate(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), []byte(`{}`))
	require.Equal(t, http.StatusOK, status, "webhook: %s", b)

	status, _, b = doCT(t, http.MethodGet, s.URL+"/api/user/webhooks/Echo/echo/extra", nil)
	require.Equal(t, http.StatusNotFound, status, "unknown path: %s", b)

	status, h, b := doRequest(t, http.MethodGet, s.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status, "metrics: %s", b)
	assert.True(t, strings.HasPrefix(h.Get("Content-Type"), "text/plain"), "content type %q", h.Get("Content-Type"))
	text := string(b)
	const route = `route="/api/user/webhooks/{workflow}/{method}"`
	assert.Contains(t, text, `agentbus_http_requests_total{code="2xx",`+route+`,tenant="default"} 1`+"\n")
	assert.Contains(t, text, `agentbus_http_request_duration_seconds_count{`+route+`} 1`+"\n")
	assert.Contains(t, text, "agentbus_ingress_sync_calls_waiting 0\n")
	assert.Contains(t, text, "agentbus_ingress_handler_timeouts_total 0\n")
	assert.Contains(t, text, `agentbus_http_requests_total{code="4xx",route="unknown",tenant="none"} 1`+"\n")
	assert.NotContains(t, text, "/api/user/webhooks/Echo/echo", "a raw path became a label")
}
