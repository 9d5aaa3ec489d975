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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

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

// NewProcessRegistry is the registry a service serves on /metrics: the Go runtime's and the
// process's metrics, to which its servers add their own.
func NewProcessRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
