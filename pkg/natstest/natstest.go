// Package natstest starts embedded NATS servers for tests: a real server with JetStream on a
// temporary file store, stopped when the test ends.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsembed"
)

// Server starts an embedded NATS server with JetStream for the test. dir is its store; "" means
// a fresh t.TempDir(). Pass the same dir to a second Server to simulate a restart.
func Server(t testing.TB, dir string) *natsembed.Server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := natsembed.Start(natsembed.Config{StoreDir: dir, Listen: "127.0.0.1:-1"})
	require.NoError(t, err, "starting NATS")
	t.Cleanup(s.Stop)
	return s
}

// Conn opens a connection to s, closed when the test ends.
func Conn(t testing.TB, s *natsembed.Server) *nats.Conn {
	t.Helper()
	nc, err := s.Connect(t.Name())
	require.NoError(t, err, "connecting to NATS")
	t.Cleanup(nc.Close)
	return nc
}

// Bus starts an embedded NATS server for the test and creates agentbus's streams, buckets and
// object stores on it (one inbox partition unless cfg says otherwise).
func Bus(t testing.TB, cfg bus.Config) *bus.Resources {
	t.Helper()
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	js, err := jetstream.New(Conn(t, Server(t, "")))
	require.NoError(t, err, "creating a JetStream context")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := bus.Ensure(ctx, js, cfg)
	require.NoError(t, err, "creating agentbus resources")
	return res
}
