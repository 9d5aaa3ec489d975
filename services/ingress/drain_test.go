package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// With a drain delay, /readyz answers 503 draining at once while new connections are still
// accepted and served; the listener closes only once the delay is over.
func TestDrainDelay(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := s.Ingress.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	// Every request on a new connection: each one shows whether the listener still accepts.
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	readyz := func() (int, string) {
		t.Helper()
		resp, err := client.Get(base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct{ Status string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body.Status
	}
	status, body := readyz()
	require.Equal(t, http.StatusOK, status, body)

	const delay = 2 * time.Second
	start := time.Now()
	drained := make(chan error, 1)
	go func() {
		drained <- drain(hs, s.Ingress, served, delay, 10*time.Second, nil, slog.New(slog.DiscardHandler))
	}()

	require.Eventually(t, func() bool { status, body = readyz(); return status == http.StatusServiceUnavailable },
		delay, 10*time.Millisecond, "/readyz did not turn 503 within the delay")
	assert.Equal(t, "draining", body)
	// Not ready, but still serving: a load balancer that has not noticed yet loses nothing.
	u := base + "/api/user/webhooks/Echo/echo?" + url.Values{"apikey": {s.Key}}.Encode()
	resp, err := client.Post(u, "application/json", strings.NewReader(`{"a":1}`))
	require.NoError(t, err, "a new connection during the drain delay was refused")
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a call during the drain delay: %s", b)

	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		require.FailNow(t, "drain did not return")
	}
	assert.GreaterOrEqual(t, time.Since(start), delay, "the listener closed before the drain delay was over")
	_, err = client.Get(base + "/healthz")
	assert.Error(t, err, "the listener still accepts after the drain")
}
