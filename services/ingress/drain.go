package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentbus/agentbus/pkg/ingress"
)

// drain shuts the HTTP server down after SIGTERM or SIGINT: /readyz answers 503 draining at
// once, and requests are still served for delay, so that load balancers that probe /readyz (or
// an orchestrator updating its endpoints) stop sending new ones before they would be refused.
// Then the listener closes (new connections are refused, idle ones closed), event streams end
// (their clients reconnect to another instance and resume), and synchronous calls in flight get
// up to timeout to receive their answers, or until natsGone is closed: answers come through
// NATS, and none comes while it is gone. Calls still waiting then are cut off; their requests
// stay on the bus and are processed, and a retry with the same Idempotency-Key or requestId gets
// the result. A shutdown is not a failure: drain returns nil unless serving itself failed.
func drain(hs *http.Server, srv *ingress.Server, served <-chan error, delay, timeout time.Duration, natsGone <-chan struct{}, log *slog.Logger) error {
	srv.Drain()
	start := time.Now()
	if delay > 0 {
		log.Info("ingress draining: not ready, still serving", "delay", delay)
		select {
		case <-time.After(delay):
		case err := <-served:
			return fmt.Errorf("serving HTTP: %w", err)
		}
	}
	log.Info("ingress draining", "timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		select {
		case <-natsGone:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := hs.Shutdown(ctx); err != nil {
		select {
		case <-natsGone:
			log.Warn("ingress: NATS unreachable; calls still waiting for answers were cut off", "err", err)
		default:
			log.Warn("ingress: calls still waiting at the shutdown timeout were cut off", "timeout", timeout, "err", err)
		}
		_ = hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP: %w", err)
	}
	log.Info("ingress drained", "took", time.Since(start).Round(time.Millisecond))
	return nil
}
