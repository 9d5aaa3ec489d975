package ingress

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/window"
)

// metricTenants is how many tenants, the busiest, keep their name in the tenant label; the
// others are counted as metrics.Other, so that the number of series stays bounded.
const metricTenants = 20

// noTenant is the tenant label of a request that named no tenant, or was refused before its
// tenant was known.
const noTenant = "none"

// The per-agent statistics' window (GET …/stats): 30 slots of 30 s, the last 15 minutes.
const (
	statsSlot       = window.DefaultSlot
	statsSlots      = window.DefaultSlots
	statsWindowSpan = statsSlot * statsSlots
)

// apiMetrics are the ingress's Prometheus metrics.
type apiMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	waiting  prometheus.Gauge
	bodies   prometheus.Gauge
	timeouts prometheus.Counter
	// kept counts calls answered from the result a host kept rather than from its reply.
	kept prometheus.Counter
	// listeners counts open history listen streams; overflows those closed for falling behind.
	listeners prometheus.Gauge
	overflows prometheus.Counter
	tenants   *metrics.TopLabel
	// handler serves GET /metrics; nil when the Registerer cannot be gathered.
	handler http.Handler
	// tracer starts the requests' server spans; nil when tracing is off.
	tracer trace.Tracer
	// window counts the calls that name an agent, for the stats routes (stats.go).
	window *window.Window
	// reg is where the metrics are registered, for those registered later (quota.go).
	reg prometheus.Registerer
}

// newMetrics registers the ingress's metrics with reg; nil means a registry of their own. Spans
// of requests go to tp (see Config.Tracer).
func newMetrics(reg prometheus.Registerer, tp trace.TracerProvider) (*apiMetrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbus_http_requests_total",
			Help: "HTTP requests answered by the ingress, by route template, status class and tenant.",
		}, []string{"route", "code", "tenant"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbus_http_request_duration_seconds",
			Help: "Time the ingress took to answer an HTTP request, by route template; an event stream counts until it ends.",
			// Synchronous calls wait up to the webhook timeout (30 s by default) for the handler.
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentbus_ingress_sync_calls_waiting",
			Help: "Synchronous calls (webhook, converse, send with wait) waiting for a handler's reply.",
		}),
		bodies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentbus_ingress_body_bytes",
			Help: "Bytes of memory held for request bodies being received or waiting for their call's answer, every tenant together.",
		}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbus_ingress_handler_timeouts_total",
			Help: "Calls answered 504 handler-timeout, as an HTTP answer or as a stream's error event.",
		}),
		kept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbus_ingress_kept_results_total",
			Help: "Calls with a caller-chosen requestId answered from the result a host kept rather than from its reply: a retry of a request accepted before, or a call whose reply was lost.",
		}),
		listeners: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentbus_ingress_listeners",
			Help: "Open history listen streams (Server-Sent Events).",
		}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbus_ingress_listener_overflows_total",
			Help: "History listen streams closed because their client fell further behind than the listener buffer.",
		}),
		tracer: tracing.Tracer(tp),
		window: window.New(window.Config{Slot: statsSlot, Slots: statsSlots}),
		reg:    reg,
	}
	// A tenant that loses its place to a busier one takes its series with it: its requests
	// count as other from then on.
	m.tenants = metrics.NewTopLabel(metricTenants, time.Minute, func(tenant string) {
		m.requests.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
	})
	// Several ingress servers of one process (tests) may share a registry and count together.
	var err error
	if m.requests, err = metrics.Register(reg, m.requests); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if m.duration, err = metrics.Register(reg, m.duration); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if m.waiting, err = metrics.Register(reg, m.waiting); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if m.bodies, err = metrics.Register(reg, m.bodies); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if m.timeouts, err = metrics.Register(reg, m.timeouts); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if m.kept, err = metrics.Register(reg, m.kept); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if m.listeners, err = metrics.Register(reg, m.listeners); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if m.overflows, err = metrics.Register(reg, m.overflows); err != nil {
		return nil, fmt.Errorf("registering ingress metrics: %w", err)
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.handler = metrics.Handler(g)
	}
	return m, nil
}

// serveMetrics answers GET /metrics in the Prometheus text format. It takes no key: operators
// keep it off public networks.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics.handler == nil || s.cfg.MetricsElsewhere {
		problem.NotFound.Write(w, "metrics are not served here")
		return
	}
	s.metrics.handler.ServeHTTP(w, r)
}

// requestState is what the middleware and a handler share about one request; measure puts one in
// every routed request's context (one context value, one copy of the request, for both uses).
type requestState struct {
	// tenant is the request's tenant, once known, for its metrics (noteTenant).
	tenant string
	// sync marks a call that may wait for a handler's reply (syncCall), and wait its place among
	// the tenant's waiting calls (holdWaiting).
	sync bool
	wait waitSlot
	// agent is the agent the call names, once known to be registered, and status the status it
	// counts with in the window when not the HTTP status (stats.go).
	agent  string
	status int
	// body is what the request's body holds of its owner's budget (readBody, heldBodies).
	body bodyHold
	// bucket is the tenant's bucket the route's calls count in, if any (counted).
	bucket *tenantBucket
}

type requestStateKey struct{}

// stateOf returns r's requestState, if it went through measure.
func stateOf(r *http.Request) (*requestState, bool) {
	st, ok := r.Context().Value(requestStateKey{}).(*requestState)
	return st, ok
}

// noteTenant records the request's tenant ("" for none) for its metrics, and returns the
// request's state (nil when it has none, or no tenant). Handlers call it once the tenant is
// authenticated and known to exist, so that callers cannot fill the label with made-up names.
func noteTenant(r *http.Request, tenant string) *requestState {
	if tenant == "" {
		return nil
	}
	st, ok := stateOf(r)
	if !ok {
		return nil
	}
	st.tenant = tenant
	return st
}

// unknownRoute is the route label of requests no route takes.
const unknownRoute = "unknown"

// measure counts and times each request of a route under the route's template (never its raw
// path, so that ids in paths do not become series), or under unknownRoute. It also runs the
// request in its server span when tracing is on (startSpan), as the handlers that publish need.
func (m *apiMetrics) measure(route string, next http.Handler) http.Handler {
	duration := m.duration.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		state := &requestState{}
		ctx := context.WithValue(r.Context(), requestStateKey{}, state)
		var span trace.Span
		if m.tracer != nil {
			ctx, span = m.startSpan(ctx, r, route)
		}
		rec := &statusRecorder{ResponseWriter: w}
		returned := false
		defer func() {
			status := rec.status
			switch {
			case !returned: // panicked: the recoverer answers 500
				status = http.StatusInternalServerError
			case status == 0:
				status = http.StatusOK
			}
			name := noTenant
			if state.tenant != "" {
				name = m.tenants.Value(state.tenant)
			}
			m.requests.WithLabelValues(route, statusClass(status), name).Inc()
			elapsed := time.Since(start)
			duration.Observe(elapsed.Seconds())
			m.observeCall(state, status, start.Add(elapsed), elapsed)
			if span != nil {
				endSpan(span, status, state.tenant)
			}
		}()
		next.ServeHTTP(rec, r.WithContext(ctx))
		returned = true
	})
}

// statusClass is the label of a status: "2xx", "4xx", …
func statusClass(status int) string {
	if c := status / 100; c >= 1 && c <= 5 {
		return statusClasses[c-1]
	}
	return strconv.Itoa(status/100) + "xx"
}

var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// statusRecorder remembers the status a handler answered with. Unwrap lets
// http.ResponseController reach the connection (flushes and deadlines of event streams).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 { // 1xx answers are not the final one
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
