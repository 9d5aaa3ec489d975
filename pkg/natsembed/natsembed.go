// Package natsembed runs a NATS server with JetStream inside the process: the standalone
// binary's bus, and the bus of every test (see package natstest).
//
// It is not for production clusters; those run nats-server on their own (deploy/nats).
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Config configures the embedded server.
type Config struct {
	// StoreDir is the JetStream file store directory. Required.
	StoreDir string
	// Listen is a host:port to also serve clients on, so that other processes can connect.
	// Empty serves in-process connections only; port "-1" picks a free port.
	Listen string
	// SyncAlways fsyncs every JetStream write before acknowledging it. Off by default for
	// development speed; production clusters turn it on (deploy/nats).
	SyncAlways bool
	// ServerName defaults to "agentbus".
	ServerName string
	// MaxStore bounds what JetStream stores on disk, in bytes. Zero means the server's default:
	// 75% of the free space of StoreDir's disk when it starts. The server's own limit is not in
	// what clients can read, so the account that in-process and unauthenticated clients use gets
	// it as its limit: JetStream's account info then reports it (package usage's Level).
	MaxStore int64
}

// Server is a running embedded NATS server.
type Server struct {
	*server.Server
}

// Start starts the server and waits until it accepts connections and JetStream is ready.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		NoLog:      true,
		DontListen: cfg.Listen == "",
	}
	if opts.ServerName == "" {
		opts.ServerName = "agentbus"
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	if cfg.MaxStore > 0 {
		// The server refuses an account limit as large as its own.
		opts.JetStreamMaxStore = cfg.MaxStore + 1
	}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsembed: listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("natsembed: listen port %q: %w", port, err)
		}
		opts.Host, opts.Port = host, p
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("creating NATS server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("NATS server did not become ready within 10s")
	}
	if err := limitAccount(ns); err != nil {
		ns.Shutdown()
		return nil, err
	}
	return &Server{Server: ns}, nil
}

// limitAccount gives the global account the server's storage, less the byte the server keeps
// (Config.MaxStore), as its limit, and no other.
func limitAccount(ns *server.Server) error {
	js := ns.JetStreamConfig()
	if js == nil {
		return errors.New("natsembed: JetStream is not enabled")
	}
	limits := server.JetStreamAccountLimits{
		MaxMemory: -1, MaxStore: js.MaxStore - 1, MaxStreams: -1, MaxConsumers: -1, MaxAckPending: -1,
		MemoryMaxStreamBytes: -1, StoreMaxStreamBytes: -1,
	}
	if err := ns.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": limits}); err != nil {
		return fmt.Errorf("natsembed: limiting the account's storage: %w", err)
	}
	return nil
}

// Connect opens an in-process client connection, whether or not the server also listens (over
// loopback TCP the bench measured the same CPU per call). It reconnects as the services'
// connections do (bus.ReconnectWait apart), should the server close it (a slow consumer).
// Extra options are applied after the defaults.
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name(name), nats.InProcessServer(s.Server), nats.MaxReconnects(-1), nats.ReconnectWait(bus.ReconnectWait)}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("connecting to embedded NATS: %w", err)
	}
	return nc, nil
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
