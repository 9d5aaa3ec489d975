package agent_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A host that holds nothing sends no load report and stops counting; the first request that
// comes after is reported while it runs, and once it ended one empty report says so.
func TestLoadReportAfterIdle(t *testing.T) {
	t.Parallel()
	sa := newSlowAgent("Reported", 0)
	sa.gate = make(chan struct{})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{sa.agent()}})

	var (
		mu      sync.Mutex
		reports []inspect.Load
	)
	sub, err := natstest.Conn(t, s.NATS).Subscribe(subject.HostLoad, func(m *nats.Msg) {
		var l inspect.Load
		if json.Unmarshal(m.Data, &l) == nil {
			mu.Lock()
			reports = append(reports, l)
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(reports) }

	time.Sleep(4 * inspect.LoadEvery)
	require.Zero(t, count(), "an idle host reports nothing")

	done := make(chan struct{})
	go func() {
		defer close(done)
		sendWork(t, s, s.Key, "default", "Reported", "after-idle", "p", 1, true)
	}()
	waitFor(t, 10*time.Second, "a report of the running request", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range reports {
			for _, e := range l.Entries {
				if e.Tenant == "default" && e.Agent == "Reported" && e.Running == 1 {
					return true
				}
			}
		}
		return false
	})
	close(sa.gate)
	<-done
	waitFor(t, 10*time.Second, "an empty report once the request ended", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reports[len(reports)-1].Entries) == 0
	})
	n := count()
	time.Sleep(4 * inspect.LoadEvery)
	require.Equal(t, n, count(), "idle again, the host reports nothing more")
}
