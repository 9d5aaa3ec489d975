package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// The host runs against a NATS server that goes away and comes back on the same store: /readyz
// answers 503 "nats disconnected" in between and 200 again once the host consumes its
// partitions anew, without a restart. Then the server comes back requiring an authorization
// token the host does not have: nats.go closes the connection for good, and run returns an
// error naming the cause (so main exits 1 and a supervisor starts the process again).
func TestRunAcrossNATSRestarts(t *testing.T) {
	dir := t.TempDir()
	ns := natstest.Server(t, dir)
	addr := ns.Addr().String()
	env := map[string]string{
		"AGENTBUS_NATS_URL":     ns.ClientURL(),
		"AGENTBUS_METRICS_ADDR": "127.0.0.1:0",
		"AGENTBUS_PARTITIONS":   "2",
		"AGENTBUS_HOST_ID":      "restart-test",
	}
	logs := &natstest.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, logs)
	}()
	var health string
	require.Eventually(t, func() bool {
		if m := healthAddrRE.FindStringSubmatch(logs.String()); m != nil {
			health = "http://" + m[1]
		}
		return health != ""
	}, 30*time.Second, 20*time.Millisecond, "no health endpoint in the log:\n%s", logs.String())

	client := &http.Client{Timeout: 2 * time.Second}
	readyz := func() (int, string) {
		resp, err := client.Get(health + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var body struct{ Status string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Status
	}
	ready := func() bool { code, _ := readyz(); return code == http.StatusOK }
	require.Eventually(t, ready, 30*time.Second, 20*time.Millisecond, "never ready:\n%s", logs.String())

	ns.Stop()
	require.Eventually(t, func() bool {
		code, status := readyz()
		return code == http.StatusServiceUnavailable && status == "nats disconnected"
	}, 5*time.Second, 20*time.Millisecond)
	ns = natstest.ServerAt(t, dir, addr, "")
	back := time.Now()
	require.Eventually(t, ready, 30*time.Second, 20*time.Millisecond, "not ready again:\n%s", logs.String())
	t.Logf("ready again %v after NATS came back", time.Since(back).Round(time.Millisecond))
	select {
	case err := <-done:
		require.FailNow(t, "run returned across a NATS restart", "%v", err)
	default:
	}

	ns.Stop()
	natstest.ServerAt(t, "", addr, "a-token-the-host-does-not-have")
	back = time.Now()
	select {
	case err := <-done:
		t.Logf("run returned %v after NATS came back with a token", time.Since(back).Round(time.Millisecond))
		require.Error(t, err)
		// nats.go keeps the server's words or its own ErrAuthorization, by where it met them.
		assert.Equal(t, "nats connection agentbus-workflowhost closed: nats: authorization violation", strings.ToLower(err.Error()))
	case <-time.After(15 * time.Second):
		require.FailNow(t, "run still runs with its connection closed", "%s", logs.String())
	}
	assert.Contains(t, logs.String(), `level=ERROR msg="NATS connection closed for good`)
}
