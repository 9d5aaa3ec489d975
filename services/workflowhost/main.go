// Command workflowhost runs the bundled reference agents (Echo) as a workflow host against a
// NATS JetStream server or cluster (AGENTBUS_NATS_URL). Run several: they share each agent's
// inbox, one host at a time per partition.
//
// It is also the model for an agent author's own host: import pkg/agent, register agents, and
// call Host.Run, exactly as run does below. Beside the host it delivers the tenants' event
// subscriptions (package subscription, docs/subscriptions.md) and serves the registered remote
// agents (package remote, docs/remote-agents.md), which an agent author's own host process need
// not do.
//
// With AGENTBUS_METRICS_ADDR set it serves GET /healthz and /readyz there, for orchestrators,
// and GET /metrics for Prometheus: the host's metrics and the Go runtime's (docs/metrics.md).
// `workflowhost healthcheck` asks a host in the same container for /readyz and exits 0 when it
// is ready, 1 otherwise: the health check of images without a shell (docker-compose.yml).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/opshttp"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/service"
	"github.com/agentbus/agentbus/pkg/subscription"
)

func main() {
	service.Main("workflowhost", func(ctx context.Context, args []string, lookupEnv config.LookupEnv) error {
		return run(ctx, args, lookupEnv, os.Stderr)
	})
}

func run(ctx context.Context, args []string, lookupEnv config.LookupEnv, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(ctx, args[1:], lookupEnv, stderr)
	}
	p, err := service.Start(ctx, "workflowhost", "agentbus-workflowhost", args, lookupEnv, stderr)
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	cfg, log := p.Config, p.Log
	log.Info("garbage collector target", "gogc", p.GOGC, "memoryLimit", p.MemoryLimit)
	model, err := cfg.ChatModel(log)
	if err != nil {
		return err
	}
	nc, err := bus.Connect(cfg.NATSURL, "agentbus-workflowhost", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	// A connection nats.go closes for good ends the run with an error, so that the process exits
	// 1 and its supervisor starts it again.
	ctx, stopWatch := bus.FailWhenClosed(ctx, log, nc)
	defer stopWatch()
	// Stopping, the process waits for nothing that needs a NATS that is gone: the host (whose
	// stop takes hc.ShutdownGrace at most), the remote agents' hosts and the delivery of events
	// beside it stop within AGENTBUS_SHUTDOWN_TIMEOUT.
	defer bus.CloseWhenStopping(ctx, nc, cfg.StopTimeout()-cfg.ExitReserve()/2, log)()
	hc := cfg.Host()
	hc.Conn, hc.Bus, hc.Logger = nc, cfg.Bus(), log
	if cfg.Echo {
		hc.Agents = []*agent.Agent{echo.New(echo.WithModel(model))}
	}
	var reg *prometheus.Registry
	if cfg.MetricsAddr != "" {
		reg = metrics.NewProcessRegistry()
		hc.Metrics = reg
	}
	var host atomic.Pointer[agent.Host]
	stopProbes, err := serveProbes(cfg, nc, len(hc.Agents) > 0, reg, &host, log)
	if err != nil {
		return err
	}
	// Runs before the deferred nc.Close: a probe never takes closing down for a NATS outage.
	defer stopProbes()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	res, err := bus.Ensure(ctx, js, cfg.Bus())
	if err != nil {
		return err
	}
	res.LogMove(log)
	// The process's hosts (its Go agents' and each remote agent's) share one directory of the
	// agents and hosts and one cache of the tenants' limits, closed after they stop.
	closeShared, err := agent.ShareWatches(ctx, res, &hc, log)
	defer func() { _ = closeShared() }()
	if err != nil {
		return err
	}
	defer runBeside(ctx, res, cfg, hc, log)()
	if len(hc.Agents) == 0 {
		log.Info("workflow host running remote agents only (AGENTBUS_ECHO=false)")
		<-ctx.Done()
		return bus.ClosedCause(ctx)
	}
	h, err := agent.NewHost(hc)
	if err != nil {
		return err
	}
	host.Store(h)
	err = h.Run(ctx)
	if closed := bus.ClosedCause(ctx); closed != nil {
		return closed
	}
	return err
}

// serveProbes serves the health and readiness probes and the metrics of reg at
// cfg.MetricsAddr, when it is set, until stop is called. The probes answer from the start, also
// while the bus is not ready yet. With a Go agent the process is ready once its host (host, set
// when it is made) is; without (no Echo) it runs only the remote agents' hosts and the delivery
// of event subscriptions, and is ready while connected to NATS.
func serveProbes(cfg config.Config, nc *nats.Conn, goAgents bool, reg *prometheus.Registry, host *atomic.Pointer[agent.Host], log *slog.Logger) (stop func(), err error) {
	if cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	ready := func() error {
		if h := host.Load(); h != nil {
			return h.Readiness()
		}
		if goAgents {
			return errors.New("starting")
		}
		if !nc.IsConnected() {
			return errors.New("nats disconnected")
		}
		return nil
	}
	return opshttp.Serve(cfg.MetricsAddr, opshttp.Handler(nc.Status, ready, metrics.Handler(reg)), log)
}

// runBeside runs, beside the host, the delivery of the tenants' event subscriptions (package
// subscription) and the hosts of the registered remote agents (package remote), until the
// returned func is called.
func runBeside(ctx context.Context, res *bus.Resources, cfg config.Config, hc agent.HostConfig, log *slog.Logger) (stop func()) {
	sc := cfg.Subscriptions()
	sc.Logger = log
	store := subscription.NewStore(res, sc)
	if hc.ID == "" {
		hc.ID = agent.DefaultHostID()
	}
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { store.Deliver(bctx) })
	wg.Go(func() {
		remote.Serve(bctx, remote.ServeConfig{Host: hc, Res: res, Allow: cfg.OutboundURLs, Logger: log})
	})
	return func() { cancel(); wg.Wait() }
}
