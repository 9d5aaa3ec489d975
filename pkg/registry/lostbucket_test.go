package registry_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/registry"
)

// A NATS server that restarts on its store comes back without the hosts bucket, which is in
// memory storage: heartbeats find no stream, and the directory, finding the bucket gone when it
// reads it, ends its watch. Once a host creates the bucket again (bus.EnsureHosts, which a
// second call leaves alone), the directory watches it again and sees heartbeats, of hosts it
// never knew too, without a restart.
func TestDirectoryFollowsTheHostsBucketAcrossItsLoss(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.Server(t, dir)
	addr := srv.Addr().String()
	nc, err := bus.Connect(srv.ClientURL(), "directory", nil)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(t, err)
	logs := &natstest.LogBuffer{}
	d, err := registry.NewDirectory(ctx, res.Registry, res.Hosts, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	// Before the servers stop (their cleanups run after the test's defers). The registry
	// bucket's watch may say its consumer is gone with the first server.
	defer func() { _ = d.Close() }()
	beat := func(id string) error {
		return registry.Beat(ctx, res.Hosts, registry.Host{ID: id, Agents: []string{"Echo"}, StartedAt: time.Now()})
	}
	live := func(id string) bool {
		return slices.ContainsFunc(d.LiveHosts("Echo"), func(h registry.Host) bool { return h.ID == id })
	}
	require.NoError(t, beat("before"))
	eventually(t, 5*time.Second, "the first heartbeat", func() bool { return live("before") })

	srv.Stop()
	natstest.ServerAt(t, dir, addr, "")
	eventually(t, 10*time.Second, "a heartbeat refused for want of a stream", func() bool {
		return errors.Is(beat("before"), jetstream.ErrNoStreamResponse)
	})
	// The hosts count as they stood while the bucket cannot be read; reading it, the directory
	// finds it gone.
	eventually(t, 10*time.Second, "the watch ended", func() bool {
		d.LiveHosts("Echo")
		return strings.Contains(logs.String(), "watch of a bucket ended")
	})
	created, err := bus.EnsureHosts(ctx, js, res.Config)
	require.NoError(t, err)
	assert.True(t, created, "the bucket was not created again")
	created, err = bus.EnsureHosts(ctx, js, res.Config)
	require.NoError(t, err)
	assert.False(t, created, "an existing bucket was created again")

	start := time.Now()
	eventually(t, 5*time.Second, "a new host's heartbeat through the bucket made again", func() bool {
		require.NoError(t, beat("after"))
		return live("after")
	})
	t.Logf("a heartbeat in the bucket made again seen %v after it was made", time.Since(start).Round(time.Millisecond))
	assert.Contains(t, logs.String(), "watching the bucket again")
}
