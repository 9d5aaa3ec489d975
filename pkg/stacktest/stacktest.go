// Package stacktest runs the whole agentbus stack inside a test: an embedded NATS server, a
// workflow host with the reference agents, and the ingress behind a real HTTP server. Tests talk
// to it over HTTP, as clients do.
package stacktest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natsembed"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// Options change the stack. The zero value is the default stack.
type Options struct {
	// Agents run by the host; default the Echo agent.
	Agents []*agent.Agent
	// WebhookTimeout of the ingress; default 30s.
	WebhookTimeout time.Duration
	// Partitions of the inbox; default 4 (fewer consumers keep tests quick).
	Partitions int
	// NoHost starts no workflow host.
	NoHost bool
}

// Stack is a running stack.
type Stack struct {
	// URL is the ingress base URL.
	URL string
	// Key is a tenant-admin key of tenant "default"; OtherKey one of tenant "other".
	Key, OtherKey string
	NATS          *natsembed.Server
	Ingress       *ingress.Server
	Resources     *bus.Resources
	Keys          *keys.Store

	opts     Options
	stopHost context.CancelFunc
	hostDone chan error
	t        testing.TB
}

// Logger returns a logger for tests: quiet unless AGENTBUS_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("AGENTBUS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// Start runs a stack for the test; everything stops when the test ends.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	if len(opts.Agents) == 0 {
		opts.Agents = []*agent.Agent{echo.New()}
	}
	if opts.Partitions == 0 {
		opts.Partitions = 4
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &Stack{opts: opts, t: t}
	s.NATS = natstest.Server(t, "")
	busCfg := bus.Config{Partitions: opts.Partitions}

	nc := natstest.Conn(t, s.NATS)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if s.Resources, err = bus.Ensure(ctx, js, busCfg); err != nil {
		t.Fatal(err)
	}
	s.Keys = keys.NewStore(s.Resources.Keys, s.Resources.Tenants)
	for tenant, dst := range map[string]*string{"default": &s.Key, "other": &s.OtherKey} {
		if err := s.Keys.EnsureTenant(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		if *dst, _, err = s.Keys.Create(ctx, keys.NewKey{Tenant: tenant, Role: keys.RoleTenantAdmin, Name: "test"}); err != nil {
			t.Fatal(err)
		}
	}

	if !opts.NoHost {
		s.StartHost()
	}

	s.Ingress, err = ingress.New(ctx, ingress.Config{Conn: natstest.Conn(t, s.NATS), Bus: busCfg, WebhookTimeout: opts.WebhookTimeout, Logger: Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Ingress.Close() })
	srv := httptest.NewServer(s.Ingress.Handler())
	t.Cleanup(srv.Close)
	s.URL = srv.URL

	if !opts.NoHost {
		s.WaitLive(opts.Agents[0].Name())
	}
	return s
}

// StartHost starts a workflow host (the stack has none running).
func (s *Stack) StartHost() {
	t := s.t
	t.Helper()
	h, err := agent.NewHost(agent.HostConfig{
		Conn: natstest.Conn(t, s.NATS), Agents: s.opts.Agents, Bus: bus.Config{Partitions: s.opts.Partitions},
		Logger: Logger(), ShutdownGrace: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopHost = cancel
	s.hostDone = make(chan error, 1)
	go func() { s.hostDone <- h.Run(ctx) }()
	t.Cleanup(s.StopHost)
}

// StopHost stops the workflow host and waits until it has.
func (s *Stack) StopHost() {
	if s.stopHost == nil {
		return
	}
	s.stopHost()
	s.stopHost = nil
	if err := <-s.hostDone; err != nil {
		s.t.Errorf("host: %v", err)
	}
}

// WaitLive waits until the ingress sees a live host running the agent.
func (s *Stack) WaitLive(agentName string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Ingress.AgentLive(agentName) {
		if time.Now().After(deadline) {
			s.t.Fatalf("no live host for %s", agentName)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
