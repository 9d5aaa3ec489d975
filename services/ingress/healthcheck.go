package main

import (
	"context"
	"fmt"
	"io"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/healthprobe"
)

// healthcheck is `ingress healthcheck [flags]`: it asks the ingress running in the same
// container for /healthz on AGENTBUS_HTTP_ADDR and fails unless the answer is 200. It exists for
// health checks in images without a shell or curl (docker-compose.yml).
func healthcheck(ctx context.Context, args []string, lookupEnv config.LookupEnv, stderr io.Writer) error {
	cfg, err := config.Load("ingress healthcheck", args, lookupEnv, stderr)
	if err != nil {
		return err
	}
	if err := healthprobe.Check(ctx, cfg.HTTPAddr, "/healthz"); err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	return nil
}
