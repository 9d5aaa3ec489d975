// Package natstest starts embedded NATS servers for tests: a real server with JetStream on a
// temporary file store (StoreDir), stopped when the test ends; and a LogBuffer for what the
// processes around it log.
package natstest

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsembed"
)

// StoreDir is a fresh directory for a test's JetStream store, removed when the test ends: under
// /dev/shm, a memory file system, where there is one with 1 GiB free (Linux), else t.TempDir().
// The file store works there as on a disk (files, writes, syncs, restarts on the same
// directory), without the kernel's disk work for each stream created and each write: a package
// whose tests start many servers takes about a sixth less CPU (docs/development.md).
// AGENTBUS_TEST_DISK=1 keeps every store on t.TempDir()'s disk.
func StoreDir(t testing.TB) string {
	t.Helper()
	if root := memoryRoot(); root != "" && os.Getenv("AGENTBUS_TEST_DISK") == "" {
		if dir, err := os.MkdirTemp(root, "agentbus-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// Server starts an embedded NATS server with JetStream for the test. dir is its store; "" means
// a fresh StoreDir. Pass the same dir to a second Server to simulate a restart.
func Server(t testing.TB, dir string) *natsembed.Server {
	t.Helper()
	if dir == "" {
		dir = StoreDir(t)
	}
	s, err := natsembed.Start(natsembed.Config{StoreDir: dir, Listen: "127.0.0.1:-1"})
	require.NoError(t, err, "starting NATS")
	t.Cleanup(s.Stop)
	return s
}

// ServerAt starts a server like Server, serving clients on listen (host:port), such as the
// address of a server stopped before (s.Addr().String()): the clients of that one reconnect to
// this one. With token set, the server requires that authorization token, which no client of
// this package or of bus.Connect sends: nats.go closes such a connection for good once it was
// refused twice in a row.
func ServerAt(t testing.TB, dir, listen, token string) *natsembed.Server {
	t.Helper()
	if dir == "" {
		dir = StoreDir(t)
	}
	host, port, err := net.SplitHostPort(listen)
	require.NoError(t, err, "NATS listen address")
	p, err := strconv.Atoi(port)
	require.NoError(t, err, "NATS listen port")
	ns, err := server.NewServer(&server.Options{ServerName: "agentbus", JetStream: true, StoreDir: dir,
		NoSigs: true, NoLog: true, Host: host, Port: p, Authorization: token})
	require.NoError(t, err, "creating NATS")
	ns.Start()
	s := &natsembed.Server{Server: ns}
	t.Cleanup(s.Stop)
	require.True(t, ns.ReadyForConnections(10*time.Second), "NATS not ready within 10s")
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

// JetStream opens a JetStream context on a connection to s, closed when the test ends.
func JetStream(t testing.TB, s *natsembed.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Conn(t, s))
	require.NoError(t, err, "creating a JetStream context")
	return js
}

// Bus starts an embedded NATS server for the test and creates agentbus's streams, buckets and
// object stores on it (one inbox partition unless cfg says otherwise).
func Bus(t testing.TB, cfg bus.Config) *bus.Resources {
	t.Helper()
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	js := JetStream(t, Server(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := bus.Ensure(ctx, js, cfg)
	require.NoError(t, err, "creating agentbus resources")
	return res
}
