// Package registry records which agents exist, what they can be called with, and which workflow
// hosts are alive to run them.
//
// Hosts write it: each agent's workflow types and methods (kept until changed), and a heartbeat
// per host naming the agents it runs and the inbox partitions it owns (expiring). Ingress reads
// it through a Directory kept current by watches, so that an unknown agent or method is refused
// at once (404) and a known one with no live host is refused with 503 instead of waiting for a
// timeout. Workflow hosts read the same Directory to learn which hosts of their agents are alive,
// the membership their partitions are divided by (package placement).
package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/placement"
	"github.com/agentbus/agentbus/pkg/subject"
)

// HeartbeatInterval is how often a host refreshes its heartbeat.
const HeartbeatInterval = 800 * time.Millisecond

// DeadAfter is how long after its last heartbeat a host is taken for dead: just over three
// intervals, so that two late or lost beats on a loaded machine are not a death (the host must
// stall for 1.7 s beyond its schedule), while the partitions of a crashed host find a new owner
// 1.7 to 2.5 s after the crash, plus the takeover's own time. A host's lease (package agent) is
// shorter than DeadAfter; docs/deployment.md says which releases may run side by side.
const DeadAfter = 2500 * time.Millisecond

// Agent is what an agent registered.
type Agent struct {
	Name          string   `json:"name"`
	WorkflowTypes []string `json:"workflowTypes"`
	Webhooks      []string `json:"webhooks,omitempty"`
	// DataMethods are the Data methods' names, lowercased and sorted.
	DataMethods []string `json:"dataMethods,omitempty"`
	// Methods describe the Data methods, in DataMethods' order, for clients that offer them as
	// tools. A registration written by a host older than this field has none.
	Methods []Method `json:"methods,omitempty"`
	Chat    bool     `json:"chat,omitempty"`
	File    bool     `json:"file,omitempty"`
	// Tenants that may call the agent; empty means every tenant.
	Tenants []string `json:"tenants,omitempty"`
	// IdleAfterMs is the agent's own idle timeout in milliseconds (agent.IdleAfter): a running
	// instance without a message for that long completes when its next message comes. 0: the
	// hosts' AGENTBUS_IDLE_TIMEOUT applies.
	IdleAfterMs int64 `json:"idleAfterMs,omitempty"`
}

// IdleTimeout is how long the agent's instances may go without a message before they count as
// completed: the agent's own IdleAfterMs, else hosts, the hosts' timeout (0: never).
func (a Agent) IdleTimeout(hosts time.Duration) time.Duration {
	if a.IdleAfterMs > 0 {
		return time.Duration(a.IdleAfterMs) * time.Millisecond
	}
	return hosts
}

// Method describes a Data method: what a client needs to call it as a tool.
type Method struct {
	// Name as the agent registered it; calls match it case-insensitively.
	Name string `json:"name"`
	// Description says what the method does, for a language model or a person; may be empty.
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema of the parameters object (the Data call's body),
	// {"type":"object"} when the agent gave none.
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Method returns the description of a Data method; names match case-insensitively.
func (a Agent) Method(name string) (Method, bool) {
	for _, m := range a.Methods {
		if strings.EqualFold(m.Name, name) {
			return m, true
		}
	}
	return Method{}, false
}

// VisibleTo reports whether callers of the tenant may see and call the agent.
func (a Agent) VisibleTo(tenant string) bool {
	return len(a.Tenants) == 0 || slices.Contains(a.Tenants, tenant)
}

// Owner names whose the agent is, for the shares of what a process keeps for many agents (their
// compiled schemas): "tenant t" for an agent only tenant t may call (a tenant's remote agent),
// else "agent " and its name.
func (a Agent) Owner() string {
	if len(a.Tenants) == 1 {
		return "tenant " + a.Tenants[0]
	}
	return "agent " + a.Name
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
	// Partitions are the inbox partitions the host holds, by agent: those it owns, those it is
	// still handing over, and (FeatureFinishing) those whose requests still run there. Another
	// host takes over a partition that no live host lists.
	Partitions map[string][]int `json:"partitions,omitempty"`
	// Features name what the host understands that hosts of earlier releases did not. Ingress
	// relies on a feature for an agent only while every live host of the agent lists it
	// (Directory.AllLiveHave), so that a rolling upgrade may replace hosts and ingresses in any
	// order.
	Features []string `json:"features,omitempty"`
	// Leaving is set while the host stops: it takes no partition any more (placement leaves it
	// out, and so do Live, LiveHosts and AllLiveHave), but Partitions still lists the
	// partitions whose requests it is finishing, so that no other host redelivers them.
	Leaving bool `json:"leaving,omitempty"`
	// InFlight counts the requests the host holds, queued or running, when it wrote the
	// heartbeat. Hosts of earlier releases leave it out; those that write it list
	// FeatureInspect.
	InFlight int `json:"inFlight,omitempty"`
}

// FeatureReplyTo means the host reads a waiting ingress's reply subject from the request
// envelope (agentbusv1.Request.reply_to), not only from the Agentbus-Reply-To header.
const FeatureReplyTo = "reply-to"

// FeatureFinishing means the host lists a partition in its heartbeat while any request of it
// still runs there, also after it let the partition go and while it stops (Leaving): a
// partition that no fresh heartbeat lists is held by no live host, and its unacknowledged
// requests may be redelivered at once. Hosts redeliver so only while every live host of the
// agent lists the feature.
const FeatureFinishing = "finishing"

// FeatureInspect means the host answers on its inspect subject (subject.Inspect) what it holds,
// and its heartbeat counts its requests in flight (Host.InFlight).
const FeatureInspect = "inspect"

// Owns reports whether the heartbeat lists the agent's partition p.
func (h Host) Owns(agent string, p int) bool { return slices.Contains(h.Partitions[agent], p) }

// Has reports whether the heartbeat lists the feature.
func (h Host) Has(feature string) bool { return slices.Contains(h.Features, feature) }

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
	var b Beater
	return b.Beat(ctx, kv, h)
}

// Beater writes the heartbeats of one host, encoding one only when it differs from the one
// before: an idle host writes the same heartbeat every HeartbeatInterval, and encoding it is about
// a third of what a beat costs the host's process. The zero value is ready; calls must not overlap.
type Beater struct {
	last Host
	enc  []byte
}

// Beat writes h as the host's heartbeat.
func (b *Beater) Beat(ctx context.Context, kv jetstream.KeyValue, h Host) error {
	if b.enc == nil || !h.equal(b.last) {
		enc, err := json.Marshal(h)
		if err != nil {
			return fmt.Errorf("encoding heartbeat: %w", err)
		}
		b.last, b.enc = h.clone(), enc
	}
	if _, err := kv.Put(ctx, subject.HostKey(h.ID), b.enc); err != nil {
		return fmt.Errorf("writing heartbeat: %w", err)
	}
	return nil
}

// equal reports whether two heartbeats say the same; every field of Host takes part.
func (h Host) equal(o Host) bool {
	return h.ID == o.ID && slices.Equal(h.Agents, o.Agents) && h.StartedAt.Equal(o.StartedAt) &&
		maps.EqualFunc(h.Partitions, o.Partitions, slices.Equal) && slices.Equal(h.Features, o.Features) &&
		h.Leaving == o.Leaving && h.InFlight == o.InFlight
}

// clone copies h, its slices and map too.
func (h Host) clone() Host {
	h.Agents, h.Features = slices.Clone(h.Agents), slices.Clone(h.Features)
	if h.Partitions != nil {
		ps := make(map[string][]int, len(h.Partitions))
		for a, p := range h.Partitions {
			ps[a] = slices.Clone(p)
		}
		h.Partitions = ps
	}
	return h
}

// Heartbeats reads every heartbeat in the hosts bucket, live or stale, by host id. A value that
// is not a heartbeat is skipped.
func Heartbeats(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) (map[string]Host, error) {
	// bus.Entries, not nats.go's ListKeys, which can end early while hosts write heartbeats.
	entries, err := bus.Entries(ctx, js, kv)
	if err != nil {
		return nil, fmt.Errorf("reading heartbeats: %w", err)
	}
	out := make(map[string]Host, len(entries))
	for _, e := range entries {
		var h Host
		if json.Unmarshal(e.Value(), &h) == nil && h.ID != "" {
			out[h.ID] = h
		}
	}
	return out, nil
}

// Settled reports whether the heartbeats of hosts ids divide the agent's partitions as
// placement assigns them: every one of ids has a heartbeat, and each partition is listed by its
// owner and by no other of ids. Hosts not in ids are not looked at.
func Settled(hbs map[string]Host, agent string, partitions int, ids []string) bool {
	for p, owner := range placement.Assign(agent, partitions, ids) {
		for _, id := range ids {
			hb, ok := hbs[id]
			if !ok || hb.Owns(agent, p) != (id == owner) {
				return false
			}
		}
	}
	return true
}

// Leave removes a host's heartbeat, so that ingress stops counting on it at once.
func Leave(ctx context.Context, kv jetstream.KeyValue, hostID string) error {
	if err := kv.Delete(ctx, subject.HostKey(hostID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("removing heartbeat: %w", err)
	}
	return nil
}

// Directory is a process's live view of the registry and of the hosts' heartbeats, from a watch of
// each bucket. The ingress and the hosts of one process may share one (agent.HostConfig.Directory,
// ingress.Config.Directory): every watch receives every heartbeat of every host.
type Directory struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.RWMutex
	agents map[string]Agent // by name
	// agentRevs are the registry bucket's revisions of the registrations in agents.
	agentRevs map[string]uint64
	// noSchemas drops the methods' schemas of the registrations (WithoutSchemas).
	noSchemas bool
	// visible indexes agents by the tenants they name (Agent.Tenants), "" holding those every
	// tenant may call: a tenant's listing (VisibleAgents) reads its own and the shared ones, not
	// every tenant's.
	visible map[string]map[string]struct{}
	hosts   map[string]seenHost
	// byAgent indexes hosts by the agents their heartbeats name (putHostLocked, dropHostLocked):
	// a host asks for its agents' hosts ten times a second, and an ingress for an agent's on
	// every call, which should not cost more with every other agent's hosts.
	byAgent map[string]map[string]struct{}
	// agentsWatched is the revision of the newest entry of the registry bucket that its watch
	// delivered (AgentsRevision); every older one came before it.
	agentsWatched atomic.Uint64

	changed chan struct{} // signalled when a heartbeat arrives or leaves
	// subs are the channels of Subscribe, signalled with changed: those told of every host, and
	// by agent those told of the hosts of the agent. A heartbeat signals the channels of its
	// host's agents, not every channel of the process's hosts.
	subsMu    sync.Mutex
	subsAll   map[chan struct{}]struct{}
	subsAgent map[string]map[chan struct{}]struct{}
	// lastBeat is the local time the newest heartbeat of any host arrived.
	lastBeat time.Time
	// resumedAt is when heartbeats arrived again after none of any host had for stallGap, and
	// stalledFrom when the last one before that silence had (see cutoff).
	resumedAt, stalledFrom time.Time

	// hostsKV is read when every heartbeat has stopped arriving (see cutoff); nil never is.
	hostsKV  jetstream.KeyValue
	probeMu  sync.Mutex
	probedAt time.Time
	bucketUp bool
	// bucketDownAt is when a reading last found the bucket unreadable or without a leader;
	// guarded by mu, since arriving heartbeats read it too.
	bucketDownAt time.Time

	// watched is the revision of the newest entry of the hosts bucket that its watch delivered
	// (HostsCurrent). The watch delivers in revision order, so every older one came before it.
	watched atomic.Uint64
	// behindAt is when HostsCurrent last found the watch behind (Unix nanoseconds).
	behindAt atomic.Int64

	// stopWatch ends the watches' context: nats.go keeps a goroutine per watch until it ends.
	stopWatch context.CancelFunc
	watchMu   sync.Mutex // guards watchers and closed: a lost watch is replaced (follow)
	watchers  []jetstream.KeyWatcher
	closed    bool
	wg        sync.WaitGroup
	// hostsGone is signalled when a reading found the hosts bucket's stream gone (refresh):
	// its watch is then stopped and made again once the bucket exists again.
	hostsGone chan struct{}
}

type seenHost struct {
	host Host
	seen time.Time // local time the last heartbeat arrived; clocks of hosts are not trusted
	// raw is the heartbeat as written: an idle host writes the same one every time, which is
	// then not decoded again.
	raw []byte
}

// freshAt reports whether the host's heartbeat is newer than a cutoff (Directory.cutoff).
func (h seenHost) freshAt(cutoff time.Time) bool { return h.seen.After(cutoff) }

// liveAt reports whether the host counts as live for a cutoff: its heartbeat is fresh, and it is
// not leaving.
func (h seenHost) liveAt(cutoff time.Time) bool { return h.freshAt(cutoff) && !h.host.Leaving }

// NewDirectory watches the registry and hosts buckets and returns once both are loaded. While
// JetStream answers as a cluster still electing its leaders does, it tries again
// (bus.Starting).
func NewDirectory(ctx context.Context, registryKV, hostsKV jetstream.KeyValue, log *slog.Logger, opts ...DirectoryOption) (*Directory, error) {
	return bus.Starting(ctx, func(ctx context.Context) (*Directory, error) {
		return newDirectory(ctx, registryKV, hostsKV, log, opts)
	})
}

// DirectoryOption configures a Directory.
type DirectoryOption func(*Directory)

// WithoutSchemas makes a Directory keep the registrations without their methods' schemas
// (Method.InputSchema nil): a workflow host reads the registrations of the agents it calls, never
// their schemas, which are up to 64 KiB each and which every process would otherwise hold for
// every registration of every tenant.
func WithoutSchemas() DirectoryOption { return func(d *Directory) { d.noSchemas = true } }

// newDirectory is one try of NewDirectory; it stops what it started when it fails.
func newDirectory(ctx context.Context, registryKV, hostsKV jetstream.KeyValue, log *slog.Logger, opts []DirectoryOption) (*Directory, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	d := &Directory{log: log, now: time.Now, agents: make(map[string]Agent), agentRevs: make(map[string]uint64), visible: make(map[string]map[string]struct{}), hosts: make(map[string]seenHost), changed: make(chan struct{}, 1),
		stopWatch: stopWatch, hostsKV: hostsKV, hostsGone: make(chan struct{}, 1)}
	for _, o := range opts {
		o(d)
	}
	for _, kv := range []struct {
		kv    jetstream.KeyValue
		apply func(e jetstream.KeyValueEntry, initial bool)
		// byMarker: loaded at the watcher's own end-of-initial-values marker, for the hosts
		// bucket, whose values expire (bus.NewestRevision) and are all written again within a
		// heartbeat.
		byMarker bool
	}{{registryKV, d.applyAgent, false}, {hostsKV, d.applyHost, true}} {
		w, err := kv.kv.WatchAll(watchCtx)
		if err != nil {
			_ = d.Close()
			return nil, fmt.Errorf("watching %s: %w", kv.kv.Bucket(), err)
		}
		d.watchMu.Lock()
		i := len(d.watchers)
		d.watchers = append(d.watchers, w)
		d.watchMu.Unlock()
		var upTo uint64
		if kv.byMarker {
			upTo = bus.AtMarker
		} else if upTo, err = bus.NewestRevision(ctx, kv.kv); err != nil {
			_ = d.Close()
			return nil, fmt.Errorf("loading %s: %w", kv.kv.Bucket(), err)
		}
		ready := make(chan struct{})
		d.wg.Go(func() { d.follow(watchCtx, i, kv.kv, w, upTo, ready, kv.apply) })
		select {
		case <-ready:
		case <-ctx.Done():
			_ = d.Close()
			return nil, fmt.Errorf("loading %s: %w", kv.kv.Bucket(), ctx.Err())
		}
	}
	return d, nil
}

// rewatchEvery is how often a directory tries to watch a bucket again whose watch ended.
const rewatchEvery = 500 * time.Millisecond

// follow applies what the watch w of bucket kv (the directory's i-th) delivers, as bus.Follow
// does, and watches kv again when the watch ends while ctx is live. The hosts bucket is in
// memory storage: a NATS server or cluster that restarts whole comes back without it, until a
// host creates it again (bus.EnsureHosts). nats.go ends a watch whose stream it finds gone, or
// follows the bucket made again only at its next check of the watch's idle heartbeats (10 s);
// a reading that finds the stream gone (refresh) stops the hosts bucket's watch at once. follow
// then watches kv again every rewatchEvery until it can, taking what the new watch delivers up
// to its marker as read back (loading).
func (d *Directory) follow(ctx context.Context, i int, kv jetstream.KeyValue, w jetstream.KeyWatcher, upTo uint64,
	ready chan struct{}, apply func(jetstream.KeyValueEntry, bool)) {
	var gone chan struct{}
	if kv == d.hostsKV {
		gone = d.hostsGone
	}
	for {
		followed := make(chan struct{})
		var stopper sync.WaitGroup
		stopper.Go(func() {
			select {
			case <-gone:
				_ = w.Stop() // its updates end, and so does Follow
			case <-followed:
			}
		})
		bus.Follow(w, upTo, ready, apply)
		close(followed)
		stopper.Wait()
		if w = d.rewatch(ctx, i, kv); w == nil {
			return
		}
		select {
		case <-gone: // from before this watch began
		default:
		}
		upTo, ready = bus.AtMarker, make(chan struct{})
		if kv == d.hostsKV {
			// A bucket made again counts its revisions from 1.
			d.watched.Store(0)
		}
	}
}

// rewatch watches bucket kv again in place of the directory's i-th watch, which ended, and
// returns the new watch; nil once ctx ended or the directory closed.
func (d *Directory) rewatch(ctx context.Context, i int, kv jetstream.KeyValue) jetstream.KeyWatcher {
	d.watchMu.Lock()
	closed := d.closed
	d.watchMu.Unlock()
	if closed || ctx.Err() != nil {
		return nil
	}
	d.log.Warn("watch of a bucket ended: watching it again once the bucket exists", "bucket", kv.Bucket())
	t := time.NewTicker(rewatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		w, err := kv.WatchAll(ctx)
		if err != nil {
			d.log.Debug("watching a bucket again", "bucket", kv.Bucket(), "err", err)
			continue
		}
		d.watchMu.Lock()
		closed := d.closed
		if !closed {
			d.watchers[i] = w
		}
		d.watchMu.Unlock()
		if closed {
			_ = w.Stop()
			return nil
		}
		d.log.Info("watching the bucket again", "bucket", kv.Bucket())
		return w
	}
}

func (d *Directory) applyAgent(e jetstream.KeyValueEntry, _ bool) {
	defer d.agentsWatched.Store(e.Revision())
	name, err := subject.ParseToken(e.Key())
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		d.index(name, d.agents[name], false)
		delete(d.agents, name)
		delete(d.agentRevs, name)
		return
	}
	var a Agent
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		d.log.Error("ignoring bad agent registration", "agent", name, "err", err)
		return
	}
	if d.noSchemas {
		for i := range a.Methods {
			a.Methods[i].InputSchema = nil
		}
	}
	if was, ok := d.agents[name]; ok {
		d.index(name, was, false)
	}
	d.index(name, a, true)
	d.agents[name] = a
	d.agentRevs[name] = e.Revision()
}

// index adds the agent name, registered as a, to the index of the tenants it names
// (Directory.visible), or removes it; d.mu is held for writing.
func (d *Directory) index(name string, a Agent, add bool) {
	tenants := a.Tenants
	if len(tenants) == 0 {
		tenants = []string{""}
	}
	for _, t := range tenants {
		names := d.visible[t]
		switch {
		case add && names == nil:
			names = make(map[string]struct{})
			d.visible[t] = names
			fallthrough
		case add:
			names[name] = struct{}{}
		default:
			delete(names, name)
			if len(names) == 0 {
				delete(d.visible, t)
			}
		}
	}
}

// AgentsRevision is the revision of the registry bucket up to which the directory holds every
// registration: one written or removed at that revision or before is seen as the bucket has it.
func (d *Directory) AgentsRevision() uint64 { return d.agentsWatched.Load() }

// AgentRevision is the registry bucket's revision of the agent's registration as the directory
// holds it; 0 when it holds none.
func (d *Directory) AgentRevision(name string) uint64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.agentRevs[name]
}

// applyHost records a heartbeat, or a host's leaving. A heartbeat that arrives as it happens is
// dated by the local clock (clocks of hosts are not trusted); one read when the watch starts may
// be old, and is dated back by its age as the server stored it, so that the heartbeat of a host
// that died a moment ago does not count as fresh.
func (d *Directory) applyHost(e jetstream.KeyValueEntry, initial bool) {
	d.mu.Lock()
	was := d.hosts[e.Key()].host.Agents
	d.applyHostLocked(e, initial)
	now := d.hosts[e.Key()].host.Agents
	d.mu.Unlock()
	d.watched.Store(e.Revision())
	d.signalFor(was, now)
}

// HostsCurrent reports whether the hosts bucket's watch has delivered every heartbeat the bucket
// holds now (its newest revision, as the stream's leader reports it). A watch can fall seconds
// behind the bucket (after a NATS election its consumer is made again), while the hosts it shows
// as silent write heartbeats; a host that is about to take another's partitions over because
// the directory counts it dead checks this first. It is false, too, while the bucket cannot be
// read.
//
// A watch found behind is taken to be so for behindFor without asking again, so that the hosts'
// partitions waiting on it cost the bucket's stream one request in that time, not one each.
func (d *Directory) HostsCurrent(ctx context.Context) (bool, error) {
	if d.hostsKV == nil {
		return true, nil
	}
	if at := d.behindAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < behindFor {
		return false, nil
	}
	newest, err := bus.NewestRevision(ctx, d.hostsKV)
	if err != nil {
		return false, err
	}
	if d.watched.Load() < newest {
		d.behindAt.Store(time.Now().UnixNano())
		return false, nil
	}
	return true, nil
}

// behindFor is how long HostsCurrent takes a watch it found behind to be so.
const behindFor = 50 * time.Millisecond

// applyHostLocked is applyHost for a caller that holds d.mu and signals the change itself.
func (d *Directory) applyHostLocked(e jetstream.KeyValueEntry, initial bool) {
	if e.Operation() != jetstream.KeyValuePut {
		d.dropHostLocked(e.Key())
		return
	}
	raw := e.Value()
	var h Host
	if old, ok := d.hosts[e.Key()]; ok && bytes.Equal(old.raw, raw) {
		h = old.host
	} else if err := json.Unmarshal(raw, &h); err != nil {
		d.log.Error("ignoring bad heartbeat", "err", err)
		return
	}
	seen := d.now()
	if age := seen.Sub(e.Created()); initial && age > 0 {
		seen = seen.Add(-min(age, 2*DeadAfter))
	}
	d.putHostLocked(e.Key(), seenHost{host: h, seen: seen, raw: raw})
	if silence := seen.Sub(d.lastBeat); !initial && !d.lastBeat.IsZero() && silence >= stallGap &&
		(silence < DeadAfter || d.bucketDownAt.After(d.lastBeat)) {
		if d.resumedAt.IsZero() || seen.Sub(d.resumedAt) >= DeadAfter {
			d.stalledFrom = d.lastBeat
		} // else another silence before the hosts were all back: as they stood before the first
		d.resumedAt = seen
	}
	if seen.After(d.lastBeat) {
		d.lastBeat = seen
	}
}

// putHostLocked records the heartbeat h under the hosts bucket's key, in d.hosts and byAgent.
func (d *Directory) putHostLocked(key string, h seenHost) {
	if old, ok := d.hosts[key]; ok && !slices.Equal(old.host.Agents, h.host.Agents) {
		d.dropHostLocked(key)
	}
	d.hosts[key] = h
	if d.byAgent == nil {
		d.byAgent = make(map[string]map[string]struct{})
	}
	for _, a := range h.host.Agents {
		keys := d.byAgent[a]
		if keys == nil {
			keys = make(map[string]struct{}, 1)
			d.byAgent[a] = keys
		}
		keys[key] = struct{}{}
	}
}

// dropHostLocked removes the heartbeat under key from d.hosts and byAgent.
func (d *Directory) dropHostLocked(key string) {
	old, ok := d.hosts[key]
	if !ok {
		return
	}
	delete(d.hosts, key)
	for _, a := range old.host.Agents {
		delete(d.byAgent[a], key)
		if len(d.byAgent[a]) == 0 {
			delete(d.byAgent, a)
		}
	}
}

// stallGap is a silence of every host's heartbeats that means they were not getting through
// (the hosts bucket electing a leader, or this watch cut off), not that the hosts died: two
// intervals, in which each live host writes two. A silence of DeadAfter or more counts so only
// when a reading of the bucket during it found the bucket down (refresh): one that found it
// readable and stale found the hosts dead.
const stallGap = 2 * HeartbeatInterval

// probeEvery bounds how often the hosts bucket is read while no heartbeat arrives, and
// probeTimeout how long a reading may take.
const (
	probeEvery   = time.Second
	probeTimeout = 500 * time.Millisecond
)

// cutoff returns the time after which a host's last heartbeat must have arrived for the host to
// count as live: DeadAfter ago. When no heartbeat of any host has arrived for that long, either
// every host stopped, or the heartbeats do not reach this watch (its consumer was on a NATS node
// that died and nats.go has not yet followed it elsewhere; or the bucket's stream is electing a
// leader and cannot be written). The bucket is then read directly (see refresh): what it holds
// decides, and when it cannot be read, the hosts count as they stood when the heartbeats
// stopped rather than all taken for dead at once; so too when it holds no fresh heartbeat but its
// stream has no leader, which no heartbeat could have been written to, or got one less than
// DeadAfter ago, before the hosts' next heartbeats could reach it.
//
// Once heartbeats arrive again after such a silence (of stallGap or more), the first to arrive
// say nothing of the others, whose writes failed alike and which write their next within an
// interval: for DeadAfter from then the hosts count as they stood when the silence began, so
// that the first host through does not take the others' partitions over.
func (d *Directory) cutoff() time.Time {
	now := d.now()
	cutoff := now.Add(-DeadAfter)
	d.mu.RLock()
	last, resumed, stalled := d.lastBeat, d.resumedAt, d.stalledFrom
	d.mu.RUnlock()
	if !resumed.IsZero() && now.Sub(resumed) < DeadAfter {
		cutoff = earlier(cutoff, stalled.Add(-DeadAfter))
	}
	if last.IsZero() || last.After(now.Add(-DeadAfter)) || d.refresh() {
		return cutoff
	}
	return earlier(cutoff, last.Add(-DeadAfter))
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// refresh reads the heartbeats of the known hosts from the bucket, at most every probeEvery,
// and applies them as the watch would have; it reports whether the bucket could be read and, if
// it held no fresh heartbeat, whether its stream's leader answers (the last time it was tried).
// Without a bucket to read it reports true.
func (d *Directory) refresh() bool {
	if d.hostsKV == nil {
		return true
	}
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	now := d.now()
	if !d.probedAt.IsZero() && now.Sub(d.probedAt) < probeEvery {
		return d.bucketUp
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := d.reread(ctx, now)
	if err != nil && !errors.Is(err, errBucketJustBack) {
		d.bucketDown(ctx, now)
	}
	d.probedAt, d.bucketUp = now, err == nil
	if err != nil {
		d.log.Warn("no heartbeats arrive and the hosts bucket cannot be read or written; hosts count as they stood", "err", err)
	}
	return d.bucketUp
}

// reread reads the known hosts' heartbeats back from the bucket and applies them; when none of
// them is fresh, it asks whether the bucket's stream has had a leader for DeadAfter
// (bucketLive).
func (d *Directory) reread(ctx context.Context, now time.Time) error {
	// Each host as it stood before the reads: one whose heartbeat the watch applies meanwhile
	// keeps that newer one.
	d.mu.RLock()
	was := make(map[string]time.Time, len(d.hosts))
	for k, h := range d.hosts {
		was[k] = h.seen
	}
	d.mu.RUnlock()
	entries, gone, err := d.readHosts(ctx, was)
	if err != nil {
		return err
	}
	fresh := d.applyRead(was, entries, gone, now)
	d.signal()
	if fresh {
		return nil
	}
	return d.bucketLive(ctx, now)
}

// readHosts reads the heartbeat of each host in was: the entries found, and the hosts whose
// key is gone.
func (d *Directory) readHosts(ctx context.Context, was map[string]time.Time) (entries []jetstream.KeyValueEntry, gone []string, err error) {
	for k := range was {
		e, err := d.hostsKV.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			gone = append(gone, k)
		case err != nil:
			return nil, nil, err
		default:
			entries = append(entries, e)
		}
	}
	return entries, gone, nil
}

// applyRead applies the heartbeats read back (a heartbeat read back is dated by its age) and
// removes the hosts whose key is gone, except those the watch changed since was; it reports
// whether the newest heartbeat seen is fresh.
func (d *Directory) applyRead(was map[string]time.Time, entries []jetstream.KeyValueEntry, gone []string, now time.Time) (fresh bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	unchanged := func(k string) bool { h, ok := d.hosts[k]; return ok && h.seen.Equal(was[k]) }
	for _, e := range entries {
		if unchanged(e.Key()) {
			d.applyHostLocked(e, true)
		}
	}
	for _, k := range gone {
		if unchanged(k) {
			d.dropHostLocked(k)
		}
	}
	return d.lastBeat.After(now.Add(-DeadAfter))
}

// bucketLive tells, when the bucket holds no fresh heartbeat either, whether that is because
// no host can write one: errBucketLeaderless while the bucket's stream has no leader,
// errBucketJustBack for DeadAfter after it had none.
func (d *Directory) bucketLive(ctx context.Context, now time.Time) error {
	// Its replicas answer reads even while its stream has no leader, when no heartbeat can be
	// written: the stream's info names its leader. (A replica answers it too while there is
	// none, without one.)
	st, err := d.hostsKV.Status(ctx)
	if err != nil {
		return err
	}
	if !hasLeader(st) {
		return errBucketLeaderless
	}
	d.mu.RLock()
	downAt := d.bucketDownAt
	d.mu.RUnlock()
	if !downAt.IsZero() && now.Sub(downAt) < DeadAfter {
		// Its stream has a leader again, since less than DeadAfter: the hosts, which write
		// every HeartbeatInterval, may not have reached it yet (their writes failed while it
		// had none).
		return errBucketJustBack
	}
	return nil
}

// bucketDown records that the bucket could not be read or has no leader, and wakes whoever
// creates it again when its stream is gone (a NATS server restarted without it).
func (d *Directory) bucketDown(ctx context.Context, now time.Time) {
	d.mu.Lock()
	d.bucketDownAt = now
	d.mu.Unlock()
	if _, err := d.hostsKV.Status(ctx); errors.Is(err, jetstream.ErrStreamNotFound) {
		select {
		case d.hostsGone <- struct{}{}:
		default:
		}
	}
}

// errBucketLeaderless is refresh's reason to count the hosts as they stood while the hosts
// bucket's stream names no leader.
var errBucketLeaderless = errors.New("the hosts bucket's stream has no leader")

// hasLeader reports whether a bucket's stream has a leader, as far as its status tells: a
// stream of one replica always has.
func hasLeader(st jetstream.KeyValueStatus) bool {
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return true
	}
	info := bs.StreamInfo()
	return info == nil || info.Cluster == nil || info.Config.Replicas <= 1 || info.Cluster.Leader != ""
}

// errBucketJustBack is refresh's reason to count the hosts as they stood while the hosts
// bucket's stream has had a leader for less than DeadAfter.
var errBucketJustBack = errors.New("the hosts bucket has had a leader again for less than " + DeadAfter.String())

// signal notes a change for Changed and every Subscribe, without blocking.
func (d *Directory) signal() { d.signalFor(nil, nil) }

// signalFor signals Changed, and the subscriptions to every host or to one of the agents in
// was or now (the agents a heartbeat named before and after it changed); with both nil, every
// subscription.
func (d *Directory) signalFor(was, now []string) {
	select {
	case d.changed <- struct{}{}:
	default:
	}
	d.subsMu.Lock()
	defer d.subsMu.Unlock()
	for ch := range d.subsAll {
		wake(ch)
	}
	if was == nil && now == nil {
		for _, chans := range d.subsAgent {
			for ch := range chans {
				wake(ch)
			}
		}
		return
	}
	for _, names := range [2][]string{was, now} {
		for _, a := range names {
			for ch := range d.subsAgent[a] {
				wake(ch)
			}
		}
	}
}

// wake signals ch without waiting: one value stands for many changes.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Subscribe returns a channel of its own that receives what Changed does, for one of several
// readers of a directory (the hosts of a process that share one); cancel ends it. Given agents,
// it receives only the changes of hosts that run one of them, and every reading of the bucket
// anew: a host hears of its agents' hosts, not of each heartbeat of every other agent's.
func (d *Directory) Subscribe(agents ...string) (changed <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	agents = slices.Clone(agents)
	d.subsMu.Lock()
	defer d.subsMu.Unlock()
	if len(agents) == 0 {
		if d.subsAll == nil {
			d.subsAll = make(map[chan struct{}]struct{})
		}
		d.subsAll[ch] = struct{}{}
	}
	if d.subsAgent == nil {
		d.subsAgent = make(map[string]map[chan struct{}]struct{})
	}
	for _, a := range agents {
		if d.subsAgent[a] == nil {
			d.subsAgent[a] = make(map[chan struct{}]struct{})
		}
		d.subsAgent[a][ch] = struct{}{}
	}
	return ch, func() {
		d.subsMu.Lock()
		defer d.subsMu.Unlock()
		delete(d.subsAll, ch)
		for _, a := range agents {
			if delete(d.subsAgent[a], ch); len(d.subsAgent[a]) == 0 {
				delete(d.subsAgent, a)
			}
		}
	}
}

// Changed receives a value after heartbeats arrived or hosts left; one value may stand for many
// changes. A host also dies by its heartbeat growing old, which sends nothing: callers that act
// on membership check LiveHosts on a timer too.
func (d *Directory) Changed() <-chan struct{} { return d.changed }

// Agent returns an agent's registration.
func (d *Directory) Agent(name string) (Agent, bool) {
	d.mu.RLock()
	a, ok := d.agents[name]
	d.mu.RUnlock()
	return a, ok
}

// VisibleAgents returns the registrations of the agents the tenant may call, ordered by name;
// tenant "" means every agent.
func (d *Directory) VisibleAgents(tenant string) []Agent {
	d.mu.RLock()
	var out []Agent
	if tenant == "" {
		out = slices.AppendSeq(make([]Agent, 0, len(d.agents)), maps.Values(d.agents))
	} else {
		out = make([]Agent, 0, len(d.visible[""])+len(d.visible[tenant]))
		for _, names := range []map[string]struct{}{d.visible[""], d.visible[tenant]} {
			for name := range names {
				out = append(out, d.agents[name])
			}
		}
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b Agent) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// eachLive calls f with the heartbeat of each host whose heartbeat is fresh, that runs the agent
// and is not leaving, until f returns false. f runs under the read lock.
func (d *Directory) eachLive(agent string, f func(Host) bool) {
	cutoff := d.cutoff()
	d.mu.RLock()
	defer d.mu.RUnlock()
	d.eachLiveLocked(agent, cutoff, f)
}

// eachLiveLocked is eachLive for a caller that holds d.mu and read the cutoff.
func (d *Directory) eachLiveLocked(agent string, cutoff time.Time, f func(Host) bool) {
	for key := range d.byAgent[agent] {
		if h := d.hosts[key]; h.liveAt(cutoff) && !f(h.host) {
			return
		}
	}
}

// Live reports whether some host with a fresh heartbeat runs the agent.
func (d *Directory) Live(agent string) bool {
	live := false
	d.eachLive(agent, func(Host) bool { live = true; return false })
	return live
}

// LiveHosts returns the heartbeats of the live hosts that run the agent, ordered by host id.
func (d *Directory) LiveHosts(agent string) []Host { return d.LiveHostsOf([]string{agent})[agent] }

// LiveHostsOf returns, for each of the agents, what LiveHosts returns for it, reading the
// directory once: a host running many agents asks for all of them ten times a second.
func (d *Directory) LiveHostsOf(agents []string) map[string][]Host {
	out := make(map[string][]Host, len(agents))
	for _, a := range agents {
		out[a] = nil
	}
	cutoff := d.cutoff()
	d.mu.RLock()
	for a := range out {
		d.eachLiveLocked(a, cutoff, func(h Host) bool { out[a] = append(out[a], h); return true })
	}
	d.mu.RUnlock()
	for _, list := range out {
		slices.SortFunc(list, func(a, b Host) int { return strings.Compare(a.ID, b.ID) })
	}
	return out
}

// AllLiveHave reports whether the agent has a live host and every live host of the agent lists
// the feature in its heartbeat.
func (d *Directory) AllLiveHave(agent, feature string) bool {
	live, all := false, true
	d.eachLive(agent, func(h Host) bool { live, all = true, h.Has(feature); return all })
	return live && all
}

// Holder returns the id of a host other than except whose fresh heartbeat lists the agent's
// partition p, leaving hosts included: a host that owns the partition, hands it over, or still
// runs requests of it.
func (d *Directory) Holder(agent string, p int, except string) (string, bool) {
	cutoff := d.cutoff()
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, h := range d.hosts {
		if h.host.ID != except && h.freshAt(cutoff) && h.host.Owns(agent, p) {
			return h.host.ID, true
		}
	}
	return "", false
}

// SeenHost is a heartbeat and when it arrived, by the local clock.
type SeenHost struct {
	Host
	// Seen is when the heartbeat arrived (a heartbeat read when the watch started is dated back
	// by its age as the server stored it).
	Seen time.Time
}

// Hosts returns the fresh heartbeats of every host, leaving ones included, ordered by host id.
func (d *Directory) Hosts() []SeenHost {
	cutoff := d.cutoff()
	d.mu.RLock()
	out := make([]SeenHost, 0, len(d.hosts))
	for _, h := range d.hosts {
		if h.freshAt(cutoff) {
			out = append(out, SeenHost{Host: h.host, Seen: h.seen})
		}
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b SeenHost) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Close stops the watches.
func (d *Directory) Close() error {
	d.watchMu.Lock()
	d.closed = true
	watchers := d.watchers
	d.watchMu.Unlock()
	var errs []error
	for _, w := range watchers {
		if err := w.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if d.stopWatch != nil {
		d.stopWatch()
	}
	d.wg.Wait()
	return errors.Join(errs...)
}

// OthersOf reports whether the directory holds a heartbeat of a host other than me that names
// one of the agents, fresh or not yet expired: whether one of the agents' hosts may yet count as
// dead by its heartbeat growing old, which no watch reports.
func (d *Directory) OthersOf(agents []string, me string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, a := range agents {
		for key := range d.byAgent[a] {
			if d.hosts[key].host.ID != me {
				return true
			}
		}
	}
	return false
}

// Fresh reports whether the host has a fresh heartbeat, leaving or not: whether Hosts lists it.
func (d *Directory) Fresh(hostID string) bool {
	cutoff := d.cutoff()
	d.mu.RLock()
	defer d.mu.RUnlock()
	h, ok := d.hosts[subject.HostKey(hostID)]
	return ok && h.freshAt(cutoff)
}

// AnyLive reports whether some host, of any agent, has a fresh heartbeat: whether anything at
// all would handle a request now. Ingress readiness asks it.
func (d *Directory) AnyLive() bool {
	cutoff := d.cutoff()
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, h := range d.hosts {
		if h.freshAt(cutoff) {
			return true
		}
	}
	return false
}
