package bus_test

import (
	"context"
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
