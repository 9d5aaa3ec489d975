package agent

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// The keep-alive rests while the host holds no request. A request held wakes it, and a handler
// that runs for several ack waits keeps its request: it is delivered once. Once the request is
// answered the keep-alive rests again.
func TestKeepAliveRestsWhileNothingIsHeld(t *testing.T) {
	const ackWait = 300 * time.Millisecond
	srv := natstest.Server(t, "")
	var starts atomic.Int32
	release := make(chan struct{})
	a := New("Hits")
	a.WebhookFunc("hit", func(ctx context.Context, r *WebhookRequest) Response {
		starts.Add(1)
		<-release
		return Status(http.StatusOK)
	})
	h, err := NewHost(HostConfig{Conn: natstest.Conn(t, srv), Agents: []*Agent{a}, Bus: bus.Config{Partitions: 1}, AckWait: ackWait})
	require.NoError(t, err)
	runHost(t, h)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the host stops
	nc := natstest.Conn(t, srv)

	require.Eventually(t, h.keepAlive.Resting, 5*time.Second, 5*time.Millisecond, "an idle host's keep-alive rests")
	replies := hit(t, nc, 1)
	require.Eventually(t, func() bool { return starts.Load() == 1 }, 5*time.Second, 5*time.Millisecond, "the handler runs")
	assert.False(t, h.keepAlive.Resting(), "a request held wakes the keep-alive")
	time.Sleep(4 * ackWait) // a request not kept alive is delivered again by now
	once.Do(func() { close(release) })
	select {
	case <-replies:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the request was not answered")
	}
	assert.EqualValues(t, 1, starts.Load(), "the request was delivered again while its handler ran")
	require.Eventually(t, h.keepAlive.Resting, 5*time.Second, 5*time.Millisecond, "the keep-alive rests again")
}
