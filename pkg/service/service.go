// Package service starts what each agentbus server process (the standalone, the ingress, the
// workflow host) runs beside its own work, and stops it again: its settings and logger, the
// garbage collector's target, tracing and the profiling endpoint.
//
// A process's run function begins with Start and defers Close:
//
//	p, err := service.Start(ctx, "ingress", "agentbus-ingress", args, lookupEnv, stderr)
//	if err != nil {
//		return err
//	}
//	defer p.Close(ctx)
package service

import (
	"context"
	"io"
	"log/slog"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/gogc"
	"github.com/agentbus/agentbus/pkg/opshttp"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Process is a server process's settings, its logger, and what Start started for it.
type Process struct {
	Config config.Config
	Log    *slog.Logger
	// GOGC is the garbage collector's target in effect: GOGC's value as given, or gogc.Default.
	GOGC string

	stopTracing func(context.Context) error
	stopPprof   func()
}

// Start reads the settings of the process called name (config.Load: its flags in args, then
// the environment through lookupEnv; flag.ErrHelp when args ask for help), logs to stderr at
// their level, sets the garbage collector's target (gogc.Set: a process's small heap turns over
// fast, so it collects less often than Go's default unless GOGC says otherwise), starts tracing
// as serviceName (tracing.Setup) and, when AGENTBUS_PPROF_ADDR is set, the profiling endpoint.
// Close the Process when the process stops.
func Start(ctx context.Context, name, serviceName string, args []string, lookupEnv config.LookupEnv, stderr io.Writer) (*Process, error) {
	cfg, err := config.Load(name, args, lookupEnv, stderr)
	if err != nil {
		return nil, err
	}
	p := &Process{Config: cfg, Log: cfg.Logger(stderr), GOGC: gogc.Set(lookupEnv)}
	if p.stopTracing, err = tracing.Setup(ctx, serviceName); err != nil {
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

// Close stops the profiling endpoint and then tracing, which gets half of the settings'
// ExitReserve to send the spans it holds, even when ctx has ended.
func (p *Process) Close(ctx context.Context) {
	if p.stopPprof != nil {
		p.stopPprof()
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Config.ExitReserve()/2)
	defer cancel()
	if err := p.stopTracing(tctx); err != nil {
		p.Log.Warn("stopping tracing", "err", err)
	}
}
