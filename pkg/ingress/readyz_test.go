package ingress_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// /readyz is ready while a workflow host lives, says which condition fails otherwise, and says
// draining once the server drains, before anything else.
func TestReadyz(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	readyz := func() (int, string) {
		status, h, b := doRequest(t, http.MethodGet, s.URL+"/readyz", nil)
		assert.Equal(t, "application/json", h.Get("Content-Type"))
		assert.Equal(t, "no-store", h.Get("Cache-Control"))
		return status, decode(t, b)["status"].(string)
	}
	status, body := readyz()
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "ready", body)

	status, ct, b := doCT(t, http.MethodPost, s.URL+"/readyz", nil)
	problemOf(t, status, ct, b, http.StatusMethodNotAllowed)

	// A host that stops leaves the registry at once.
	require.NoError(t, s.StopHost())
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body = readyz()
		if status != http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "no live workflow host", body)

	s.Ingress.Drain()
	status, body = readyz()
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "draining", body)

	status, _, b = doCT(t, http.MethodGet, s.URL+"/healthz", nil)
	assert.Equal(t, http.StatusOK, status, "a draining ingress is alive: %s", b)
}
