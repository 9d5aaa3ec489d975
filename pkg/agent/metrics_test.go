package agent_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
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

// counted asserts that the counter of family name with labels want reaches n. A host counts a
// handler's outcome just after its answer leaves, so the caller may have it first.
func counted(t *testing.T, g prometheus.Gatherer, name string, want map[string]string, n float64, msg ...any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for value(t, g, name, want) != n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.EqualValues(t, n, value(t, g, name, want), msg...)
}

func outcome(agentName, kind, method, o string) map[string]string {
	return map[string]string{"agent": agentName, "kind": kind, "method": method, "outcome": o}
}

// A host given a registry counts each handler's runs and outcomes, the partitions it owns, the
// instances it holds and the requests waiting in its partitions.
func TestHostMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := stacktest.Start(t, stacktest.Options{Host: agent.HostConfig{Metrics: reg}})

	const calls = 3
	for range calls {
		status, _, b := post(t, s, "Echo", "echo", "hello=world")
		require.Equal(t, http.StatusOK, status, "%s", b)
	}

	echo := map[string]string{"agent": "Echo", "kind": "webhook", "method": "echo"}
	assert.EqualValues(t, calls, observations(t, reg, "agentbus_handler_duration_seconds", echo))
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "echo", "ok"), calls)
	for _, o := range []string{"error", "retried", "dead_lettered", "cached"} {
		assert.Zero(t, value(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "echo", o)), o)
	}
	assert.EqualValues(t, 4, value(t, reg, "agentbus_partitions_owned", map[string]string{"agent": "Echo"}),
		"the stack's only host owns all 4 partitions")
	assert.Zero(t, value(t, reg, "agentbus_dead_letters_total", echo))
	assert.Zero(t, value(t, reg, "agentbus_redeliveries_total", echo))

	// The instance is held while in use (TestIdleInstancesCostNothing sees the gauge go down).
	assert.EqualValues(t, 1, value(t, reg, "agentbus_instances_live", nil))

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

	// Every metric of the host is documented; deploy/grafana checks the dashboard's queries
	// against the same page.
	doc, err := os.ReadFile("../../docs/metrics.md")
	require.NoError(t, err)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		assert.Contains(t, string(doc), "`"+f.GetName()+"`", "docs/metrics.md does not document %s", f.GetName())
	}
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
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "boom", "retried"), 2)
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "boom", "dead_lettered"), 1)
	assert.Zero(t, value(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "boom", "ok")))
	counted(t, reg, "agentbus_dead_letters_total", boom, 1)
	assert.Zero(t, value(t, reg, "agentbus_dead_letters_total", map[string]string{"agent": "Flaky", "kind": "webhook", "method": "ok"}),
		"dead letters are counted by method")

	status, _, b = post(t, s, "Flaky", "flaky", "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "flaky", "retried"), 2)
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "flaky", "ok"), 1)

	status, _, b = post(t, s, "Flaky", "ok", "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Flaky", "webhook", "ok", "ok"), 1)
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
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "echo", "ok"), 4)
}

// A keyed request whose result is already cached (here a second stored copy, as a NATS cluster
// can keep when its stream leader fails) is answered from the cache without running: it counts
// as cached, and the handler runs, and is observed, once.
func TestHostMetricsCached(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := stacktest.Start(t, stacktest.Options{Host: agent.HostConfig{Metrics: reg}})
	wf := "default:Echo:Supervisor Workflow:cached"
	req := &agentbusv1.Request{
		RequestId: "cached-1", TenantId: "default", WorkflowId: wf, AgentName: "Echo",
		WorkflowType: "Supervisor Workflow", ActivationName: "cached", ParticipantId: "webhook",
		Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "count", KeepResult: true, Fingerprint: "f",
	}
	js := natstest.JetStream(t, s.NATS)
	for _, id := range []string{"copy-1", "copy-2"} {
		// Two stored copies, as if the dedupe missed.
		enqueue(t, js, req, nats.Header{subject.HeaderMsgID: {id}})
	}
	// The state call queues behind both copies in the same conversation.
	status, _, b := post(t, s, wf, "state", "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	require.True(t, strings.Contains(string(b), `"count":1`), "the second copy ran again: state %s", b)

	count := map[string]string{"agent": "Echo", "kind": "webhook", "method": "count"}
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "count", "cached"), 1, "the second copy is answered from the cache")
	counted(t, reg, "agentbus_handler_outcomes_total", outcome("Echo", "webhook", "count", "ok"), 1, "the first copy ran")
	assert.EqualValues(t, 1, observations(t, reg, "agentbus_handler_duration_seconds", count), "one run: a cached answer is no run")
	assert.Zero(t, value(t, reg, "agentbus_redeliveries_total", count),
		"a second stored copy is a new delivery, not a redelivery")
}

// A host that crashes while its handler runs leaves the request unacknowledged; JetStream
// delivers it again to the partition's next owner, which counts one redelivery and runs it.
func TestHostMetricsRedelivered(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	sa := &seqAgent{}
	const ackWait = time.Second
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()},
		Host: agent.HostConfig{ID: "survivor", AckWait: ackWait, Metrics: reg}})
	doomed, nc, cancel := startSeqOwner(t, s, sa, "survivor", agent.HostConfig{AckWait: ackWait, ShutdownGrace: 100 * time.Millisecond})

	step(t, s, "r", "1", "2s")
	waitFor(t, 5*time.Second, "the step runs on the doomed host", func() bool {
		ns, hosts := sa.starts("r")
		return len(ns) == 1 && hosts[0] == doomed
	})
	stepSeries := map[string]string{"agent": "Seq", "kind": "webhook", "method": "step"}
	assert.Zero(t, value(t, reg, "agentbus_redeliveries_total", stepSeries), "before the crash")
	nc.Close() // the process is gone: no heartbeat, no acknowledgement, no handover
	cancel()

	ok := outcome("Seq", "webhook", "step", "ok")
	waitFor(t, 30*time.Second, "the survivor ran the step", func() bool {
		return value(t, reg, "agentbus_handler_outcomes_total", ok) == 1
	})
	_, hosts := sa.starts("r")
	assert.Equal(t, []string{doomed, "survivor"}, hosts, "the step ran on the doomed host, then once on the survivor")
	// Once when its ack wait ran out, and once more if the survivor, taking the partition over,
	// gave it back on the dead host's behalf just as that delivery reached it.
	assert.GreaterOrEqual(t, value(t, reg, "agentbus_redeliveries_total", stepSeries), float64(1),
		"the survivor got the request a second time")
}
