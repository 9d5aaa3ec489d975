package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// streamCheckEvery is how long a readiness answer about the streams is reused: probes from
// every orchestrator and load balancer would otherwise each cost a JetStream API call.
const streamCheckEvery = 5 * time.Second

// streamCheckTimeout bounds one stream check, well inside a probe's usual 2 s timeout.
const streamCheckTimeout = time.Second

// readiness is what /readyz answers from besides the NATS connection and the registry: whether
// the server drains, and the last check of the streams. Its zero value is ready to use.
type readiness struct {
	draining atomic.Bool

	mu        sync.Mutex // held while checking, so that concurrent probes share one check
	checkedAt time.Time
	streamsOK bool
}

// Drain marks the server as shutting down: /readyz answers 503 {"status":"draining"} from now
// on, so that load balancers stop sending it requests, while the requests it has keep being
// served. HTTPServer's server calls it when it shuts down; call it earlier to give load balancers
// time to notice before the listener closes.
func (s *Server) Drain() { s.ready.draining.Store(true) }

// readyz answers whether this instance should be sent requests: it is not draining, it is
// connected to NATS, the streams answer, and some workflow host is alive to handle what it
// publishes. The body names the first condition that fails, in the shape of /healthz's.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	code, status := http.StatusOK, "ready"
	if err := s.readiness(r.Context()); err != nil {
		code, status = http.StatusServiceUnavailable, err.Error()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// A cached answer would hide the instance's state from the next probe.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `{"status":%q}`, status)
}

// NATSStatus is the status of the ingress's NATS connection, which /healthz follows.
func (s *Server) NATSStatus() nats.Status { return s.cfg.Conn.Status() }

// Readiness is nil when /readyz answers 200, else the status it answers: for the probes of
// package opshttp on the metrics address.
func (s *Server) Readiness() error { return s.readiness(context.Background()) }

func (s *Server) readiness(ctx context.Context) error {
	switch {
	case s.ready.draining.Load():
		return errors.New("draining")
	case s.cfg.Conn.Status() != nats.CONNECTED:
		return errors.New("nats disconnected")
	case !s.streamsReachable(ctx):
		return errors.New("streams unavailable")
	case !s.dir.AnyLive():
		return errors.New("no live workflow host")
	}
	return nil
}

// streamsReachable reports whether the history stream answered its last info request, asking
// again when that answer is older than streamCheckEvery.
func (s *Server) streamsReachable(ctx context.Context) bool {
	rd := &s.ready
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.checkedAt.IsZero() && time.Since(rd.checkedAt) < streamCheckEvery {
		return rd.streamsOK
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), streamCheckTimeout)
	defer cancel()
	_, err := s.res.Messages.Info(ctx)
	if err != nil && rd.streamsOK {
		s.log.Warn("readiness: history stream unreachable", "err", err)
	}
	rd.checkedAt, rd.streamsOK = time.Now(), err == nil
	return rd.streamsOK
}
