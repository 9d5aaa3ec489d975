package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
)

var listeningRE = regexp.MustCompile(`msg="ingress listening" addr=(\S+)`)

// The ingress runs against a NATS server that goes away: /readyz says so while the connection
// reconnects, and nothing else changes. The server comes back requiring an authorization token
// the ingress does not have: nats.go closes the connection for good, and run returns an error
// naming the cause (so main exits 1 and a supervisor starts the process again) within a few
// seconds, where it used to keep running, answering 503 to everything until restarted.
func TestRunFailsWhenNATSClosesTheConnection(t *testing.T) {
	ns := natstest.Server(t, "")
	addr := ns.Addr().String()
	env := map[string]string{"AGENTBUS_NATS_URL": ns.ClientURL(), "AGENTBUS_HTTP_ADDR": "127.0.0.1:0", "AGENTBUS_PARTITIONS": "2"}
	logs := &natstest.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, logs)
	}()
	var base string
	require.Eventually(t, func() bool {
		if m := listeningRE.FindStringSubmatch(logs.String()); m != nil {
			base = "http://" + m[1]
		}
		return base != ""
	}, 30*time.Second, 20*time.Millisecond, "the ingress did not listen:\n%s", logs.String())

	client := &http.Client{Timeout: 2 * time.Second}
	readyz := func() string {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		var body struct{ Status string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		assert.Equal(t, body.Status == "ready", resp.StatusCode == http.StatusOK, "status %d for %q", resp.StatusCode, body.Status)
		return body.Status
	}
	// No workflow host runs: connected, the ingress is still not ready, for that reason.
	require.Eventually(t, func() bool { return readyz() == "no live workflow host" }, 10*time.Second, 20*time.Millisecond)

	ns.Stop()
	require.Eventually(t, func() bool { return readyz() == "nats disconnected" }, 5*time.Second, 20*time.Millisecond)
	select {
	case err := <-done:
		require.FailNow(t, "run returned while NATS was merely gone", "%v", err)
	case <-time.After(time.Second):
	}

	natstest.ServerAt(t, "", addr, "a-token-the-ingress-does-not-have")
	back := time.Now()
	select {
	case err := <-done:
		t.Logf("run returned %v after NATS came back with a token", time.Since(back).Round(time.Millisecond))
		require.Error(t, err)
		// nats.go keeps the server's words or its own ErrAuthorization, by where it met them.
		assert.Equal(t, "nats connection agentbus-ingress closed: nats: authorization violation", strings.ToLower(err.Error()))
	case <-time.After(10 * time.Second):
		require.FailNow(t, "run still runs with its connection closed", "%s", logs.String())
	}
	assert.Contains(t, logs.String(), `level=ERROR msg="NATS connection closed for good`)
}
