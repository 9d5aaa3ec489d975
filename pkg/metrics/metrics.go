// Package metrics holds what the agentbus services share for Prometheus metrics: label values
// kept to a bounded set, registration that tolerates a registry shared by several servers of one
// process, and the /metrics handler.
//
// It defines no metrics itself: each package declares its own (pkg/agent, pkg/ingress) on a
// prometheus.Registerer its configuration is given, so that nothing uses the global registry.
// docs/metrics.md lists them all.
package metrics

import (
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Other is the value BoundedLabel gives every name past its limit.
const Other = "other"

// BoundedLabel maps names that callers choose (tenants, routes) to label values, keeping the
// number of series bounded: the first distinct names, up to the limit it is made with, keep their
// own value, and every later one becomes Other. Each label value is a time series in Prometheus,
// so an unbounded set of values would grow its memory without bound. A BoundedLabel is safe for concurrent use.
type BoundedLabel struct {
	max int

	mu   sync.RWMutex
	seen map[string]struct{}
}

// NewBoundedLabel returns a BoundedLabel that keeps up to limit distinct names (at least one).
func NewBoundedLabel(limit int) *BoundedLabel {
	return &BoundedLabel{max: max(limit, 1), seen: make(map[string]struct{})}
}

// Value returns name when it is one of the first limit distinct names seen, Other otherwise.
func (b *BoundedLabel) Value(name string) string {
	b.mu.RLock()
	_, ok := b.seen[name]
	full := len(b.seen) >= b.max
	b.mu.RUnlock()
	switch {
	case ok:
		return name
	case full:
		return Other
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[name]; ok {
		return name
	}
	if len(b.seen) >= b.max {
		return Other
	}
	b.seen[name] = struct{}{}
	return name
}

// Register registers c on r and returns it; if an equal collector (same metric names and
// labels) is registered already, it returns that one instead, so that several servers of one
// process (the standalone, tests running several hosts) can count into one registry.
func Register[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	err := r.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	var zero C
	return zero, err
}

// Handler serves the metrics of g in the Prometheus text and OpenMetrics formats, for GET
// /metrics. A collector that fails leaves its metrics out instead of failing the whole scrape
// (promhttp.ContinueOnError), and at most four scrapes are gathered at once, so that a burst of
// scrapers cannot pile work up on the server.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		EnableOpenMetrics:   true,
	})
}
