package bus_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// withStream starts an embedded server with one stream of the name over subjects and returns a
// connection to it, its JetStream context and a context that ends with the test (at most 20 s).
func withStream(t *testing.T, name string, subjects ...string) (*nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects})
	require.NoError(t, err)
	return nc, js, ctx
}

// lossyServer subscribes to subjects as a server would that takes each message's first copy and
// dies before it acknowledges it: only later copies get an acknowledgement (of stream name).
// It returns how many copies of each subject it received.
func lossyServer(t *testing.T, nc *nats.Conn, subjects, name string) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := make(map[string]int)
	sub, err := nc.Subscribe(subjects, func(m *nats.Msg) {
		mu.Lock()
		seen[m.Subject]++
		n := seen[m.Subject]
		mu.Unlock()
		if n > 1 {
			_ = m.Respond([]byte(`{"stream":"` + name + `","seq":1}`))
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}
