package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lineSink hands the lines run prints to the test as they come.
type lineSink struct{ lines chan string }

func (s lineSink) Write(p []byte) (int, error) {
	for _, l := range strings.Split(string(p), "\n") {
		select {
		case s.lines <- l:
		default:
		}
	}
	return len(p), nil
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

var urlRE = regexp.MustCompile(`listening on (http://[0-9.]+:[0-9]+)`)

// start runs the standalone and returns its base URL and a stop function that waits for it.
func start(t *testing.T, env map[string]string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := lineSink{lines: make(chan string, 100)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, lookup(env), out, io.Discard) }()
	stop := func() {
		cancel()
		assert.NoError(t, <-done, "run")
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-out.lines:
			if m := urlRE.FindStringSubmatch(l + " "); m != nil {
				return m[1], stop
			}
		case err := <-done:
			require.FailNowf(t, "standalone exited", "run: %v", err)
		case <-deadline:
			stop()
			require.FailNow(t, "standalone did not start")
		}
	}
}

func count(t *testing.T, base, key string) (int, string) {
	t.Helper()
	u := base + "/api/user/webhooks/" + url.PathEscape("Echo:Conversational") + "/count?apikey=" + url.QueryEscape(key)
	resp, err := http.Post(u, "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	var got struct {
		Count int    `json:"count"`
		RunID string `json:"runId"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got), "count: status %d", resp.StatusCode)
	require.Equal(t, 200, resp.StatusCode, "count: status")
	return got.Count, got.RunID
}

// devEnv is the environment of a standalone with a dev key, its own data directory, no NATS
// listener and the given number of partitions.
func devEnv(t *testing.T, key, partitions string) map[string]string {
	return map[string]string{
		"AGENTBUS_DATA_DIR":    t.TempDir(),
		"AGENTBUS_HTTP_ADDR":   "127.0.0.1:0",
		"AGENTBUS_NATS_LISTEN": "",
		"AGENTBUS_DEV_API_KEY": key,
		"AGENTBUS_PARTITIONS":  partitions,
	}
}

func TestRestartKeepsState(t *testing.T) {
	const key = "abk_test-dev-key-0123456789"
	env := devEnv(t, key, "4")
	base, stop := start(t, env)
	n1, run1 := count(t, base, key)
	n2, _ := count(t, base, key)
	stop()
	require.Equal(t, 1, n1, "first count before restart")
	require.Equal(t, 2, n2, "second count before restart")

	base, stop = start(t, env)
	defer stop()
	n3, run3 := count(t, base, key)
	require.Equal(t, 3, n3, "count after restart")
	require.Equal(t, run1, run3, "run after restart")
}

func TestGeneratedDevKeyPrintedOnce(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"AGENTBUS_DATA_DIR": dir, "AGENTBUS_HTTP_ADDR": "127.0.0.1:0", "AGENTBUS_NATS_LISTEN": "", "AGENTBUS_PARTITIONS": "2"}
	for i, wantKey := range []bool{true, false} {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, nil, lookup(env), w, io.Discard); w.Close() }()
		sc := bufio.NewScanner(r)
		var printed []string
		for sc.Scan() {
			printed = append(printed, sc.Text())
			if strings.Contains(sc.Text(), "curl") || strings.Contains(sc.Text(), "AGENTBUS_DEV_API_KEY") {
				break
			}
		}
		text := strings.Join(printed, "\n")
		key := regexp.MustCompile(`abk_[A-Za-z0-9_-]{43}`).FindString(text)
		if (key != "") != wantKey {
			cancel()
			require.Equal(t, wantKey, key != "", "start %d printed a key: %q (run: %v)", i+1, text, <-done)
		}
		if wantKey {
			m := urlRE.FindStringSubmatch(text + " ")
			require.NotNil(t, m, "start %d printed no URL: %q", i+1, text)
			n, _ := count(t, m[1], key)
			require.Equal(t, 1, n, "printed key does not work: count")
		}
		cancel()
		go func() { _, _ = io.Copy(io.Discard, r) }()
		require.NoError(t, <-done)
	}
}

// The standalone serves one registry on /metrics: the ingress's, the host's and the process's.
func TestMetrics(t *testing.T) {
	const key = "abk_test-dev-key-0123456789"
	env := devEnv(t, key, "2")
	base, stop := start(t, env)
	defer stop()
	count(t, base, key)
	count(t, base, key)

	wants := []string{
		"agentbus_http_requests_total{",
		`agentbus_handler_duration_seconds_count{agent="Echo",kind="webhook",method="count"} 2`,
		`agentbus_handler_outcomes_total{agent="Echo",kind="webhook",method="count",outcome="ok"} 2`,
		`agentbus_partitions_owned{agent="Echo"} 2`,
		"go_goroutines",
	}
	// A handler's outcome is counted just after its answer leaves, so the caller may read the
	// metrics before the second call is counted: poll until every line is there, then name the
	// lines still missing.
	var text string
	assert.Eventually(t, func() bool {
		text = scrape(base)
		for _, want := range wants {
			if !strings.Contains(text, want) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "metrics never showed both calls")
	for _, want := range wants {
		assert.Contains(t, text, want)
	}
}

// scrape reads the standalone's /metrics page; it runs inside Eventually's goroutine, so it
// reports a failure as an empty page rather than through t.
func scrape(base string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// With AGENTBUS_METRICS_ADDR set, /metrics (and the probes) are served there, and the API's
// address no longer serves /metrics: it need not be reachable by the API's clients.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	const key = "abk_test-dev-key-0123456789"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opsAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	env := devEnv(t, key, "2")
	env["AGENTBUS_METRICS_ADDR"] = opsAddr
	base, stop := start(t, env)
	defer stop()
	count(t, base, key)

	ops := "http://" + opsAddr
	assert.Eventually(t, func() bool {
		text := scrape(ops)
		return strings.Contains(text, "agentbus_http_requests_total{") && strings.Contains(text, `agentbus_partitions_owned{agent="Echo"} 2`)
	}, 10*time.Second, 20*time.Millisecond, "the metrics address does not serve the ingress's and the host's metrics")
	for path, want := range map[string]int{ops + "/healthz": 200, ops + "/readyz": 200, base + "/metrics": 404, base + "/healthz": 200} {
		resp, err := http.Get(path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, path)
	}
}
