// Package registry records which agents exist, what they can be called with, and which workflow
// hosts are alive to run them.
//
// Hosts write it: each agent's workflow types and methods (kept until changed), and a heartbeat
// per host naming the agents it runs (expiring). Ingress reads it through a Directory kept
// current by watches, so that an unknown agent or method is refused at once (404) and a known
// one with no live host is refused with 503 instead of waiting for a timeout.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// HeartbeatInterval is how often a host refreshes its heartbeat. A host whose heartbeat is older
// than three intervals is taken for dead.
const HeartbeatInterval = 2 * time.Second

// Agent is what an agent registered.
type Agent struct {
	Name          string   `json:"name"`
	WorkflowTypes []string `json:"workflowTypes"`
	Webhooks      []string `json:"webhooks,omitempty"`
	DataMethods   []string `json:"dataMethods,omitempty"`
	Chat          bool     `json:"chat,omitempty"`
	File          bool     `json:"file,omitempty"`
}

// HasWorkflowType reports whether the agent runs workflows of this type.
func (a Agent) HasWorkflowType(t string) bool { return slices.Contains(a.WorkflowTypes, t) }

// HasWebhook reports whether the agent has this webhook method.
func (a Agent) HasWebhook(m string) bool { return slices.Contains(a.Webhooks, m) }

// HasDataMethod reports whether the agent has this Data method; names match case-insensitively.
func (a Agent) HasDataMethod(m string) bool {
	return slices.Contains(a.DataMethods, strings.ToLower(m))
}

// Host is one workflow host's heartbeat.
type Host struct {
	ID        string    `json:"id"`
	Agents    []string  `json:"agents"`
	StartedAt time.Time `json:"startedAt"`
}

// Register writes the agents' registrations.
func Register(ctx context.Context, kv jetstream.KeyValue, agents []Agent) error {
	for _, a := range agents {
		b, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("encoding agent %s: %w", a.Name, err)
		}
		if _, err := kv.Put(ctx, subject.AgentKey(a.Name), b); err != nil {
			return fmt.Errorf("registering agent %s: %w", a.Name, err)
		}
	}
	return nil
}

// Beat writes one heartbeat of a host.
func Beat(ctx context.Context, kv jetstream.KeyValue, h Host) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encoding heartbeat: %w", err)
	}
	if _, err := kv.Put(ctx, subject.HostKey(h.ID), b); err != nil {
		return fmt.Errorf("writing heartbeat: %w", err)
	}
	return nil
}

// Leave removes a host's heartbeat, so that ingress stops counting on it at once.
func Leave(ctx context.Context, kv jetstream.KeyValue, hostID string) error {
	if err := kv.Delete(ctx, subject.HostKey(hostID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("removing heartbeat: %w", err)
	}
	return nil
}

// Directory is ingress's live view of the registry.
type Directory struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.RWMutex
	agents map[string]Agent // by name
	hosts  map[string]seenHost

	watchers []jetstream.KeyWatcher
	wg       sync.WaitGroup
}

type seenHost struct {
	host Host
	seen time.Time // local time the last heartbeat arrived; clocks of hosts are not trusted
}

// NewDirectory watches the registry and hosts buckets and returns once both are loaded.
func NewDirectory(ctx context.Context, registryKV, hostsKV jetstream.KeyValue, log *slog.Logger) (*Directory, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Directory{log: log, now: time.Now, agents: make(map[string]Agent), hosts: make(map[string]seenHost)}
	for _, kv := range []struct {
		kv    jetstream.KeyValue
		apply func(jetstream.KeyValueEntry)
	}{{registryKV, d.applyAgent}, {hostsKV, d.applyHost}} {
		w, err := kv.kv.WatchAll(context.WithoutCancel(ctx))
		if err != nil {
			_ = d.Close()
			return nil, fmt.Errorf("watching %s: %w", kv.kv.Bucket(), err)
		}
		d.watchers = append(d.watchers, w)
		ready := make(chan struct{})
		d.wg.Add(1)
		go d.follow(w, kv.apply, ready)
		select {
		case <-ready:
		case <-ctx.Done():
			_ = d.Close()
			return nil, fmt.Errorf("loading %s: %w", kv.kv.Bucket(), ctx.Err())
		}
	}
	return d, nil
}

func (d *Directory) follow(w jetstream.KeyWatcher, apply func(jetstream.KeyValueEntry), ready chan struct{}) {
	defer d.wg.Done()
	loaded := false
	for e := range w.Updates() {
		if e == nil {
			if !loaded {
				loaded = true
				close(ready)
			}
			continue
		}
		apply(e)
	}
	if !loaded {
		close(ready)
	}
}

func (d *Directory) applyAgent(e jetstream.KeyValueEntry) {
	name, err := subject.ParseToken(e.Key())
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(d.agents, name)
		return
	}
	var a Agent
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		d.log.Error("ignoring bad agent registration", "agent", name, "err", err)
		return
	}
	d.agents[name] = a
}

func (d *Directory) applyHost(e jetstream.KeyValueEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(d.hosts, e.Key())
		return
	}
	var h Host
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		d.log.Error("ignoring bad heartbeat", "err", err)
		return
	}
	d.hosts[e.Key()] = seenHost{host: h, seen: d.now()}
}

// Agent returns an agent's registration.
func (d *Directory) Agent(name string) (Agent, bool) {
	d.mu.RLock()
	a, ok := d.agents[name]
	d.mu.RUnlock()
	return a, ok
}

// Live reports whether some host with a fresh heartbeat runs the agent.
func (d *Directory) Live(agent string) bool {
	cutoff := d.now().Add(-3 * HeartbeatInterval)
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, h := range d.hosts {
		if h.seen.After(cutoff) && slices.Contains(h.host.Agents, agent) {
			return true
		}
	}
	return false
}

// Close stops the watches.
func (d *Directory) Close() error {
	var errs []error
	for _, w := range d.watchers {
		if err := w.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	d.wg.Wait()
	return errors.Join(errs...)
}
