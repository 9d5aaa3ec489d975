// Command standalone runs all of agentbus in one process: an embedded NATS server with
// JetStream (data under AGENTBUS_DATA_DIR), the ingress HTTP API, and a workflow host with the
// reference agent Echo. It is the default way to try agentbus: go run ./services/standalone.
//
// Settings are the AGENTBUS_* variables of docs/configuration.md; flags mirror them (-h lists
// them). On first start it creates tenant "default" and prints a dev API key once, with a
// ready curl line; SIGINT or SIGTERM shut it down cleanly, and a restart keeps all data.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/opshttp"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/service"
	"github.com/agentbus/agentbus/pkg/stack"
)

func main() {
	service.Main("standalone", func(ctx context.Context, args []string, lookupEnv config.LookupEnv) error {
		return run(ctx, args, lookupEnv, os.Stdout, os.Stderr)
	})
}

// loopbackReceivers is the standalone's allow-list of subscription receivers when
// AGENTBUS_OUTBOUND_URLS is empty.
var loopbackReceivers = must(outbound.ParseAllowList("http://127.0.0.1:*,http://localhost:*,http://[::1]:*"))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// builtin is the Go agents the standalone runs: Echo, unless AGENTBUS_ECHO is false.
func builtin(cfg config.Config, model llm.Model) []*agent.Agent {
	if !cfg.Echo {
		return nil
	}
	return []*agent.Agent{echo.New(echo.WithModel(model))}
}

// testHookStarted, when a test sets it, is called with the stack run started, so that the
// test can reach the connections the process is watched by.
var testHookStarted func(*stack.Stack)

// devTenant is the tenant the standalone seeds for newcomers.
const devTenant = "default"

// devKeyName names the generated dev key, so that a restart knows one was printed before.
const devKeyName = "dev (generated)"

func run(ctx context.Context, args []string, lookupEnv config.LookupEnv, stdout, stderr io.Writer) error {
	p, err := service.Start(ctx, "standalone", "agentbus", args, lookupEnv, stderr)
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	cfg, log, gogc := p.Config, p.Log, p.GOGC
	if cfg.NATSURL != "" {
		return errors.New("the standalone runs its own embedded NATS; to use AGENTBUS_NATS_URL run services/ingress and services/workflowhost")
	}
	model, err := cfg.ChatModel(log)
	if err != nil {
		return err
	}
	// One registry for the ingress and the host: GET /metrics serves it all, on
	// AGENTBUS_METRICS_ADDR when it is set, else on the HTTP address.
	reg := metrics.NewProcessRegistry()
	// A stop within AGENTBUS_SHUTDOWN_TIMEOUT: synchronous calls in flight get the first half,
	// then the host the second, less the time to close down.
	hc := cfg.Host()
	hc.Metrics, hc.ShutdownGrace = reg, cfg.StopTimeout()/2-cfg.ExitReserve()
	if cfg.OutboundURLs.Empty() {
		// A machine of one's own: events may go to receivers on it (docs/subscriptions.md).
		cfg.OutboundURLs = loopbackReceivers
	}
	ic := ingress.FromSettings(cfg)
	ic.Metrics = reg
	st, err := stack.Start(ctx, stack.Config{
		DataDir:    cfg.DataDir,
		NATSListen: cfg.NATSListen,
		HTTPAddr:   cfg.HTTPAddr,
		Agents:     builtin(cfg, model),
		Bus:        standaloneBus(cfg),
		Ingress:    ic,
		Host:       hc,
		SyncAlways: cfg.SyncAlways,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	defer func() {
		// The HTTP server's shutdown marks the ingress draining (/readyz 503) and ends event
		// streams; synchronous calls in flight get half of AGENTBUS_SHUTDOWN_TIMEOUT for their
		// answers, and the host stops within the rest.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.StopTimeout()/2)
		defer cancel()
		if err := st.Stop(sctx); err != nil {
			log.Error("stopping", "err", err)
		}
	}()

	// Its NATS runs in the process, but a protocol error still makes nats.go close a connection
	// for good: that ends the run with an error, so that the process exits 1 and its supervisor
	// starts it again.
	ctx, stopWatch := bus.FailWhenClosed(ctx, log, st.Conns()...)
	defer stopWatch()
	if testHookStarted != nil {
		testHookStarted(st)
	}
	if cfg.MetricsAddr != "" {
		stopOps, err := opshttp.Serve(cfg.MetricsAddr, opshttp.Handler(st.Ingress.NATSStatus, st.Ingress.Readiness, metrics.Handler(reg)), log)
		if err != nil {
			return err
		}
		defer stopOps()
	}
	if err := seedDevKey(ctx, st, cfg, stdout); err != nil {
		return err
	}
	log.Info("agentbus standalone running", "http", st.URL, "data", cfg.DataDir, "nats", natsAddr(cfg), "gogc", gogc, "memoryLimit", p.MemoryLimit)
	<-ctx.Done()
	log.Info("shutting down")
	return bus.ClosedCause(ctx)
}

// seedDevKey makes sure tenant "default" exists with a dev key: the one from
// AGENTBUS_DEV_API_KEY, else a generated one printed once, at the first start.
func seedDevKey(ctx context.Context, st *stack.Stack, cfg config.Config, out io.Writer) error {
	if err := st.Keys.EnsureTenant(ctx, devTenant); err != nil {
		return err
	}
	if cfg.DevAPIKey != "" {
		if _, err := st.Keys.Seed(ctx, cfg.DevAPIKey, keys.NewKey{Tenant: devTenant, Role: keys.RoleTenantAdmin, Name: "dev (AGENTBUS_DEV_API_KEY)"}); err != nil {
			return fmt.Errorf("seeding dev key: %w", err)
		}
		if err := st.WaitKnown(ctx, cfg.DevAPIKey); err != nil {
			return err
		}
		fmt.Fprintf(out, "agentbus is listening on %[1]s; tenant %[2]q accepts the key in AGENTBUS_DEV_API_KEY.\n"+
			"Playground (paste the key there): %[1]s/ui\n", st.URL, devTenant)
		return nil
	}
	existing, err := st.Keys.Keys(ctx, devTenant)
	if err != nil {
		return err
	}
	for _, k := range existing {
		if k.Name == devKeyName && k.RevokedAt == nil {
			fmt.Fprintf(out, "agentbus is listening on %[1]s. The dev key of tenant %[2]q was printed at the first start;\n"+
				"to choose one instead, set AGENTBUS_DEV_API_KEY. Playground: %[1]s/ui\n", st.URL, devTenant)
			return nil
		}
	}
	secret, _, err := st.Keys.Create(ctx, keys.NewKey{Tenant: devTenant, Role: keys.RoleTenantAdmin, Name: devKeyName, CreatedBy: "standalone"})
	if err != nil {
		return fmt.Errorf("creating dev key: %w", err)
	}
	if err := st.WaitKnown(ctx, secret); err != nil {
		return err
	}
	fmt.Fprintf(out, `agentbus is listening on %[1]s
Dev API key for tenant %[2]q (shown only this once; keys are stored as hashes):

    %[3]s

Try the Echo agent:

    curl -s -X POST '%[1]s/api/user/webhooks/Echo/echo?apikey=%[3]s&hello=world' -d '{"ping":1}'

or open the playground in a browser and paste the key: %[1]s/ui
(the operator console, for the same key: %[1]s/console)

`, st.URL, devTenant, secret)
	return nil
}

// standaloneBus is the bus of the settings on the one embedded server: one replica.
func standaloneBus(cfg config.Config) bus.Config {
	b := cfg.Bus()
	b.Replicas = 1
	return b
}

func natsAddr(cfg config.Config) string {
	if cfg.NATSListen == "" {
		return "in-process only"
	}
	return "nats://" + cfg.NATSListen
}
