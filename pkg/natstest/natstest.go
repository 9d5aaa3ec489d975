// Package natstest starts embedded NATS servers for tests: a real server with JetStream on a
// temporary file store, stopped when the test ends.
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"

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
	if err != nil {
		t.Fatalf("starting NATS: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Conn opens a connection to s, closed when the test ends.
func Conn(t testing.TB, s *natsembed.Server) *nats.Conn {
	t.Helper()
	nc, err := s.Connect(t.Name())
	if err != nil {
		t.Fatalf("connecting to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
