package usage_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
)

// TestErasedCountersReachAReaderThatMissedThem: a reader whose deliveries of a tenant's
// counters are lost while they are zeroed (its consumer then starts again after the last
// message it applied, as an ordered consumer does) still reads the zeros, which stay in the
// stream for a while; the erasure then removes every counter of the tenant, and the other
// tenants keep theirs.
func TestErasedCountersReachAReaderThatMissedThem(t *testing.T) {
	srv := natstest.Server(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := bus.Ensure(ctx, natstest.JetStream(t, srv), bus.Config{Partitions: 1})
	require.NoError(t, err)
	var losing atomic.Bool
	proxy := &natstest.Proxy{Server: srv, Drop: func(toServer bool, subj []byte) bool {
		return !toServer && losing.Load() && strings.Contains(string(subj), ".acme.")
	}}
	js, err := jetstream.New(proxy.Connect(t, "reader"))
	require.NoError(t, err)
	r, err := usage.Watch(ctx, js, res.Config, nil)
	require.NoError(t, err)
	t.Cleanup(r.Close)

	m := meter(t, res)
	for range 3 {
		m.AddInstance("acme")
	}
	m.Add("acme", usage.History, 100)
	m.Add("beta", usage.History, 7)
	flush(t, m)
	usageOf(t, r, "acme", bytes(100, 0, 0, 3))

	losing.Store(true)
	require.NoError(t, usage.ZeroTenant(ctx, res.JS, "acme"))
	losing.Store(false)
	// The next delivery of each stream shows the reader's consumer of it what it missed.
	m.Add("beta", usage.History, 3)
	m.AddInstance("beta")
	flush(t, m)
	usageOf(t, r, "beta", bytes(10, 0, 0, 1))
	usageOf(t, r, "acme", usage.Usage{})

	require.NoError(t, usage.EraseTenant(ctx, res.JS, "acme"))
	for _, f := range []struct{ stream, filter string }{
		{subject.UsageStream, subject.TenantUsageDays("acme")},
		{subject.UsageTotalsStream, subject.TenantUsageTotals("acme")},
	} {
		s, err := res.JS.Stream(ctx, f.stream)
		require.NoError(t, err)
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(f.filter))
		require.NoError(t, err)
		assert.Empty(t, info.State.Subjects, "acme's counters left in %s", f.stream)
	}
	assert.Equal(t, usage.Usage{}, r.Of("acme"))
	assert.Equal(t, bytes(10, 0, 0, 1), r.Of("beta"), "another tenant's counters")
}
