// Package service starts what each agentbus server process (the standalone, the ingress, the
// workflow host) runs beside its own work, and stops it again: its settings and logger, the
// garbage collector's target and memory limit, tracing and the profiling endpoint.
//
// A binary's main hands its run function to Main, and run begins with Start and defers Close:
//
//	func main() {
//		service.Main("ingress", func(ctx context.Context, args []string, lookupEnv config.LookupEnv) error {
//			return run(ctx, args, lookupEnv, os.Stderr)
//		})
//	}
//
//	func run(ctx context.Context, args []string, lookupEnv config.LookupEnv, stderr io.Writer) error {
//		p, err := service.Start(ctx, "ingress", "agentbus-ingress", args, lookupEnv, stderr)
//		if err != nil {
//			return err
//		}
//		defer p.Close(ctx)
//		…
//	}
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/gogc"
	"github.com/agentbus/agentbus/pkg/opshttp"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Main is a server binary's main: it calls run with a context that SIGINT or SIGTERM ends, the
// command line's arguments and os.LookupEnv. When run fails, it prints the error after name on
// stderr and exits 1; help asked for (flag.ErrHelp) is not a failure.
func Main(name string, run func(ctx context.Context, args []string, lookupEnv config.LookupEnv) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Process is a server process's settings, its logger, and what Start started for it.
type Process struct {
	Config config.Config
	Log    *slog.Logger
	// GOGC is the garbage collector's target in effect: GOGC's value as given, or gogc.Default.
	GOGC string
	// MemoryLimit is the soft memory limit in effect: "GOMEMLIMIT=…" as given, "off", or
	// AGENTBUS_MEMORY_LIMIT's as "256MiB" (gogc.Limit).
	MemoryLimit string

	stopLimit   func()
	stopTracing func(context.Context) error
	stopPprof   func()
}

// Start reads the settings of the process called name (config.Load: its flags in args, then
// the environment through lookupEnv; flag.ErrHelp when args ask for help), logs to stderr at
// their level, sets the garbage collector's target (gogc.Set: a process's small heap turns over
// fast, so it collects less often than Go's default unless GOGC says otherwise) and the memory
// limit that caps the heap's growth between collections (gogc.Limit: AGENTBUS_MEMORY_LIMIT
// unless GOMEMLIMIT is set), starts tracing as serviceName (tracing.Setup) and, when
// AGENTBUS_PPROF_ADDR is set, the profiling endpoint.
// Close the Process when the process stops.
func Start(ctx context.Context, name, serviceName string, args []string, lookupEnv config.LookupEnv, stderr io.Writer) (*Process, error) {
	cfg, err := config.Load(name, args, lookupEnv, stderr)
	if err != nil {
		return nil, err
	}
	p := &Process{Config: cfg, Log: cfg.Logger(stderr), GOGC: gogc.Set(lookupEnv)}
	p.stopLimit, p.MemoryLimit = gogc.Limit(lookupEnv, cfg.MemoryLimit)
	if p.stopTracing, err = tracing.Setup(ctx, serviceName); err != nil {
		p.stopLimit()
		return nil, err
	}
	if cfg.PprofAddr != "" {
		if p.stopPprof, err = opshttp.ServePprof(cfg.PprofAddr, p.Log); err != nil {
			p.Close(ctx)
			return nil, err
		}
	}
	return p, nil
}

// Close stops the profiling endpoint, the memory limit's watch and then tracing, which gets
// half of the settings' ExitReserve to send the spans it holds, even when ctx has ended.
func (p *Process) Close(ctx context.Context) {
	if p.stopPprof != nil {
		p.stopPprof()
	}
	p.stopLimit()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Config.ExitReserve()/2)
	defer cancel()
	if err := p.stopTracing(tctx); err != nil {
		p.Log.Warn("stopping tracing", "err", err)
	}
}
