package stack_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/gostack"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Every test stops what it starts: NATS servers, hosts, watches and HTTP servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}

// TestOneWatchOfTheHosts: the ingress, the host Start begins and the remote agents' hosts read one
// directory, so the stack watches the hosts and registry buckets once each (every watch receives
// every heartbeat), and its hosts share one cache of the tenants' limits (each holds every
// tenant's record; the ingress has its own), one follower of the load reports and the slot
// grants and one usage meter, as a workflow host process's do; a host added as another process
// follows them itself.
func TestOneWatchOfTheHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := stack.Start(ctx, stack.Config{DataDir: t.TempDir(), Agents: []*agent.Agent{echo.New()}, Bus: bus.Config{Partitions: 1}})
	require.NoError(t, err)
	defer func() { assert.NoError(t, st.Stop(context.Background())) }()
	remotes := remote.NewStore(st.Res, nil, 0)
	for _, name := range []string{"RemoteA", "RemoteB"} {
		_, err := remotes.Put(ctx, "", remote.Registration{Name: name, URL: "http://127.0.0.1:10/agent", Chat: true}, false)
		require.NoError(t, err)
		require.NoError(t, st.WaitLive(ctx, name), "a host of %s", name)
	}

	watches := func(bucket string) int {
		s, err := st.Res.JS.Stream(ctx, "KV_"+bucket)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		return info.State.Consumers
	}
	assert.Equal(t, 1, watches(subject.HostsBucket), "watches of the hosts bucket")
	assert.Equal(t, 1, watches(subject.RegistryBucket), "watches of the registry bucket")
	assert.Equal(t, 2, watches(subject.TenantLimitsBucket), "watches of the tenant limits: the ingress's and the hosts'")
	assert.Equal(t, 1, watches(subject.SlotGrantsBucket), "watches of the slot grants")
	loadSubs := func() int {
		sz, err := st.NATS.Subsz(&server.SubszOptions{Subscriptions: true, Test: subject.HostLoad})
		require.NoError(t, err)
		return len(sz.Subs)
	}
	assert.Equal(t, 2, loadSubs(), "subscriptions to the load reports: the ingress's and the hosts'")
	hostMeters := gostack.Filter(gostack.Naming("usage.(*Meter).Run"), "agentbus/pkg/agent.")
	assert.Len(t, hostMeters, 1, "usage meters of hosts: one for all the stack's hosts")

	stop, err := st.AddHost(ctx, "another-process")
	require.NoError(t, err)
	defer func() { assert.NoError(t, stop()) }()
	assert.Equal(t, 2, watches(subject.HostsBucket), "watches of the hosts bucket with a host of another process")
	assert.Equal(t, 3, watches(subject.TenantLimitsBucket), "watches of the tenant limits with a host of another process")
	assert.Equal(t, 2, watches(subject.SlotGrantsBucket), "watches of the slot grants with a host of another process")
	assert.Equal(t, 3, loadSubs(), "subscriptions to the load reports with a host of another process")
}
