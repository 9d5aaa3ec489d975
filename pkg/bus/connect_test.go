package bus_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// TestLogAsyncErrors: a subscription too slow to keep up, whose messages the client drops, is
// logged with its subject and what it dropped, once, however many it drops within a second.
func TestLogAsyncErrors(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t, t.TempDir())
	var out natstest.LogBuffer
	nc, err := srv.Connect("slow", bus.LogAsyncErrors(slog.New(slog.NewTextHandler(&out, nil))))
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sub, err := nc.Subscribe("slow.replies", func(*nats.Msg) { <-release })
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(2, 1<<20))
	pub := natstest.Conn(t, srv)
	for range 200 {
		require.NoError(t, pub.Publish("slow.replies", []byte("x")))
	}
	require.NoError(t, pub.Flush())

	require.Eventually(t, func() bool { return strings.Contains(out.String(), "slow consumer") }, 5*time.Second, 10*time.Millisecond)
	line := out.String()
	assert.Equal(t, 1, strings.Count(line, "NATS reported an error"), "logged once within the second: %s", line)
	assert.Contains(t, line, "subject=slow.replies")
	assert.Contains(t, line, "level=WARN")
	assert.Regexp(t, `dropped=[1-9]`, line)
}
