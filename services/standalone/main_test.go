package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
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
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-out.lines:
			if m := urlRE.FindStringSubmatch(l + " "); m != nil {
				return m[1], stop
			}
		case err := <-done:
			t.Fatalf("standalone exited: %v", err)
		case <-deadline:
			stop()
			t.Fatal("standalone did not start")
		}
	}
}

func count(t *testing.T, base, key string) (int, string) {
	t.Helper()
	u := base + "/api/user/webhooks/" + url.PathEscape("Echo:Conversational") + "/count?apikey=" + url.QueryEscape(key)
	resp, err := http.Post(u, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Count int    `json:"count"`
		RunID string `json:"runId"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("count: %d %v", resp.StatusCode, err)
	}
	return got.Count, got.RunID
}

func TestRestartKeepsState(t *testing.T) {
	const key = "abk_test-dev-key-0123456789"
	env := map[string]string{
		"AGENTBUS_DATA_DIR":    t.TempDir(),
		"AGENTBUS_HTTP_ADDR":   "127.0.0.1:0",
		"AGENTBUS_NATS_LISTEN": "",
		"AGENTBUS_DEV_API_KEY": key,
		"AGENTBUS_PARTITIONS":  "4",
	}
	base, stop := start(t, env)
	n1, run1 := count(t, base, key)
	n2, _ := count(t, base, key)
	stop()
	if n1 != 1 || n2 != 2 {
		t.Fatalf("counts before restart %d, %d", n1, n2)
	}

	base, stop = start(t, env)
	defer stop()
	n3, run3 := count(t, base, key)
	if n3 != 3 || run3 != run1 {
		t.Fatalf("after restart count %d on run %s, want 3 on run %s", n3, run3, run1)
	}
}

func TestGeneratedDevKeyPrintedOnce(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"AGENTBUS_DATA_DIR": dir, "AGENTBUS_HTTP_ADDR": "127.0.0.1:0", "AGENTBUS_NATS_LISTEN": "", "AGENTBUS_PARTITIONS": "2"}
	for i, wantKey := range []bool{true, false} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
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
			t.Fatalf("start %d printed %q (run: %v)", i+1, text, <-done)
		}
		if wantKey {
			base := urlRE.FindStringSubmatch(text + " ")[1]
			if n, _ := count(t, base, key); n != 1 {
				t.Fatalf("printed key does not work: count %d", n)
			}
		}
		cancel()
		go func() { _, _ = io.Copy(io.Discard, r) }()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// The standalone serves one registry on /metrics: the ingress's, the host's and the process's.
func TestMetrics(t *testing.T) {
	const key = "abk_test-dev-key-0123456789"
	env := map[string]string{
		"AGENTBUS_DATA_DIR":    t.TempDir(),
		"AGENTBUS_HTTP_ADDR":   "127.0.0.1:0",
		"AGENTBUS_NATS_LISTEN": "",
		"AGENTBUS_DEV_API_KEY": key,
		"AGENTBUS_PARTITIONS":  "2",
	}
	base, stop := start(t, env)
	defer stop()
	count(t, base, key)
	count(t, base, key)

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	for _, want := range []string{
		"agentbus_http_requests_total{",
		`agentbus_handler_duration_seconds_count{agent="Echo",kind="webhook",method="count"} 2`,
		`agentbus_handler_outcomes_total{agent="Echo",kind="webhook",method="count",outcome="ok"} 2`,
		`agentbus_partitions_owned{agent="Echo"} 2`,
		"go_goroutines",
	} {
		assert.Contains(t, string(b), want)
	}
}
