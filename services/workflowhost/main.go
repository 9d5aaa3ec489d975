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
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
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
	// The model's own timeout is shorter than a synchronous caller's default wait (60 s), so the
	// caller gets the model's 504 rather than a bare handler timeout.
	model, err := llm.New(llm.Config{BaseURL: cfg.LLMBaseURL, Model: cfg.LLMModel, APIKey: cfg.LLMAPIKey, Timeout: 45 * time.Second})
	if err != nil {
		return fmt.Errorf("configuring the language model: %w", err)
	}
	log.Info("chat model", "model", model.Name(), "offline", cfg.LLMBaseURL == "")
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
