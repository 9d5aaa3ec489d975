// Command workflowhost runs the bundled reference agents (Echo) as a workflow host against a
// NATS JetStream server or cluster (AGENTBUS_NATS_URL). Run several: they share the inbox.
//
// It is also the model for an agent author's own host: import pkg/agent, register agents, and
// call Host.Run, exactly as run does below.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.LookupEnv, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "workflowhost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, lookupEnv config.LookupEnv, stderr io.Writer) error {
	cfg, err := config.Load("workflowhost", args, lookupEnv, stderr)
	if err != nil {
		return err
	}
	log := cfg.Logger(stderr)
	model, err := cfg.ChatModel(log)
	if err != nil {
		return err
	}
	nc, err := bus.Connect(cfg.NATSURL, "agentbus-workflowhost", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	host, err := agent.NewHost(agent.HostConfig{
		Conn:                nc,
		Agents:              []*agent.Agent{echo.New(echo.WithModel(model))},
		Bus:                 bus.Config{Partitions: cfg.Partitions, Replicas: cfg.Replicas, HistoryMaxAge: cfg.HistoryMaxAge},
		ContinueAsNewEvents: cfg.ContinueAsNewEvents,
		Logger:              log,
	})
	if err != nil {
		return err
	}
	return host.Run(ctx)
}
