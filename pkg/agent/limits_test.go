package agent_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
)

func ptr[T any](v T) *T { return &v }

// setLimits stores a tenant's limits as the admin API does.
func setLimits(t *testing.T, s *stacktest.Stack, tenant string, l tenantlimits.Limits) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := tenantlimits.NewStore(s.Res.TenantLimits).Put(ctx, tenant, l, "test")
	require.NoError(t, err)
}

// A tenant's cap on its requests running at once holds over three hosts together: its requests,
// spread over them by partition, never run more at once than the cap, and all of them run;
// another tenant, without a cap, is not held by it. Raised while they wait, the cap lets more
// run within a second.
func TestCapAcrossHosts(t *testing.T) {
	t.Parallel()
	sa := newSlowAgent("Slow", 40*time.Millisecond)
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	// Set before the hosts start, which load it: a cap set while they run holds on each once
	// its watch delivers it (within a second, docs/limits.md), and requests it starts before
	// that are not held by it.
	setLimits(t, s, "default", tenantlimits.Limits{Values: tenantlimits.Values{MaxConcurrent: ptr(3)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"first", "second", "third"} {
		stop, err := s.AddHost(ctx, id, sa.agent(agent.MaxConcurrent(16)))
		require.NoError(t, err)
		defer func() { assert.NoError(t, stop()) }()
	}

	// The grants' record, read meanwhile: its grants never add up to more than the cap, and every
	// host holds some at some time (not necessarily all three at once: a host gives its excess
	// back only once another wants more, which under load can take longer than the backlog).
	var mostGranted int
	granted := map[string]bool{}
	watching, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-watching:
				return
			case <-time.After(5 * time.Millisecond):
			}
			e, err := s.Res.SlotGrants.Get(ctx, subject.SlotGrantKey("default", "Slow"))
			if err != nil {
				continue
			}
			var rec struct{ Hosts map[string]int }
			if json.Unmarshal(e.Value(), &rec) == nil {
				sum := 0
				for h, g := range rec.Hosts {
					sum += g
					if g > 0 {
						granted[h] = true
					}
				}
				mostGranted = max(mostGranted, sum)
			}
		}
	}()

	const count = 120
	backlog(t, s, s.Key, "default", "Slow", "a-", count)
	backlog(t, s, s.OtherKey, "other", "Slow", "b-", 40)
	waitFor(t, 30*time.Second, "every request handled", func() bool {
		return sa.handled("default") == count && sa.handled("other") == 40
	})
	close(watching)
	<-watched
	assert.Len(t, granted, 3, "every host held a part of the cap")
	assert.Equal(t, 3, mostGranted, "the parts add up to the cap")
	sa.mu.Lock()
	peak, otherPeak := sa.peak["default"], sa.peak["other"]
	sa.peak["default"] = 0
	sa.mu.Unlock()
	t.Logf("the most requests of the capped tenant running at once over the three hosts: %d; of the other: %d", peak, otherPeak)
	assert.Equal(t, 3, peak, "the cap of 3, reached and never passed")
	assert.Greater(t, otherPeak, 3, "the other tenant is not capped")

	// A raised cap holds within a second, and the tenant's requests use it.
	sa.gate = make(chan struct{})
	for i := range 8 {
		go sendWork(t, s, s.Key, "default", "Slow", "c-"+strconv.Itoa(i), "p", 1, false)
	}
	running := func() int { sa.mu.Lock(); defer sa.mu.Unlock(); return sa.conc["default"] }
	for start := time.Now(); running() != 3; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			e, err := s.Res.SlotGrants.Get(ctx, subject.SlotGrantKey("default", "Slow"))
			grants := "none"
			if err == nil {
				grants = string(e.Value())
			}
			require.Failf(t, "the cap of 3 not used within 20 s", "%d running; grants %s (err %v)", running(), grants, err)
		}
	}
	setLimits(t, s, "default", tenantlimits.Limits{Values: tenantlimits.Values{MaxConcurrent: ptr(6)}})
	took := waitFor(t, 5*time.Second, "6 running", func() bool { sa.mu.Lock(); defer sa.mu.Unlock(); return sa.conc["default"] == 6 })
	t.Logf("the raised cap was used %v after it was written", took)
	assert.Less(t, took, time.Second)
	close(sa.gate)
	waitFor(t, 10*time.Second, "every request handled", func() bool { return sa.handled("default") == count+8 })
	sa.mu.Lock()
	defer sa.mu.Unlock()
	assert.Equal(t, 6, sa.peak["default"])
}

// The host's queue metrics: what it holds of each tenant's requests of an agent, queued and
// running, and the oldest wait, as of its last load report.
func TestTenantQueueMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	sa := newSlowAgent("Slow", 0)
	sa.gate = make(chan struct{})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{sa.agent(agent.MaxConcurrent(1))}, Host: agent.HostConfig{Metrics: reg}})
	for i := range 3 {
		go sendWork(t, s, s.Key, "default", "Slow", "m-"+strconv.Itoa(i), "p", 1, false)
	}
	labels := map[string]string{"agent": "Slow", "tenant": "default"}
	waitFor(t, 5*time.Second, "2 queued, 1 running", func() bool {
		return value(t, reg, "agentbus_tenant_queued_requests", labels) == 2 && value(t, reg, "agentbus_tenant_running_requests", labels) == 1
	})
	waitFor(t, 5*time.Second, "an oldest wait", func() bool { return value(t, reg, "agentbus_tenant_oldest_queued_seconds", labels) > 0 })
	close(sa.gate)
	waitFor(t, 5*time.Second, "nothing held, no series", func() bool {
		return len(series(t, reg, "agentbus_tenant_queued_requests", nil)) == 0
	})
}
