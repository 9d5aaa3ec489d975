// Command ingress serves agentbus's HTTP API against a NATS JetStream server or cluster
// (AGENTBUS_NATS_URL). It is stateless: run as many instances as the load needs.
//
// Settings are the AGENTBUS_* variables of docs/configuration.md; flags mirror them (-h).
// `ingress healthcheck` asks an ingress in the same container for /healthz on
// AGENTBUS_HTTP_ADDR and exits 0 when it answers 200, 1 otherwise: the health check of images
// without a shell (docker-compose.yml).
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/opshttp"
	"github.com/agentbus/agentbus/pkg/service"
)

func main() {
	service.Main("ingress", func(ctx context.Context, args []string, lookupEnv config.LookupEnv) error {
		return run(ctx, args, lookupEnv, os.Stderr)
	})
}

func run(ctx context.Context, args []string, lookupEnv config.LookupEnv, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(ctx, args[1:], lookupEnv, stderr)
	}
	p, err := service.Start(ctx, "ingress", "agentbus-ingress", args, lookupEnv, stderr)
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	cfg, log := p.Config, p.Log
	nc, err := bus.Connect(cfg.NATSURL, "agentbus-ingress", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	// A connection nats.go closes for good ends the run with an error, so that the process exits
	// 1 and its supervisor starts it again.
	ctx, stopWatch := bus.FailWhenClosed(ctx, log, nc)
	defer stopWatch()
	// Stopping, the ingress waits for nothing that needs a NATS that is gone.
	defer bus.CloseWhenStopping(ctx, nc, cfg.DrainDelay+cfg.StopTimeout()-cfg.ExitReserve()/2, log)()
	// GET /metrics serves this registry, the ingress's metrics and the process's: on
	// AGENTBUS_METRICS_ADDR when it is set, else on the HTTP address.
	reg := metrics.NewProcessRegistry()
	icfg := ingress.FromSettings(cfg)
	icfg.Conn, icfg.Logger, icfg.Metrics = nc, log, reg
	srv, err := ingress.New(ctx, icfg)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()
	if cfg.MetricsAddr != "" {
		stopOps, err := opshttp.Serve(cfg.MetricsAddr, opshttp.Handler(nc.Status, srv.Readiness, metrics.Handler(reg)), log)
		if err != nil {
			return err
		}
		defer stopOps()
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}
	hs := srv.HTTPServer()
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	log.Info("ingress listening", "addr", ln.Addr().String(), "gogc", p.GOGC, "memoryLimit", p.MemoryLimit)

	select {
	case err := <-done:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	closed := bus.ClosedCause(ctx)
	delay := cfg.DrainDelay
	if closed != nil {
		// Nothing can be served any more: a refused connection sends clients elsewhere sooner
		// than a 503.
		delay = 0
	}
	// Calls in flight get the shutdown timeout less the time to close down.
	natsGone, stopGone := bus.WhenGone(nc)
	defer stopGone()
	err = drain(hs, srv, done, delay, cfg.StopTimeout()-cfg.ExitReserve(), natsGone, log)
	if closed != nil {
		if err != nil {
			log.Error("draining", "err", err)
		}
		return closed
	}
	return err
}
