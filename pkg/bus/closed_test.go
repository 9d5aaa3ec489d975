package bus_test

import (
	"context"
	"errors"
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

// connect opens a connection with bus.Connect to srv's client address and watches it with
// FailWhenClosed under parent; it returns the connection, the watched context and the log.
func connect(t *testing.T, parent context.Context, url string) (*nats.Conn, context.Context, *natstest.LogBuffer) {
	t.Helper()
	logs := &natstest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	nc, err := bus.Connect(url, "closed-test", log)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx, stop := bus.FailWhenClosed(parent, log, nc)
	t.Cleanup(stop)
	return nc, ctx, logs
}

// waitEnded waits for ctx to end, failing the test after within.
func waitEnded(t *testing.T, ctx context.Context, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ctx.Done():
		return time.Since(start)
	case <-time.After(within):
		require.FailNow(t, "context still live", "within %v", within)
		return 0
	}
}

// A caller value too long for a subject: the server answers -ERR 'Maximum Control Line
// Exceeded' and nats.go closes the connection for good. The watched context ends with that
// cause, logged at error level.
func TestFailWhenClosedByTheServer(t *testing.T) {
	srv := natstest.Server(t, "")
	nc, ctx, logs := connect(t, context.Background(), srv.ClientURL())

	require.NoError(t, nc.Publish(strings.Repeat("a", 10_000), nil))
	took := waitEnded(t, ctx, 5*time.Second)
	t.Logf("closed by the server: noticed after %v", took.Round(time.Millisecond))
	assert.Equal(t, nats.CLOSED, nc.Status(), "nats.go reconnects after this error: the test shows nothing")

	err := bus.ClosedCause(ctx)
	require.Error(t, err)
	assert.EqualError(t, err, "NATS connection closed-test closed: nats: maximum control line exceeded")
	var ce *bus.ClosedError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "closed-test", ce.Name)
	assert.Contains(t, logs.String(), `level=ERROR msg="NATS connection closed for good`)
	assert.Contains(t, logs.String(), `err="nats: maximum control line exceeded"`)
}

// A server that comes back with an authorization token the client does not know: nats.go
// closes the connection after the second refusal, and the cause names it.
func TestFailWhenClosedAfterAuthorizationErrors(t *testing.T) {
	srv := natstest.Server(t, "")
	addr := srv.Addr().String()
	nc, ctx, _ := connect(t, context.Background(), srv.ClientURL())

	srv.Stop()
	require.Eventually(t, func() bool { return nc.Status() == nats.RECONNECTING }, 5*time.Second, 10*time.Millisecond)
	assert.NoError(t, ctx.Err(), "a lost server is not a closed connection: it reconnects")
	natstest.ServerAt(t, "", addr, "the-token")
	took := waitEnded(t, ctx, 10*time.Second)
	t.Logf("server back with a token: closed %v later", took.Round(time.Millisecond))
	// nats.go keeps the server's words or its own ErrAuthorization, by where it met them.
	err := bus.ClosedCause(ctx)
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(err.Error()), "nats: authorization violation")
}

// A connection closed once its context has ended (a process stopping), or after stop, or on
// another of its watcher's connections than the first to fail, is not reported.
func TestFailWhenClosedIgnoresIntentionalCloses(t *testing.T) {
	srv := natstest.Server(t, "")

	t.Run("while stopping", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		nc, ctx, logs := connect(t, parent, srv.ClientURL())
		stopClosing := bus.CloseWhenStopping(ctx, nc, 100*time.Millisecond, nil)
		defer stopClosing()
		cancel()
		require.Eventually(t, nc.IsClosed, 5*time.Second, 10*time.Millisecond)
		time.Sleep(100 * time.Millisecond) // the closed handler runs on nats.go's own goroutine
		assert.NoError(t, bus.ClosedCause(ctx))
		assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
		assert.NotContains(t, logs.String(), "ERROR")
	})
	t.Run("after stop", func(t *testing.T) {
		logs := &natstest.LogBuffer{}
		log := slog.New(slog.NewTextHandler(logs, nil))
		nc, err := bus.Connect(srv.ClientURL(), "closed-test", log)
		require.NoError(t, err)
		ctx, stop := bus.FailWhenClosed(context.Background(), log, nc)
		stop()
		nc.Close()
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, bus.ClosedCause(ctx))
		assert.NotContains(t, logs.String(), "ERROR")
	})
	t.Run("already closed", func(t *testing.T) {
		nc, err := bus.Connect(srv.ClientURL(), "closed-test", nil)
		require.NoError(t, err)
		nc.Close()
		ctx, stop := bus.FailWhenClosed(context.Background(), nil, nc)
		defer stop()
		waitEnded(t, ctx, time.Second)
		assert.ErrorIs(t, bus.ClosedCause(ctx), nats.ErrConnectionClosed)
	})
	t.Run("the first of several", func(t *testing.T) {
		a, err := bus.Connect(srv.ClientURL(), "a", nil)
		require.NoError(t, err)
		defer a.Close()
		b, err := bus.Connect(srv.ClientURL(), "b", nil)
		require.NoError(t, err)
		defer b.Close()
		ctx, stop := bus.FailWhenClosed(context.Background(), nil, a, b)
		defer stop()
		require.NoError(t, b.Publish(strings.Repeat("b", 10_000), nil))
		waitEnded(t, ctx, 5*time.Second)
		a.Close()
		time.Sleep(100 * time.Millisecond)
		var ce *bus.ClosedError
		require.True(t, errors.As(bus.ClosedCause(ctx), &ce))
		assert.Equal(t, "b", ce.Name)
	})
}
