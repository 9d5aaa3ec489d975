package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// WhenGone stays open while NATS is connected and closes once it is gone.
func TestWhenGone(t *testing.T) {
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	gone, stop := bus.WhenGone(nc)
	defer stop()
	select {
	case <-gone:
		require.FailNow(t, "gone while connected")
	case <-time.After(bus.GoneAfter + 300*time.Millisecond):
	}
	srv.Shutdown()
	start := time.Now()
	select {
	case <-gone:
	case <-time.After(3 * bus.GoneAfter):
		require.FailNow(t, "not gone after the server shut down")
	}
	assert.Less(t, time.Since(start), 2*bus.GoneAfter, "gone too late")
}

// CloseWhenStopping leaves the connection alone until its context ends, closes it once the bound
// has passed after that, and does nothing once stopped.
func TestCloseWhenStopping(t *testing.T) {
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	stop := bus.CloseWhenStopping(ctx, nc, 200*time.Millisecond, nil)
	defer stop()
	time.Sleep(300 * time.Millisecond)
	require.False(t, nc.IsClosed(), "closed before the context ended")
	cancel()
	require.Eventually(t, nc.IsClosed, 2*time.Second, 10*time.Millisecond, "not closed after the bound")

	other := natstest.Conn(t, srv)
	ctx2, cancel2 := context.WithCancel(context.Background())
	bus.CloseWhenStopping(ctx2, other, 100*time.Millisecond, nil)()
	cancel2()
	time.Sleep(300 * time.Millisecond)
	assert.False(t, other.IsClosed(), "closed after the watch stopped")
}
