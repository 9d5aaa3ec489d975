package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/healthprobe"
	"github.com/agentbus/agentbus/pkg/problem"
)

// healthHandler answers an orchestrator's probes and Prometheus. /healthz (liveness) follows the
// NATS connection only: a host that lost NATS reconnects by itself, and restarting it would not
// bring NATS back. /readyz also asks the host (agent.Host.Readiness): 503 until it consumes its
// partitions, so that a rolling update waits for the new host before it stops the next old one,
// while a partition's consumer is being created again, when its heartbeat is not written, and
// from SIGTERM on while it hands its partitions over. /metrics is served by metrics
// (docs/metrics.md); nil answers 404 there.
func healthHandler(natsStatus func() nats.Status, readiness func() error, metrics http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		notFound := func() {
			problem.Write(w, problem.Problem{Status: http.StatusNotFound, Slug: "not-found", Detail: "no such endpoint"})
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
			problem.Write(w, problem.Problem{Status: http.StatusMethodNotAllowed, Slug: "method-not-allowed", Detail: "this endpoint takes GET, HEAD"})
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

// healthReadHeaderTimeout bounds how long a probe may take to send its headers, so that idle
// or slow connections cannot pile up on the host.
const healthReadHeaderTimeout = 5 * time.Second

// serveHealth serves h (probes and metrics) on addr (AGENTBUS_METRICS_ADDR) until stop is called.
func serveHealth(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for health checks and metrics: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: healthReadHeaderTimeout}
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

// healthcheck is `workflowhost healthcheck [flags]`: it asks the host running in the same
// container for /readyz on AGENTBUS_METRICS_ADDR and fails unless the answer is 200. It exists
// for health checks in images without a shell or curl (docker-compose.yml).
func healthcheck(ctx context.Context, args []string, lookupEnv config.LookupEnv, stderr io.Writer) error {
	cfg, err := config.Load("workflowhost healthcheck", args, lookupEnv, stderr)
	if err != nil {
		return err
	}
	if cfg.MetricsAddr == "" {
		return errors.New("healthcheck: AGENTBUS_METRICS_ADDR is not set, so the host serves no /readyz to check")
	}
	if err := healthprobe.Check(ctx, cfg.MetricsAddr, "/readyz"); err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	return nil
}
