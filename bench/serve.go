package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// serve starts the servers of phases (bare, pipeline, agentbus) side by side and keeps them up
// until ctx ends, so that an outside load generator such as wrk can load them. For each phase it
// writes dir/PHASE.paths, the request targets (path and query) of its load, one a line, and
// prints the phase's base URL; bench/wrk.lua rotates a wrk load over such a file. The servers
// share this process, and run at the stack's GOGC, so the phases are best loaded one at a time.
func serve(ctx context.Context, o options, phases []string, dir string) error {
	if o.Target != targetWebhook {
		return fmt.Errorf("-serve serves the webhook target only")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if o.stackGC > 0 {
		gc := o.stackGC
		if len(phases) == 1 && phases[0] == phaseBare {
			gc = 100 // as in the bare phase of a run
		} else {
			defer stackLimit()()
		}
		debug.SetGCPercent(gc)
	}
	var stops []func() error
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			if err := stops[i](); err != nil {
				fmt.Fprintf(os.Stderr, "stopping: %v\n", err)
			}
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "body"), o.Body, 0o644); err != nil {
		return err
	}
	for _, phase := range phases {
		if phase != phaseBare && phase != phasePipeline && phase != phaseAgentbus {
			return fmt.Errorf("-serve serves bare, pipeline and agentbus, not %s", phase)
		}
		ep, stop, err := startPhase(ctx, phase, o)
		if err != nil {
			return fmt.Errorf("starting %s: %w", phase, err)
		}
		stops = append(stops, stop)
		var paths strings.Builder
		base := ""
		for _, r := range ep.reqs {
			u, err := url.Parse(r.url)
			if err != nil {
				return err
			}
			base = u.Scheme + "://" + u.Host
			paths.WriteString(u.RequestURI())
			paths.WriteByte('\n')
		}
		file := filepath.Join(dir, phase+".paths")
		if err := os.WriteFile(file, []byte(paths.String()), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s %s %s\n", phase, base, file)
	}
	fmt.Println("serving; interrupt to stop")
	<-ctx.Done()
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return nil
	}
	return ctx.Err()
}
