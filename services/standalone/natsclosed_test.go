package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stack"
)

// The standalone's clients connect to its NATS in the process, but the server still closes one
// for good on a protocol error: here the ingress's connection publishes a subject longer than
// the server's control line, as a caller value put into a subject once did. run returns an
// error naming the cause (so main exits 1 and a supervisor starts the process again) instead of
// answering 503 to every call until restarted.
func TestRunFailsWhenNATSClosesAConnection(t *testing.T) {
	started := make(chan *stack.Stack, 1)
	testHookStarted = func(st *stack.Stack) { started <- st }
	t.Cleanup(func() { testHookStarted = nil })
	const key = "abk_test-dev-key-0123456789"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := lineSink{lines: make(chan string, 100)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, lookup(devEnv(t, key, "2")), out, io.Discard) }()
	var (
		st       *stack.Stack
		base     string
		deadline = time.After(30 * time.Second)
	)
	for st == nil || base == "" {
		select {
		case st = <-started:
		case l := <-out.lines:
			if m := urlRE.FindStringSubmatch(l + " "); m != nil {
				base = m[1]
			}
		case err := <-done:
			require.FailNow(t, "standalone exited", "run: %v", err)
		case <-deadline:
			require.FailNow(t, "standalone did not start")
		}
	}
	n, _ := count(t, base, key)
	require.Equal(t, 1, n)

	for _, nc := range st.Conns() {
		if nc.Opts.Name == "agentbus-ingress" {
			require.NoError(t, nc.Publish(strings.Repeat("a", 10_000), nil))
		}
	}
	closed := time.Now()
	select {
	case err := <-done:
		t.Logf("run returned %v after the connection was closed", time.Since(closed).Round(time.Millisecond))
		require.Error(t, err)
		assert.Equal(t, "NATS connection agentbus-ingress closed: nats: maximum control line exceeded", err.Error())
	case <-time.After(10 * time.Second):
		require.FailNow(t, "run still runs with a connection closed")
	}
}
