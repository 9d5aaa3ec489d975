package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/retry"
	"github.com/agentbus/agentbus/pkg/subject"
)

// ServeConfig configures Serve.
type ServeConfig struct {
	// Host is the model of the hosts Serve runs, one per registration: Conn, Bus and the
	// retry, ack-wait and idle settings are used as they are; ID is the process's host id, to
	// which each host adds its agent's name; Agents and MaxConcurrent are set per registration.
	Host agent.HostConfig
	// Res are the bus resources of Host.Conn.
	Res *bus.Resources
	// Allow is the allow-list a tenant's registration must match on every request.
	Allow *outbound.AllowList
	// Logger receives the logs; nil discards them.
	Logger *slog.Logger
}

// served is a host running one registration.
type served struct {
	value []byte
	stop  func()
}

// Serve runs a host for every registered remote agent until ctx ends: it starts one for a new
// registration, replaces it when the registration changes and stops it when the registration
// is removed. A watch that fails starts again after a second. The hosts share one directory of
// the agents and hosts (agent.HostConfig.Directory) and one cache of the tenants' limits
// (agent.HostConfig.TenantLimits), unless cfg.Host names them already.
func Serve(ctx context.Context, cfg ServeConfig) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Without them each host would read every heartbeat of every host (with N remote agents, N
	// hosts reading N hosts' heartbeats) and hold every tenant's limits.
	closeShared, err := agent.ShareWatches(ctx, cfg.Res, &cfg.Host, cfg.Logger)
	defer func() { _ = closeShared() }() // after the hosts stopped (deferred below)
	if err != nil {
		cfg.Logger.Warn("remote agents: each host watches what they do not share", "err", err)
	}
	running := make(map[string]*served)
	var retiring sync.WaitGroup
	defer retiring.Wait()
	defer func() {
		var wg sync.WaitGroup
		for _, s := range running {
			wg.Go(s.stop)
		}
		wg.Wait()
	}()
	for {
		err := watch(ctx, cfg, running, &retiring)
		if ctx.Err() != nil {
			return
		}
		cfg.Logger.Warn("watching remote agents; starting again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// watch follows the registrations and keeps running in step with them; for each removed one it
// starts retire in retiring.
func watch(ctx context.Context, cfg ServeConfig, running map[string]*served, retiring *sync.WaitGroup) error {
	w, err := cfg.Res.RemoteAgents.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching remote agents: %w", err)
	}
	defer func() { _ = w.Stop() }()
	err = bus.FollowContext(ctx, w, 0, nil, func(e jetstream.KeyValueEntry, loading bool) {
		key := e.Key()
		cur := running[key]
		if cur != nil && e.Operation() == jetstream.KeyValuePut && bytes.Equal(cur.value, e.Value()) {
			return
		}
		if cur != nil {
			cur.stop()
			delete(running, key)
			// Its series go with it: a replacement makes its own, with the methods it has.
			if name, err := subject.ParseToken(key); err == nil {
				if err := agent.ForgetMetrics(cfg.Host.Metrics, name); err != nil {
					cfg.Logger.Warn("forgetting a remote agent's metrics", "agent", name, "err", err)
				}
			}
		}
		if e.Operation() != jetstream.KeyValuePut {
			if name, err := subject.ParseToken(key); err == nil {
				retiring.Go(func() { retire(ctx, cfg, name, loading) })
			}
			return
		}
		reg, err := decode(e.Value())
		if err != nil {
			cfg.Logger.Error("ignoring a bad remote agent registration", "key", key, "err", err)
			return
		}
		stop, err := start(ctx, cfg, reg)
		if err != nil {
			cfg.Logger.Error("serving remote agent", "agent", reg.Name, "err", err)
			return
		}
		running[key] = &served{value: e.Value(), stop: stop}
	})
	if err != nil {
		return fmt.Errorf("remote agents: %w", err)
	}
	return nil
}

// restartPolicy paces the new starts of a remote agent's host that stopped by itself: 1 s
// doubling to 30 s, from 1 s again once a host ran for restartReset.
var restartPolicy = retry.Policy{First: time.Second, Max: 30 * time.Second, Jitter: 0.2}

// restartReset is how long a host runs before its next stop counts as a first one again.
const restartReset = time.Minute

// start runs a host for a registration until the returned func is called. A host that stops by
// itself (one that could not start: a consumer the bus refused, or a JetStream that stayed
// unavailable past bus.StartWait) is started again, by restartPolicy: a workflow host process,
// which exits in that case for its supervisor to start it again, is the remote agents' supervisor.
func start(ctx context.Context, cfg ServeConfig, reg Registration) (stop func(), err error) {
	log := cfg.Logger.With("agent", reg.Name)
	hc := cfg.Host
	hc.ID = cfg.Host.ID + "/" + subject.Token(reg.Name)
	c := newCaller(reg, cfg.Allow, log)
	hc.Agents = []*agent.Agent{c.agent()}
	hc.MaxConcurrent = reg.MaxConcurrent
	hc.Logger = log
	host, err := agent.NewHost(hc)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tries := restartPolicy.Start()
		for {
			began := time.Now()
			err := host.Run(hctx)
			if hctx.Err() != nil {
				if err != nil && !errors.Is(err, context.Canceled) {
					log.Warn("stopping remote agent", "err", err)
				}
				return
			}
			if time.Since(began) >= restartReset {
				tries.Reset()
			}
			log.Error("remote agent's host stopped; starting it again", "err", err, "host", hc.ID)
			if tries.Wait(hctx) != nil {
				return
			}
			if host, err = agent.NewHost(hc); err != nil { // the same configuration as the first
				log.Error("remote agent's host not started again", "err", err)
				return
			}
		}
	}()
	log.Info("serving remote agent", "url", reg.URL, "host", hc.ID)
	return func() {
		cancel()
		<-done
		c.close()
	}, nil
}

// retireWait bounds how long retire waits for the hosts of a removed agent to stop; it is longer
// than a heartbeat lives after its host died (bus.HostTTL).
const retireWait = bus.HostTTL + 10*time.Second

// retire deletes the inbox consumers of a removed registration (agent.RemoveConsumers), and its
// inbox and the registration's removal marker if the inbox holds no request
// (bus.Resources.DeleteInbox, bus.DropTombstone), once no host's heartbeat names an agent of
// that name and the registration is still removed; replaying the removals of the past it first
// asks whether an inbox is left. Every host serving remote agents does so for each removal; the
// deletions are the same.
func retire(parent context.Context, cfg ServeConfig, name string, replaying bool) {
	ctx, cancel := context.WithTimeout(parent, retireWait)
	defer cancel()
	log := cfg.Logger.With("agent", name)
	if replaying {
		var has bool
		err := markerPolicy.Do(ctx, func() (err error) { has, err = cfg.Res.HasInbox(ctx, name); return err })
		if err != nil {
			return
		}
		if !has {
			dropMarker(parent, cfg, name, log)
			return
		}
	}
	for {
		hbs, err := registry.Heartbeats(ctx, cfg.Res.JS, cfg.Res.Hosts)
		if err == nil && !namedBy(hbs, name) {
			break
		}
		select {
		case <-ctx.Done():
			return // served again, or hosts that stay: the consumers are theirs
		case <-time.After(retirePoll):
		}
	}
	if _, err := cfg.Res.RemoteAgents.Get(ctx, subject.AgentKey(name)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		return // registered again, or not known: leave the consumers
	}
	if err := agent.RemoveConsumers(ctx, cfg.Res, name); err != nil {
		log.Warn("removing the inbox consumers of a removed remote agent", "err", err)
		return
	}
	kept, err := cfg.Res.DeleteInbox(ctx, name)
	switch {
	case err != nil:
		log.Warn("deleting the inbox of a removed remote agent", "err", err)
	case kept > 0:
		log.Info("removed the inbox consumers of a removed remote agent; its inbox holds requests and stays", "requests", kept)
	default:
		log.Info("removed the inbox and its consumers of a removed remote agent")
		dropMarker(parent, cfg, name, log)
	}
}

// dropMarker drops the removal marker of a registration whose agent left nothing behind (no
// inbox), so that later starts do not replay every removal ever made, once the marker is
// markerGrace old: every watch of the bucket has delivered it by then, so no process still runs,
// or starts, a host for the registration the marker removed. It waits until ctx ends.
func dropMarker(ctx context.Context, cfg ServeConfig, name string, log *slog.Logger) {
	for {
		var wait time.Duration
		err := markerPolicy.Do(ctx, func() (err error) {
			wait, err = bus.DropTombstone(ctx, cfg.Res.JS, subject.RemoteAgentsBucket, subject.AgentKey(name), markerGrace)
			if err != nil && ctx.Err() == nil {
				log.Warn("dropping the removal marker of a remote agent; trying again", "err", err)
			}
			return err
		})
		if err != nil || wait == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// markerPolicy paces the tries of a replayed removal's reading of the inbox and of dropMarker,
// until their context ends: 200 ms doubling to 5 s. A bus that fails for a moment (a leader
// election, a loaded server) then does not leave a removal half done.
var markerPolicy = retry.Policy{First: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// markerGrace is how old a removal marker must be before dropMarker drops it: longer than any
// watch of the remote agents bucket lags behind.
var markerGrace = time.Minute

// retirePoll is how often retire reads the heartbeats while a host still names the agent.
const retirePoll = 500 * time.Millisecond

// namedBy reports whether a heartbeat names the agent.
func namedBy(hbs map[string]registry.Host, name string) bool {
	for _, h := range hbs {
		if slices.Contains(h.Agents, name) {
			return true
		}
	}
	return false
}
