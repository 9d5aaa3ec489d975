package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/gostack"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The hosts of a process that share their watches (agent.ShareWatches) share one relay of fired
// timers: however many hosts run (one per remote agent in a workflow host process), the
// deployment's one relay consumer holds one waiting pull request of theirs, not one each (it
// holds 512 at most), and timers fire.
func TestHostsOfAProcessShareOneTimerRelay(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{NoAgents: true}) // its own shared relay: one pull
	shared := sharedConfig(t, s)
	require.NotNil(t, shared.TimerRelay)

	for i, a := range []*agent.Agent{echo.New(), agent.New("Two"), agent.New("Three")} {
		cfg := shared
		cfg.ID, cfg.Agents = []string{"one", "two", "three"}[i], []*agent.Agent{a}
		startHost(t, s, cfg)
	}
	cons, err := s.Res.Timers[0].Consumer(t.Context(), "timer-relay")
	require.NoError(t, err)
	most := 0
	for range 20 {
		info, err := cons.Info(t.Context())
		require.NoError(t, err)
		most = max(most, info.NumWaiting)
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, 2, most, "pull requests waiting at the relay consumer: the stack's relay and the shared one")

	due := remindIn(t, s, "shared", "stretch", 200)
	got := waitPosts(t, s, "shared", "ada", "stretch", 1, 5*time.Second)
	t.Logf("posted %v after it was due", got[0].CreatedAt.Sub(due))
}

// sharedConfig is the configuration of hosts of one process beside the stack s: a connection of
// their own and what agent.ShareWatches makes for them to share, closed when the test ends.
func sharedConfig(t *testing.T, s *stacktest.Stack) agent.HostConfig {
	t.Helper()
	nc, err := s.NATS.Connect("shared")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	shared := agent.HostConfig{Conn: nc}
	closeShared, err := agent.ShareWatches(t.Context(), s.Res, &shared, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeShared()) })
	return shared
}

// The hosts of a process that share their watches share one usage meter: however many hosts run
// (one per remote agent in a workflow host process), the process runs one meter loop, and what a
// host stores still counts in its tenant's usage, published after the host stopped too.
func TestHostsOfAProcessShareOneMeter(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	meters := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "usage.(*Meter).Run")
	}
	before := meters()
	shared := sharedConfig(t, s)
	require.NotNil(t, shared.Meter)
	assert.Equal(t, before+1, meters(), "the process's meter")

	var cancels []context.CancelFunc
	for i, a := range []*agent.Agent{echo.New(), agent.New("Two"), agent.New("Three")} {
		cfg := shared
		cfg.ID, cfg.Agents = []string{"one", "two", "three"}[i], []*agent.Agent{a}
		_, _, cancel := startHost(t, s, cfg)
		cancels = append(cancels, cancel)
	}
	assert.Equal(t, before+1, meters(), "no meter of the hosts' own")

	status, _, body := post(t, s, echo.Name, "echo", "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	for _, cancel := range cancels {
		cancel()
	}
	require.Eventually(t, func() bool {
		var u struct {
			Bytes map[string]int64 `json:"bytes"`
		}
		adminGet(t, s, "/api/v1/admin/tenants/default/usage", &u)
		return u.Bytes["history"] > 0 && u.Bytes["state"] > 0
	}, 10*time.Second, 50*time.Millisecond, "the webhook's record and its instance counted")
}

// The hosts of idle agents in one process (a remote agent each) hold one goroutine each, their
// Run: once their partitions doze, their periodic jobs (keep-alive, sweep of instances, inbox
// keeper, load reports, slot grants, pending reads) rest on timers, not parked goroutines.
func TestIdleHostsHoldOneGoroutineEach(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	shared := sharedConfig(t, s)
	shared.Metrics = prometheus.NewRegistry() // its pending reads are a periodic job too
	// jobs are the goroutines in the hosts' code besides their Run.
	jobs := func() []string {
		var out []string
		for _, g := range gostack.Naming("agent.(*Host).", "agent.(*grants).", "agent.(*liveSet).", "bus.(*InboxKeeper).") {
			if !strings.Contains(g, "agent.(*Host).Run(") {
				out = append(out, g)
			}
		}
		return out
	}

	const hosts = 5
	for i := range hosts {
		a := agent.New(fmt.Sprintf("Quiet%d", i))
		a.WebhookFunc("hit", func(context.Context, *agent.WebhookRequest) agent.Response { return agent.Status(http.StatusOK) })
		cfg := shared
		cfg.ID, cfg.Agents, cfg.IdleAfter = fmt.Sprintf("quiet-%d", i), []*agent.Agent{a}, 200*time.Millisecond
		startHost(t, s, cfg)
		status, _, body := post(t, s, a.Name(), "hit", "")
		require.Equal(t, http.StatusOK, status, "%s", body)
	}
	held := jobs()
	for deadline := time.Now().Add(10 * time.Second); len(held) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		held = jobs()
	}
	require.Empty(t, held, "goroutines of idle hosts besides their Run:\n%s", strings.Join(held, "\n\n"))
	assert.Len(t, gostack.Naming("agent.(*Host).Run("), hosts)
}

// The hosts of a process share one window of the requests they acknowledged
// (HostConfig.Acked): ten hosts, a remote agent each, that each acknowledged a request hold one
// window of 2 MiB between them, not one each.
func TestHostsOfAProcessShareOneAckedWindow(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	shared := sharedConfig(t, s)
	require.NotNil(t, shared.Acked)
	const hosts = 10
	var names []string
	for i := range hosts {
		a := agent.New(fmt.Sprintf("Acker%d", i))
		a.WebhookFunc("hit", func(context.Context, *agent.WebhookRequest) agent.Response { return agent.Status(http.StatusOK) })
		cfg := shared
		cfg.ID, cfg.Agents = fmt.Sprintf("acker-%d", i), []*agent.Agent{a}
		startHost(t, s, cfg)
		names = append(names, a.Name())
	}
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	// A first call of an agent like the others, so that what every first call costs the bus is
	// paid before the count (and the window taken).
	status, _, body := post(t, s, names[0], "hit", "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	before := heap()
	for _, name := range names[1:] {
		status, _, body := post(t, s, name, "hit", "")
		require.Equal(t, http.StatusOK, status, "%s", body)
	}
	grew := heap() - before
	t.Logf("nine more hosts acknowledged a request each: the heap grew by %.1f MiB", float64(grew)/(1<<20))
	assert.Less(t, grew, int64(6<<20), "nine windows of 2 MiB would be 18 MiB")
}
