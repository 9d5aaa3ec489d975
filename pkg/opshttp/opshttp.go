// Package opshttp serves a process's operator endpoints, /healthz, /readyz and /metrics, on an
// address of their own (AGENTBUS_METRICS_ADDR), apart from any API: orchestrators probe them and
// Prometheus scrapes them on a port that need not be reachable by the API's clients. It also
// serves Go's profiling endpoints on another address, when one is set (AGENTBUS_PPROF_ADDR).
//
// It is not an API router: the ingress also answers /healthz and /readyz on its API address,
// where load balancers look for them.
package opshttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/problem"
)

// Handler answers an orchestrator's probes and Prometheus. /healthz (liveness) follows the
// NATS connection only: a process that lost NATS reconnects by itself, and restarting it would
// not bring NATS back. /readyz also asks the process (readiness; its error is the status the
// answer names): a workflow host is not ready until it consumes its partitions, so that a
// rolling update waits for the new host before it stops the next old one, and an ingress not
// while it drains. /metrics is served by metrics (docs/metrics.md); nil answers 404 there.
func Handler(natsStatus func() nats.Status, readiness func() error, metrics http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		notFound := func() {
			problem.NotFound.Write(w, "no such endpoint")
		}
		var check func() (int, string) // nil for /metrics
		switch r.URL.Path {
		case "/healthz":
			check = func() (int, string) {
				if natsStatus() != nats.CONNECTED {
					return http.StatusServiceUnavailable, "nats disconnected"
				}
				return http.StatusOK, "ok"
			}
		case "/readyz":
			check = func() (int, string) {
				if err := readiness(); err != nil {
					return http.StatusServiceUnavailable, err.Error()
				}
				if natsStatus() != nats.CONNECTED {
					return http.StatusServiceUnavailable, "nats disconnected"
				}
				return http.StatusOK, "ready"
			}
		case "/metrics":
			if metrics == nil {
				notFound()
				return
			}
		default:
			notFound()
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			problem.MethodNotAllowed.Write(w, "this endpoint takes GET, HEAD")
			return
		}
		if check == nil {
			metrics.ServeHTTP(w, r)
			return
		}
		code, status := check()
		h := w.Header()
		h.Set("Content-Type", "application/json")
		// A cached answer would hide the host's state from the next probe.
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, `{"status":%q}`, status)
	})
}

// readHeaderTimeout bounds how long a probe may take to send its headers, so that idle
// or slow connections cannot pile up on the host.
const readHeaderTimeout = 5 * time.Second

// Serve serves h (probes and metrics) on addr (AGENTBUS_METRICS_ADDR) until stop is called.
// A probe must never keep the process from closing down, so stop waits a second at most.
func Serve(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for health checks and metrics: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving health checks and metrics", "err", err)
		}
	}()
	log.Info("health endpoint listening", "addr", ln.Addr().String())
	return func() {
		// Probes and scrapes answer at once; a second is plenty for one in flight.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// ServePprof serves Go's profiling endpoints (net/http/pprof, under /debug/pprof/) on addr
// (AGENTBUS_PPROF_ADDR) until stop is called. They need no key: addr must not be reachable from
// outside. A CPU profile in progress is cut short by stop.
func ServePprof(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for profiling: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving profiles", "err", err)
		}
	}()
	log.Info("profiling endpoint listening", "addr", ln.Addr().String())
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}
