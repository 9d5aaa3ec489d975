package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

func TestHealthcheck(t *testing.T) {
	paths := make(chan string, 10)
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	}))
	t.Cleanup(ready.Close)
	starting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"starting"}`))
	}))
	t.Cleanup(starting.Close)
	_, readyPort, err := net.SplitHostPort(ready.Listener.Addr().String())
	require.NoError(t, err)

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // "" means healthy
	}{
		{name: "ready", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_METRICS_ADDR": ready.Listener.Addr().String()}},
		{name: "listening on every interface", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_METRICS_ADDR": "0.0.0.0:" + readyPort}},
		{name: "flag", args: []string{"healthcheck", "-metrics-addr", ready.Listener.Addr().String()}},
		{name: "starting", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_METRICS_ADDR": starting.Listener.Addr().String()}, wantErr: `503 Service Unavailable: {"status":"starting"}`},
		{name: "no health endpoint configured", args: []string{"healthcheck"}, wantErr: "AGENTBUS_METRICS_ADDR is not set"},
		{name: "NATS URL not needed", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_METRICS_ADDR": ready.Listener.Addr().String(), "AGENTBUS_NATS_URL": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			err := run(context.Background(), tt.args, lookup, io.Discard)
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, "/readyz", <-paths)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.NotContains(t, err.Error(), "\n", "main prints it as one line")
		})
	}
}

var healthAddrRE = regexp.MustCompile(`msg="health endpoint listening" addr=(\S+)`)

// TestRunServesHealth runs the whole workflow host against an embedded NATS with
// AGENTBUS_METRICS_ADDR set: /readyz turns 200 once the host runs, the healthcheck subcommand
// agrees, and the endpoint is gone when run returns.
func TestRunServesHealth(t *testing.T) {
	ns := natstest.Server(t, "")
	env := map[string]string{
		"AGENTBUS_NATS_URL":     ns.ClientURL(),
		"AGENTBUS_METRICS_ADDR": "127.0.0.1:0",
		"AGENTBUS_PARTITIONS":   "2",
		"AGENTBUS_HOST_ID":      "health-test",
	}
	logs := &natstest.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, logs)
	}()

	var addr string
	require.Eventually(t, func() bool {
		if m := healthAddrRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, 30*time.Second, 20*time.Millisecond, "no health endpoint in the log:\n%s", logs.String())

	client := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) int {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, get("/healthz"))
	require.Eventually(t, func() bool { return get("/readyz") == http.StatusOK }, 30*time.Second, 50*time.Millisecond, "never ready:\n%s", logs.String())
	assert.Equal(t, http.StatusNotFound, get("/other"))
	assertServesMetrics(t, client, "http://"+addr+"/metrics")
	// Echo's host and the remote agents' hosts read one directory, one cache of the tenants'
	// limits and one follower of the slot grants: one watch of each bucket (every heartbeat of
	// every host reaches each watch of the hosts bucket; each cache holds every tenant's record).
	js := natstest.JetStream(t, ns)
	for _, bucket := range []string{subject.HostsBucket, subject.TenantLimitsBucket, subject.SlotGrantsBucket} {
		s, err := js.Stream(ctx, "KV_"+bucket)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, info.State.Consumers, "watches of %s", bucket)
	}

	check := map[string]string{"AGENTBUS_METRICS_ADDR": addr}
	assert.NoError(t, run(ctx, []string{"healthcheck"}, func(k string) (string, bool) { v, ok := check[k]; return v, ok }, io.Discard))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(40 * time.Second):
		require.FailNow(t, "run did not return after cancel")
	}
	_, err := net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "the health endpoint must close with run")
}

// assertServesMetrics scrapes url and finds the host's, the Go runtime's and the process's
// metrics.
func assertServesMetrics(t *testing.T, client *http.Client, url string) {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	for _, name := range []string{`agentbus_partitions_owned{agent="Echo"} 2`, "agentbus_instances_live", "go_goroutines", "process_cpu_seconds_total"} {
		assert.Contains(t, string(b), name)
	}
}
