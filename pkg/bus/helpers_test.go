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

// lossyServer subscribes to subjects as a stream's server would that answers the copies of
// each message it receives in turn with answers (the first copy with the first answer, and so
// on; "" is no answer at all, as from a server that died before it answered; copies after the
// last answer get the last). It returns how many copies of each subject it received.
func lossyServer(t *testing.T, nc *nats.Conn, subjects string, answers ...string) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := make(map[string]int)
	sub, err := nc.Subscribe(subjects, func(m *nats.Msg) {
		mu.Lock()
		seen[m.Subject]++
		n := seen[m.Subject]
		mu.Unlock()
		if a := answers[min(n, len(answers))-1]; a != "" {
			_ = m.Respond([]byte(a))
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

// Answers of a stream, for lossyServer.
const (
	stored        = `{"stream":"LOSSY","seq":1}`
	msgIDInFlight = `{"type":"io.nats.jetstream.api.v1.pub_ack_response","error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}`
)
