package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbus/agentbus/pkg/idle"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/msgkind"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// The host's metrics (docs/metrics.md). Every label value comes from what the host registered
// (agent names, methods, partition numbers), never from a request, so the series stay bounded.
// The series of each registered handler are made up front: a request then costs a map lookup, a
// histogram Observe and a counter Inc, and no NATS round trip.
//
// Hosts of one process may share a registry (the standalone, tests with several hosts): they
// count into the same series, and the gauges add up to what the process's hosts hold.

// outcome is how a handler's request ended, the outcome label of agentbus_handler_outcomes_total.
type outcome int

const (
	outcomeOK           outcome = iota // the handler answered
	outcomeError                       // the handler answered an error (see errorStatus)
	outcomeRetried                     // the handler failed passingly and is run again
	outcomeDeadLettered                // the request was kept as a dead letter
	outcomeCached                      // a redelivery answered from the result cache
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "error", "retried", "dead_lettered", "cached"}

// handlerBuckets spans quick webhooks to model calls that take a minute.
var handlerBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// pendingEvery is how often the host reads the unprocessed requests of the partitions it owns.
const pendingEvery = 5 * time.Second

// hostMetrics are a host's metrics; nil (no HostConfig.Metrics) counts nothing.
type hostMetrics struct {
	handlers map[handlerKey]*handlerMetrics
	// unhandled counts, by agent, the redeliveries and dead letters of requests for which the
	// agent has no handler (kind "unknown").
	unhandled map[string]*requestCounters
	owned     map[string]prometheus.Gauge // by agent
	dozing    map[string]prometheus.Gauge // by agent
	live      prometheus.Gauge
	pending   *prometheus.GaugeVec // agent, partition
}

// handlerKey names one registered handler: method is the webhook's or the lowercased Data
// method's name, empty for Chat and File, which have one handler each.
type handlerKey struct {
	agent  string
	kind   agentbusv1.Kind
	method string
}

// handlerMetrics are the series of one handler.
type handlerMetrics struct {
	duration prometheus.Observer
	outcomes [numOutcomes]prometheus.Counter
	requestCounters
}

// requestCounters count what happened to the requests of one handler on the bus.
type requestCounters struct {
	redeliveries, deadLetters prometheus.Counter
}

// hostVecs are the host metrics' vectors in a registry, which the hosts of a process share.
type hostVecs struct {
	duration                            *prometheus.HistogramVec
	outcomes, redeliveries, deadLetters *prometheus.CounterVec
	owned, dozing, pending              *prometheus.GaugeVec
	live                                prometheus.Gauge
}

// registerHostVecs registers the host metrics in r, or returns those registered already.
func registerHostVecs(r prometheus.Registerer) (v hostVecs, err error) {
	if v.duration, err = metrics.Register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentbus_handler_duration_seconds",
		Help:    "How long agent handlers ran, per attempt.",
		Buckets: handlerBuckets,
	}, []string{"agent", "kind", "method"})); err != nil {
		return v, err
	}
	if v.outcomes, err = metrics.Register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbus_handler_outcomes_total",
		Help: "How handled requests ended: ok, error (the handler answered an error), retried, dead_lettered, cached (answered from the result cache).",
	}, []string{"agent", "kind", "method", "outcome"})); err != nil {
		return v, err
	}
	if v.redeliveries, err = metrics.Register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbus_redeliveries_total",
		Help: "Requests the bus delivered more than once (a host stopped or crashed with them, or gave them back).",
	}, []string{"agent", "kind", "method"})); err != nil {
		return v, err
	}
	if v.deadLetters, err = metrics.Register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbus_dead_letters_total",
		Help: "Requests kept as dead letters.",
	}, []string{"agent", "kind", "method"})); err != nil {
		return v, err
	}
	if v.owned, err = metrics.Register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "agentbus_partitions_owned",
		Help: "Inbox partitions the host consumes now.",
	}, []string{"agent"})); err != nil {
		return v, err
	}
	if v.dozing, err = metrics.Register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "agentbus_partitions_dozing",
		Help: "Inbox partitions the host owns and does not pull while they are idle.",
	}, []string{"agent"})); err != nil {
		return v, err
	}
	if v.live, err = metrics.Register(r, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "agentbus_instances_live",
		Help: "Workflow instances the host holds in memory.",
	})); err != nil {
		return v, err
	}
	v.pending, err = metrics.Register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "agentbus_inbox_pending",
		Help: "Requests of a partition the host owns that are not processed yet: waiting in the inbox or delivered and not acknowledged.",
	}, []string{"agent", "partition"}))
	return v, err
}

// ForgetMetrics removes agent's series from r, once no host of the process serves the agent
// any more: a workflow host process calls it when it stops the host of a remote agent whose
// registration was removed or replaced, so that its metrics do not keep the series of every
// agent it ever served (a tenant's agents come and go, and a deleted tenant's go with it).
func ForgetMetrics(r prometheus.Registerer, agent string) error {
	if r == nil {
		return nil
	}
	v, err := registerHostVecs(r)
	if err != nil {
		return fmt.Errorf("forgetting the metrics of agent %s: %w", agent, err)
	}
	match := prometheus.Labels{"agent": agent}
	for _, vec := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		v.duration, v.outcomes, v.redeliveries, v.deadLetters, v.owned, v.dozing, v.pending,
	} {
		vec.DeletePartialMatch(match)
	}
	return nil
}

// newHostMetrics makes the series of the agents' handlers in r.
func newHostMetrics(r prometheus.Registerer, agents []*Agent) (*hostMetrics, error) {
	v, err := registerHostVecs(r)
	if err != nil {
		return nil, err
	}
	m := &hostMetrics{
		handlers:  make(map[handlerKey]*handlerMetrics),
		unhandled: make(map[string]*requestCounters),
		owned:     make(map[string]prometheus.Gauge),
		dozing:    make(map[string]prometheus.Gauge),
		live:      v.live,
		pending:   v.pending,
	}
	counters := func(agent, kind, method string) requestCounters {
		return requestCounters{v.redeliveries.WithLabelValues(agent, kind, method), v.deadLetters.WithLabelValues(agent, kind, method)}
	}
	for _, a := range agents {
		unhandled := counters(a.name, "unknown", "")
		m.unhandled[a.name] = &unhandled
		m.owned[a.name] = v.owned.WithLabelValues(a.name)
		m.dozing[a.name] = v.dozing.WithLabelValues(a.name)
		for _, k := range a.handlerKeys() {
			kind := msgkind.Of(k.kind).Label
			hm := &handlerMetrics{duration: v.duration.WithLabelValues(k.agent, kind, k.method), requestCounters: counters(k.agent, kind, k.method)}
			for o, name := range outcomeNames {
				hm.outcomes[o] = v.outcomes.WithLabelValues(k.agent, kind, k.method, name)
			}
			m.handlers[k] = hm
		}
	}
	return m, nil
}

// handlerKeys lists the agent's registered handlers.
func (a *Agent) handlerKeys() []handlerKey {
	var keys []handlerKey
	for method := range a.webhooks {
		keys = append(keys, handlerKey{a.name, agentbusv1.Kind_KIND_WEBHOOK, method})
	}
	for method := range a.data {
		keys = append(keys, handlerKey{a.name, agentbusv1.Kind_KIND_DATA, method})
	}
	if a.chat != nil {
		keys = append(keys, handlerKey{a.name, agentbusv1.Kind_KIND_CHAT, ""})
	}
	if a.file != nil {
		keys = append(keys, handlerKey{a.name, agentbusv1.Kind_KIND_FILE, ""})
	}
	return keys
}

// handler returns the series of the handler req is for, or nil when the host has none such.
func (m *hostMetrics) handler(req *agentbusv1.Request) *handlerMetrics {
	if m == nil {
		return nil
	}
	k := handlerKey{agent: req.GetAgentName(), kind: req.GetKind(), method: msgkind.Of(req.GetKind()).MethodKey(req.GetMethod())}
	return m.handlers[k]
}

// observe records one run of the handler, which started at start.
func (hm *handlerMetrics) observe(start time.Time) {
	if hm != nil {
		hm.duration.Observe(time.Since(start).Seconds())
	}
}

func (hm *handlerMetrics) count(o outcome) {
	if hm != nil {
		hm.outcomes[o].Inc()
	}
}

// answered counts a handler's answer: an error status (4xx, 5xx) is an error outcome.
func (hm *handlerMetrics) answered(status int) {
	if status >= 400 {
		hm.count(outcomeError)
	} else {
		hm.count(outcomeOK)
	}
}

// counters returns the request counters of req's handler, or of the agent's requests without
// one; nil when the host counts nothing or does not run the agent.
func (m *hostMetrics) counters(agent string, req *agentbusv1.Request) *requestCounters {
	if m == nil {
		return nil
	}
	if hm := m.handler(req); hm != nil {
		return &hm.requestCounters
	}
	return m.unhandled[agent]
}

// redelivered counts a request of the agent's partitions delivered more than once.
func (m *hostMetrics) redelivered(agent string, req *agentbusv1.Request) {
	if c := m.counters(agent, req); c != nil {
		c.redeliveries.Inc()
	}
}

// deadLettered counts a request of the agent's partitions kept as a dead letter.
func (m *hostMetrics) deadLettered(agent string, req *agentbusv1.Request) {
	if c := m.counters(agent, req); c != nil {
		c.deadLetters.Inc()
	}
}

// partitionGained and partitionReleased follow the partitions the host consumes; released also
// drops the partition's pending series, which only its owner reports.
func (m *hostMetrics) partitionGained(key partKey) {
	if m != nil {
		m.owned[key.agent].Inc()
	}
}

func (m *hostMetrics) partitionReleased(key partKey) {
	if m != nil {
		m.owned[key.agent].Dec()
		m.pending.DeleteLabelValues(key.agent, strconv.Itoa(key.n))
	}
}

// liveGauge is the gauge of instances held in memory, nil without metrics.
func (m *hostMetrics) liveGauge() prometheus.Gauge {
	if m == nil {
		return nil
	}
	return m.live
}

// dozeBegan and dozeEnded follow the partitions dozing (doze.go). One that dozes has none of its
// requests pending: its pending series says so, and readPending skips it.
func (m *hostMetrics) dozeBegan(key partKey, owned bool) {
	if m != nil {
		m.dozing[key.agent].Inc()
		if owned {
			m.pending.WithLabelValues(key.agent, strconv.Itoa(key.n)).Set(0)
		}
	}
}

func (m *hostMetrics) dozeEnded(key partKey) {
	if m != nil {
		m.dozing[key.agent].Dec()
	}
}

// startPendingReads reads, every pendingEvery with ctx until the loop stops, how many requests
// of each partition the host owns are not processed yet. Those are consumer info requests, one
// per partition pulled (a dozing one has none pending): cheap next to the requests themselves,
// and not on their path. Between reads the loop holds no goroutine.
func (h *Host) startPendingReads(ctx context.Context) *idle.Loop {
	l := idle.NewLoop(pendingEvery, pendingEvery)
	l.Start(pendingEvery, func() bool {
		h.readPending(ctx)
		return false
	})
	return l
}

func (h *Host) readPending(ctx context.Context) {
	h.mu.Lock()
	var parts []*partition
	for _, part := range h.parts {
		if !part.releasing && !part.dozing && part.cons != nil {
			parts = append(parts, part)
		}
	}
	h.mu.Unlock()
	for _, part := range parts {
		h.mu.Lock()
		cons := part.cons
		h.mu.Unlock()
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Debug("reading partition state for metrics", "agent", part.key.agent, "partition", part.key.n, "err", err)
			continue
		}
		// Set only while the partition is still owned: handOver deletes the series under h.mu.
		h.mu.Lock()
		if h.parts[part.key] == part && !part.releasing {
			h.metrics.pending.WithLabelValues(part.key.agent, strconv.Itoa(part.key.n)).Set(float64(info.NumPending) + float64(info.NumAckPending))
		}
		h.mu.Unlock()
	}
}
