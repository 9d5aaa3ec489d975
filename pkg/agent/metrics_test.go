package agent_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// series returns the metrics of family name whose labels include want.
func series(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) []*dto.Metric {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := make(map[string]string)
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// value is the value of the one counter or gauge of family name with labels want; 0 if none.
func value(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	ms := series(t, g, name, want)
	require.LessOrEqual(t, len(ms), 1, "%s%v matches several series", name, want)
	if len(ms) == 0 {
		return 0
	}
	if c := ms[0].GetCounter(); c != nil {
		return c.GetValue()
	}
	return ms[0].GetGauge().GetValue()
}

// observations is the sample count of the one histogram of family name with labels want.
func observations(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) uint64 {
	t.Helper()
	ms := series(t, g, name, want)
	require.Len(t, ms, 1, "%s%v", name, want)
	return ms[0].GetHistogram().GetSampleCount()
}

func outcome(agentName, kind, method, o string) map[string]string {
	return map[string]string{"agent": agentName, "kind": kind, "method": method, "outcome": o}
}

// A host given a registry counts each handler's runs and outcomes, the partitions it owns, the
// instances it holds and the requests waiting in its partitions.
func TestHostMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := stacktest.Start(t, stacktest.Options{Host: agent.HostConfig{Metrics: reg}})

	const calls = 3
	for range calls {
		status, _, b := post(t, s, "Echo", "echo", "hello=world")
		require.Equal(t, http.StatusOK, status, "%s", b)
	}

	echo := map[string]string{"agent": "Echo", "kind": "webhook", "method": "echo"}
	assert.EqualValues(t, calls, observations(t, reg, "agentbus_handler_duration_seconds", echo))
	assert.EqualValues(t, calls, value(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "echo", "ok")))
	for _, o := range []string{"error", "retried", "dead_lettered", "cached"} {
		assert.Zero(t, value(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "echo", o)), o)
	}
	assert.EqualValues(t, 4, value(t, reg, "agentbus_partitions_owned", map[string]string{"agent": "Echo"}),
		"the stack's only host owns all 4 partitions")
	assert.Zero(t, value(t, reg, "agentbus_dead_letters_total", map[string]string{"agent": "Echo"}))
	assert.Zero(t, value(t, reg, "agentbus_redeliveries_total", map[string]string{"agent": "Echo"}))

	// The instance leaves memory once idle, and the gauge follows it down.
	require.Eventually(t, func() bool { return value(t, reg, "agentbus_instances_live", nil) == 0 }, 10*time.Second, 50*time.Millisecond)

	// Every owned partition reports what waits in it: nothing, all requests being answered.
	require.Eventually(t, func() bool {
		return len(series(t, reg, "agentbus_inbox_pending", map[string]string{"agent": "Echo"})) == 4
	}, 15*time.Second, 100*time.Millisecond)
	for _, m := range series(t, reg, "agentbus_inbox_pending", map[string]string{"agent": "Echo"}) {
		assert.Zero(t, m.GetGauge().GetValue())
	}

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// A handler that keeps failing counts its retries and its dead letter; one that fails twice and
// then answers counts two retries and an answer.
func TestHostMetricsDeadLetter(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &flaky{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{f.agent()}, Host: agent.HostConfig{MaxDeliveries: 3, Metrics: reg}})

	status, _, b := post(t, s, "Flaky", "boom", "")
	require.Equal(t, http.StatusInternalServerError, status, "%s", b)
	boom := map[string]string{"agent": "Flaky", "kind": "webhook", "method": "boom"}
	assert.EqualValues(t, 3, observations(t, reg, "agentbus_handler_duration_seconds", boom), "one run per attempt")
	assert.EqualValues(t, 2, value(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "boom", "retried")))
	assert.EqualValues(t, 1, value(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "boom", "dead_lettered")))
	assert.Zero(t, value(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "boom", "ok")))
	assert.EqualValues(t, 1, value(t, reg, "agentbus_dead_letters_total", map[string]string{"agent": "Flaky"}))

	status, _, b = post(t, s, "Flaky", "flaky", "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.EqualValues(t, 2, value(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "flaky", "retried")))
	assert.EqualValues(t, 1, value(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "flaky", "ok")))

	status, _, b = post(t, s, "Flaky", "ok", "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.EqualValues(t, 1, value(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "ok", "ok")))
	// Data methods are labelled by their lowercased name.
	assert.Len(t, series(t, reg, "agentbus_handler_outcomes_total", map[string]string{"agent": "Flaky", "kind": "data", "method": "boom", "outcome": "ok"}), 1,
		"a registered handler's series exist before it is called")
}

// Two hosts of one process share a registry: their counts and gauges add up.
func TestHostMetricsSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := stacktest.Start(t, stacktest.Options{Host: agent.HostConfig{Metrics: reg}})
	stop, err := s.AddHost(t.Context(), "second")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	// Ownership settles as the hosts see each other's heartbeats; the total stays the count.
	require.Eventually(t, func() bool {
		return value(t, reg, "agentbus_partitions_owned", map[string]string{"agent": "Echo"}) == 4
	}, 10*time.Second, 50*time.Millisecond)
	for range 4 {
		status, _, b := post(t, s, "Echo", "echo", "")
		require.Equal(t, http.StatusOK, status, "%s", b)
	}
	assert.EqualValues(t, 4, value(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "echo", "ok")))
}
