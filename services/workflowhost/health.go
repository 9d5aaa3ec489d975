package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/healthprobe"
)

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
