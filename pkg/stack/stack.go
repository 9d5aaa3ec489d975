// Package stack assembles a whole agentbus in one process: an embedded NATS server with
// JetStream, the ingress HTTP API and a workflow host. The standalone binary, the benchmark and
// the whole-stack tests are built on it, so they all run the same wiring.
//
// Production deployments do not use it: they run services/ingress and services/workflowhost
// against a NATS cluster.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natsembed"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/subscription"
)

// Config configures a stack.
type Config struct {
	// DataDir is the JetStream store. Required.
	DataDir string
	// NATSListen also serves the embedded NATS on this address; empty keeps it in-process.
	NATSListen string
	// HTTPAddr is where the ingress listens, for example 127.0.0.1:8080 (":0" picks a port).
	// Empty starts no HTTP listener; use Stack.Ingress.Handler().
	HTTPAddr string
	// Agents run by the workflow host. None starts no host; the stack still serves remote agents
	// and delivers event subscriptions, as a workflow host process does.
	Agents []*agent.Agent
	// Bus sizes the streams and buckets.
	Bus bus.Config
	// Ingress settings; Conn, Bus and Logger are filled in. Its Subscriptions also configure the
	// delivery of events, which the stack runs beside its host.
	Ingress ingress.Config
	// Host settings; Conn, Agents, Bus and Logger are filled in. ID names the first host only.
	Host agent.HostConfig
	// SyncAlways fsyncs every JetStream write.
	SyncAlways bool
	// MaxStore bounds what the embedded JetStream stores on disk (natsembed.Config.MaxStore);
	// zero means the server's default.
	MaxStore int64
	// Logger receives all logs; nil discards them.
	Logger *slog.Logger
}

// Stack is a running stack.
type Stack struct {
	NATS    *natsembed.Server
	Ingress *ingress.Server
	Keys    *keys.Store
	Res     *bus.Resources
	// URL is the ingress base URL when HTTPAddr was set.
	URL string

	cfg      Config
	conns    []*nats.Conn
	httpSrv  *http.Server
	httpDone chan error
	// shared holds what the host Start began and the remote agents' hosts share, as the hosts
	// of a workflow host process do (agent.ShareWatches): the directory of agents and hosts, the
	// cache of the tenants' limits, the followers of the load reports and slot grants and of the
	// instance notices, the subscription to Agent2Agent replies, the timer relay, the usage
	// meter and the idle budget; the ingress reads the directory too, which the stack makes with
	// the methods' schemas (closeDir). closeShared closes the others.
	shared      agent.HostConfig
	closeShared func() error
	// closeDir closes the directory the stack made for the ingress and the hosts to share.
	closeDir func() error
	stopHost func() error
	// stopDelivery stops what runs beside the host: the delivery of event subscriptions and the
	// hosts of remote agents; nil when none runs.
	stopDelivery func()
}

// Start runs the stack. Stop it with Stop.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Stack{cfg: cfg}
	defer func() {
		if err != nil {
			s.Stop(context.Background())
		}
	}()
	if s.NATS, err = natsembed.Start(natsembed.Config{StoreDir: cfg.DataDir, Listen: cfg.NATSListen, SyncAlways: cfg.SyncAlways, MaxStore: cfg.MaxStore}); err != nil {
		return nil, err
	}
	if err := s.openBus(ctx); err != nil {
		return nil, err
	}
	if len(cfg.Agents) > 0 {
		if s.stopHost, err = s.addHost(ctx, cfg.Host.ID, true); err != nil {
			return nil, err
		}
	}
	s.startDelivery(ctx)
	if err := s.serveRemote(ctx); err != nil {
		return nil, err
	}
	if err := s.startIngress(ctx); err != nil {
		return nil, err
	}
	for _, a := range cfg.Agents {
		if err := s.WaitLive(ctx, a.Name()); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// connect opens a connection of the stack to its NATS server, closed by Stop.
func (s *Stack) connect(name string) (*nats.Conn, error) {
	nc, err := s.NATS.Connect(name, bus.LogAsyncErrors(s.cfg.Logger))
	if err == nil {
		s.conns = append(s.conns, nc)
	}
	return nc, err
}

// openBus ensures the bus's resources and opens what the ingress and the hosts share: the
// keys, the directory and the watches.
func (s *Stack) openBus(ctx context.Context) error {
	nc, err := s.connect("agentbus-admin")
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	if s.Res, err = bus.Ensure(ctx, js, s.cfg.Bus); err != nil {
		return err
	}
	s.Res.LogMove(s.cfg.Logger)
	s.Keys = keys.NewStore(s.Res.JS, s.Res.Keys, s.Res.Tenants)
	s.shared = s.cfg.Host
	if s.shared.Directory == nil {
		// The ingress reads the methods' schemas, which ShareWatches's directory leaves out.
		if s.shared.Directory, err = registry.NewDirectory(ctx, s.Res.Registry, s.Res.Hosts, s.cfg.Logger); err != nil {
			return fmt.Errorf("a directory for the ingress and the hosts: %w", err)
		}
		s.closeDir = s.shared.Directory.Close
	}
	if s.closeShared, err = agent.ShareWatches(ctx, s.Res, &s.shared, s.cfg.Logger); err != nil {
		return err
	}
	return nil
}

// startIngress starts the ingress and, with an HTTP address, serves its API there.
func (s *Stack) startIngress(ctx context.Context) error {
	ic := s.cfg.Ingress
	var err error
	if ic.Conn, err = s.connect("agentbus-ingress"); err != nil {
		return err
	}
	ic.Bus, ic.Logger = s.cfg.Bus, s.cfg.Logger
	if ic.Directory == nil {
		ic.Directory = s.shared.Directory
	}
	if ic.IdleTimeout == 0 {
		ic.IdleTimeout = s.cfg.Host.IdleTimeout
	}
	if s.Ingress, err = ingress.New(ctx, ic); err != nil {
		return err
	}
	if s.cfg.HTTPAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.HTTPAddr, err)
	}
	s.httpSrv = s.Ingress.HTTPServer()
	s.httpDone = make(chan error, 1)
	s.URL = "http://" + ln.Addr().String()
	go func() { s.httpDone <- s.httpSrv.Serve(ln) }()
	return nil
}

// startDelivery runs the delivery of the tenants' event subscriptions, as a workflow host
// process does, until Stop.
func (s *Stack) startDelivery(ctx context.Context) {
	sc := s.cfg.Ingress.Subscriptions
	if sc.Logger == nil {
		sc.Logger = s.cfg.Logger
	}
	store := subscription.NewStore(s.Res, sc)
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); store.Deliver(dctx) }()
	s.stopDelivery = func() { cancel(); <-done }
}

// serveRemote runs the hosts of the registered remote agents (package remote), as a workflow
// host process does, until Stop. Tenants' registrations must match the Ingress's subscription
// allow-list, AGENTBUS_OUTBOUND_URLS.
func (s *Stack) serveRemote(ctx context.Context) error {
	hc := s.cfg.Host
	var err error
	if hc.Conn, err = s.NATS.Connect("agentbus-remote-agents"); err != nil {
		return err
	}
	s.conns = append(s.conns, hc.Conn)
	if hc.ID == "" {
		hc.ID = agent.DefaultHostID()
	}
	hc.Bus, hc.Logger = s.cfg.Bus, s.cfg.Logger
	s.share(&hc)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		remote.Serve(rctx, remote.ServeConfig{Host: hc, Res: s.Res, Allow: s.cfg.Ingress.Subscriptions.Allow, Logger: s.cfg.Logger})
	}()
	stopDelivery := s.stopDelivery
	s.stopDelivery = func() {
		cancel()
		<-done
		if stopDelivery != nil {
			stopDelivery()
		}
	}
	return nil
}

// share gives hc what the stack's hosts share (agent.ShareWatches): the directory, the limits,
// the caps' follower, the notices' follower, the replies' subscription, the timer relay, the
// usage meter, the idle budget and the window of the requests acknowledged.
func (s *Stack) share(hc *agent.HostConfig) {
	hc.Directory, hc.TenantLimits, hc.Caps = s.shared.Directory, s.shared.TenantLimits, s.shared.Caps
	hc.Notices, hc.Replies, hc.TimerRelay = s.shared.Notices, s.shared.Replies, s.shared.TimerRelay
	hc.Meter, hc.IdleBudget, hc.Acked = s.shared.Meter, s.shared.IdleBudget, s.shared.Acked
}

// WaitLive waits until the ingress sees a live host running the agent.
func (s *Stack) WaitLive(ctx context.Context, agentName string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for !s.Ingress.AgentLive(agentName) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a host running %s: %w", agentName, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// WaitKnown waits until the ingress accepts a key just stored (keys reach it through a watch).
func (s *Stack) WaitKnown(ctx context.Context, secret string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for !s.Ingress.KeyKnown(secret) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a new key to reach the ingress: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// AddHost starts another workflow host on its own connection, as a second host process would,
// running the given agents (none: the stack's). id names it ("" picks one). The returned func
// stops it, letting its running handlers finish.
func (s *Stack) AddHost(ctx context.Context, id string, agents ...*agent.Agent) (stop func() error, err error) {
	return s.addHost(ctx, id, false, agents...)
}

// addHost is AddHost of a host that shares the stack's directory and limits (share), as the
// hosts of one process do, or reads its own, as another process's.
func (s *Stack) addHost(ctx context.Context, id string, share bool, agents ...*agent.Agent) (stop func() error, err error) {
	if len(agents) == 0 {
		agents = s.cfg.Agents
	}
	hc := s.cfg.Host
	hc.ID = id
	if share {
		s.share(&hc)
	}
	if hc.Conn, err = s.NATS.Connect("agentbus-host"); err != nil {
		return nil, err
	}
	s.conns = append(s.conns, hc.Conn)
	hc.Agents, hc.Bus, hc.Logger = agents, s.cfg.Bus, s.cfg.Logger
	host, err := agent.NewHost(hc)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- host.Run(hctx) }()
	select {
	case <-host.Ready():
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return nil, fmt.Errorf("starting host: %w", err)
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	}
	var once sync.Once
	var runErr error
	return func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}, nil
}

// Conns returns the NATS connections the stack opened so far: those of Start, and of each
// AddHost before the call. Stop closes them.
func (s *Stack) Conns() []*nats.Conn { return slices.Clone(s.conns) }

// StopHost stops the workflow host Start began, letting running handlers finish.
func (s *Stack) StopHost() error {
	if s.stopHost == nil {
		return nil
	}
	stop := s.stopHost
	s.stopHost = nil
	return stop()
}

// Stop shuts everything down in order: HTTP (draining requests until ctx ends, then cutting off
// the calls still waiting), the hosts and the delivery of events (at once, each within its
// HostConfig.ShutdownGrace), ingress, NATS.
func (s *Stack) Stop(ctx context.Context) error {
	var errs []error
	if s.httpSrv != nil {
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			if s.cfg.Logger != nil {
				s.cfg.Logger.Warn("calls still waiting at the shutdown timeout were cut off", "err", err)
			}
			_ = s.httpSrv.Close()
		}
		if err := <-s.httpDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
		s.httpSrv = nil
	}
	var beside sync.WaitGroup
	if stop := s.stopDelivery; stop != nil {
		s.stopDelivery = nil
		beside.Go(stop)
	}
	if err := s.StopHost(); err != nil {
		errs = append(errs, err)
	}
	beside.Wait()
	if s.Ingress != nil {
		errs = append(errs, s.Ingress.Close())
		s.Ingress = nil
	}
	if s.closeShared != nil {
		errs = append(errs, s.closeShared())
		s.closeShared = nil
	}
	if s.closeDir != nil {
		errs = append(errs, s.closeDir())
		s.closeDir = nil
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	s.conns = nil
	if s.NATS != nil {
		s.NATS.Stop()
		s.NATS = nil
	}
	return errors.Join(errs...)
}
