package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/fairshare"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/idle"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/usage"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// HostConfig configures a Host. Zero values mean the documented defaults.
type HostConfig struct {
	// Conn is the NATS connection. Required. The Host does not close it.
	Conn *nats.Conn
	// Agents the host runs. Required; names must be unique.
	Agents []*Agent
	// ID names the host in heartbeats and logs, and decides which partitions it owns: it must be
	// unique among the live hosts. Default: the hostname and the process id (AGENTBUS_HOST_ID).
	ID string
	// Bus sizes the streams and buckets, which the host creates if they are missing.
	Bus bus.Config
	// ContinueAsNewEvents is the run length after which an instance rolls over to a new run id,
	// carrying its state. Default 1000; negative disables it.
	ContinueAsNewEvents int
	// IdleTimeout completes an instance that has had no message for this long: the next message
	// starts a new run with fresh state. Zero or negative (the default) never: an instance stays
	// active, its state kept, until a handler completes it. An agent sets its own with
	// IdleAfter. An instance with a timer that may still fire is never completed for idleness.
	IdleTimeout time.Duration
	// MaxDeliveries is how many times a request is tried (a handler that panics or fails with a
	// Retryable error, a host that crashes while handling it) before it is kept as a dead letter.
	// Default 5.
	MaxDeliveries int
	// RetryBackoff is the wait before the first retry; each further retry waits twice as long,
	// up to a minute. Default 1s.
	RetryBackoff time.Duration
	// MaxConcurrent is how many handlers of the agents without a capacity of their own (see the
	// agent option MaxConcurrent) run at once: the host's handler slots, which those agents
	// share. When more requests may run than there are free slots, a slot that frees up goes to
	// the tenants in turn (Share), and within a tenant to its conversations in turn, one request
	// each, not to the request that came first. Default 1024.
	MaxConcurrent int
	// Share gives a tenant's share of the handler slots of an agent on this host
	// (fairshare.Share): its weight in the turns of the agent's requests, and at most how many of
	// them run at once on the host. It is called when a tenant's request of the agent comes to
	// wait for a slot while none of the tenant's requests of the agent wait or run there, and
	// when the tenant's limits change, not for every request, under the host's lock: it must be
	// quick, a read of memory. Nil, or a zero Share, gives every tenant weight 1 and no cap. The
	// limits a system admin sets per tenant (package tenantlimits, which the host follows) win
	// over it: their weight replaces its weight, and their cap across the hosts applies besides
	// its cap.
	Share func(tenant, agent string) fairshare.Share
	// TenantMaxConcurrent caps each tenant's requests of an agent running at once over every
	// host of the agent together (AGENTBUS_TENANT_MAX_CONCURRENT), for the tenants whose limits
	// set no cap of their own; give every host the same. Zero means no cap.
	TenantMaxConcurrent int
	// AckWait is how long the bus waits for news of a request before it gives the request to
	// another host: a host tells the bus about every request it holds (queued or running) every
	// third of it, so a live host keeps its requests however long they take, and the requests of
	// a host that died come back after at most AckWait. Default 10s.
	AckWait time.Duration
	// IdleAfter is how long a partition goes without a request before the host stops pulling it
	// until a request for it is published: each pulled partition costs the bus
	// about three messages every 5 s (a pull request, a heartbeat, an expiry), for 16 partitions
	// an agent. Such a request reaches its handler a NATS round trip or two later than a pulled
	// one. Default 30s; negative: the host pulls every partition all the time.
	IdleAfter time.Duration
	// ConsumerInactiveThreshold is how long an agent's partition consumer stays once no host
	// pulls from it; then the bus deletes it (JetStream's inactive threshold). A live host pulls
	// (an idle partition at least every half of it), so only the consumers of an agent that no
	// host runs any more go: state the NATS servers would keep for good, and which every
	// acknowledgement of the agent's inbox checks. The requests waiting for such an agent stay in the inbox, and the first host of it that
	// starts again makes the consumers again. Give every host the same. Default 1h; at least 10s.
	ConsumerInactiveThreshold time.Duration
	// Directory, when set, is a directory of the agents and hosts shared with the other hosts of
	// the process, which the host reads instead of watching the buckets itself: each watch
	// reads every heartbeat of every host, so hosts of one process that share one read each
	// once (a workflow host process shares one among its Go agents' host and the host package
	// remote runs for each remote agent). The host does not close it. Nil makes one of its own.
	Directory *registry.Directory
	// TenantLimits, when set, is the cache of the tenants' limits (tenantlimits.Watch) shared with
	// the other hosts of the process, which the host follows (Cache.Subscribe) instead of
	// watching the bucket itself: each cache holds every tenant's record. The host does not
	// close it. Nil makes one of its own.
	TenantLimits *tenantlimits.Cache
	// Caps, when set, follows the hosts' load reports and the slot grants (WatchCaps) for the
	// other hosts of the process too, which the host reads instead of following them itself:
	// each load report then reaches the process once, and the grants bucket is watched once.
	// The host does not close it. Nil makes one of its own.
	Caps *CapWatch
	// Notices, when set, follows the instance notices for the other hosts of the process too
	// (FollowNotices): each notice then reaches the process once. The host does not close it.
	// Nil makes a subscription of its own.
	Notices *Notices
	// Replies, when set, receives the replies to the Agent2Agent calls of the other hosts of the
	// process too (bus.NewReplies): one subscription for them all. The host does not close it.
	// Nil makes one of its own.
	Replies *bus.Replies
	// TimerRelay, when set, moves the fired timers of every agent to the inboxes for the other
	// hosts of the process too (RelayTimers), and the host runs no relay of its own: every
	// relay pulls from the deployment's one relay consumer, which holds at most 512 waiting pull
	// requests, and each idle one costs the bus a pull request, a heartbeat and an expiry every
	// 5 s. The host does not close it. Nil runs one of its own.
	TimerRelay *TimerRelay
	// Meter, when set, counts what the host stores for each tenant (package usage) together with
	// the other hosts of the process, and publishes their counts together: one loop and one
	// publish of each counter a second for the process, not for each host (a workflow host
	// process runs one for each remote agent). The host neither runs nor closes it: what it
	// counted is published after it stopped. Nil makes and runs one of its own.
	Meter *usage.Meter
	// IdleBudget, when set, bounds the idle instance copies the host keeps in memory together
	// with the other hosts of the process (NewIdleBudget): 16 MiB for the process, not for each
	// of its hosts. Nil gives the host 16 MiB of its own. ShareWatches makes the eight for the
	// hosts of a process.
	IdleBudget *IdleBudget
	// Acked, when set, is where the host remembers the requests it acknowledged lately, together
	// with the other hosts of the process (NewAckedWindow): 2 MiB for the process, not for each
	// of its hosts. Nil gives the host a window of its own. ShareWatches makes one for the hosts
	// of a process.
	Acked *AckedWindow
	// ShutdownGrace bounds how long Run takes to return once its context ends. Running handlers
	// get all of it but the last 2 s (a quarter of it when shorter), which the host keeps for
	// cancelling the handlers still running (their requests go back to the bus) and writing what
	// it keeps in memory. Once NATS has been unreachable for a second (bus.GoneAfter) the host
	// waits for nothing that needs NATS, running handlers included: what it could not hand over
	// is logged once, and the bus delivers those requests again (at the latest after AckWait).
	// Default 10s.
	ShutdownGrace time.Duration
	// Logger receives the host's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the host's Prometheus metrics (docs/metrics.md); nil keeps none. Hosts of
	// one process may share one: they count into the same series. The host serves nothing;
	// whoever owns the registry exposes it (services/workflowhost on AGENTBUS_METRICS_ADDR).
	Metrics prometheus.Registerer
	// Tracer receives a consumer span per handled request, the child of the ingress's span that
	// the request's headers name, and handlers run in its context; nil means
	// otel.GetTracerProvider(). A no-op provider turns tracing off at no cost per request.
	Tracer trace.TracerProvider
}

// Validate reports a configuration that cannot work.
func (c HostConfig) Validate() error {
	if c.Conn == nil {
		return errors.New("host: Conn is required")
	}
	if len(c.Agents) == 0 {
		return errors.New("host: no agents")
	}
	seen := make(map[string]bool)
	for _, a := range c.Agents {
		if seen[a.name] {
			return fmt.Errorf("host: agent %q given twice", a.name)
		}
		seen[a.name] = true
	}
	if c.MaxDeliveries < 0 || c.RetryBackoff < 0 || c.AckWait < 0 {
		return errors.New("host: negative MaxDeliveries, RetryBackoff or AckWait")
	}
	if c.TenantMaxConcurrent < 0 {
		return errors.New("host: negative TenantMaxConcurrent")
	}
	if c.ConsumerInactiveThreshold != 0 && c.ConsumerInactiveThreshold < MinConsumerInactiveThreshold {
		return fmt.Errorf("host: ConsumerInactiveThreshold %v is below %v", c.ConsumerInactiveThreshold, MinConsumerInactiveThreshold)
	}
	return c.Bus.Validate()
}

// checkEvery is how often a host that shares an agent with other hosts looks whether one of
// their heartbeats grew old.
const checkEvery = registry.HeartbeatInterval / 10

// hostsInProcess numbers the hosts of this process that got a default id, so that two of them
// (tests, a program running several) do not share one.
var hostsInProcess atomic.Int64

// DefaultHostID is the default host id: the hostname and the process id.
func DefaultHostID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "host"
	}
	id := name + "-" + strconv.Itoa(os.Getpid())
	if n := hostsInProcess.Add(1); n > 1 {
		id += "-" + strconv.FormatInt(n, 10)
	}
	return id
}

// Defaults of HostConfig.
const (
	DefaultMaxDeliveries = 5
	DefaultRetryBackoff  = time.Second
	DefaultAckWait       = 10 * time.Second
	DefaultShutdownGrace = 10 * time.Second
	// DefaultIdleAfter is HostConfig.IdleAfter's default.
	DefaultIdleAfter = 30 * time.Second
	// DefaultConsumerInactiveThreshold is HostConfig.ConsumerInactiveThreshold's default.
	DefaultConsumerInactiveThreshold = time.Hour
	// MinConsumerInactiveThreshold is the least ConsumerInactiveThreshold: twice the life of
	// a host's pull request, which a live host renews before it ends.
	MinConsumerInactiveThreshold = 2 * pullExpiry
)

func (c HostConfig) withDefaults() HostConfig {
	if c.ID == "" {
		c.ID = DefaultHostID()
	}
	if c.ContinueAsNewEvents == 0 {
		c.ContinueAsNewEvents = 1000
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 1024
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.ConsumerInactiveThreshold == 0 {
		c.ConsumerInactiveThreshold = DefaultConsumerInactiveThreshold
	}
	switch {
	case c.IdleAfter == 0:
		c.IdleAfter = DefaultIdleAfter
	case c.IdleAfter < 0:
		c.IdleAfter = 0
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Host runs agents: it owns a share of each agent's inbox partitions, pulls requests from them,
// keeps instances and calls handlers.
type Host struct {
	cfg    HostConfig
	log    *slog.Logger
	agents map[string]*Agent
	names  []string // of the agents, in the order of HostConfig.Agents; not to be changed

	js  jetstream.JetStream
	res *bus.Resources
	dir *registry.Directory
	// dirChanged receives dir's changes; releaseDir closes dir, or ends the subscription to a
	// directory shared with other hosts (HostConfig.Directory).
	dirChanged <-chan struct{}
	releaseDir func()
	// dozeCheck is how often the host looks at the consumers of an agent's dozing partitions
	// (doze.go).
	dozeCheck time.Duration
	live      *liveSet
	history   *history.Store
	claims    *bus.Blobs
	usage     *usage.Meter // counts what the host stores per tenant (usage.go)
	dead      *deadletter.Store
	timers    *schedule.Store
	// runs is the run index, appended to when a run starts (runindex.go).
	runs *instance.Index
	// erased are the tenants whose data was erased, and when (notice.go); erasedMu orders
	// their writers.
	erased   atomic.Pointer[erasedTenants]
	erasedMu sync.Mutex
	// replies waits for the replies of Agent2Agent calls: HostConfig.Replies, or the host's own
	// when that is nil.
	replies *bus.Replies
	inboxes map[string]*agentInbox // by agent name, made by start
	// inspected answers on the host's inspect subject (inspect.go).
	inspected *nats.Subscription
	// slots are the handler slots of each agent (dispatch.go): the agents without a capacity of
	// their own share one.
	slots   map[string]*slots
	metrics *hostMetrics // nil without HostConfig.Metrics
	tracer  trace.Tracer // nil when tracing is off
	// limits are the tenants' limits set at runtime (limits.go); grants this host's parts of
	// the tenants' caps across the hosts (grants.go).
	limits atomic.Pointer[tenantlimits.Cache]
	grants *grants
	// unfollowLimits stops following the limits: it closes the host's own cache, or leaves a
	// shared one (HostConfig.TenantLimits).
	unfollowLimits func() error
	// board adds up the hosts' load reports, caps feeds it (with the grants), and lastLoad is
	// this host's own last report (load.go); loadReports sends them, and loadSent is whether
	// its last held entries (the loop's). caps is HostConfig.Caps, or the host's own when that
	// is nil.
	board       *inspect.LoadBoard
	caps        *CapWatch
	loadReports *idle.Loop
	loadSent    bool
	lastLoad    atomic.Pointer[[]inspect.LoadEntry]
	// loadIdle is set while the last load report counted nothing: the reports pause until a
	// request comes (wakeLoadLocked).
	loadIdle atomic.Bool

	started  time.Time
	ready    chan struct{}
	stopping chan struct{} // closed when shutdown begins: waits for retries end
	// hctx is the context handlers run in: it outlives Run's context by the shutdown grace.
	hctx context.Context
	// bctx is the context of the bus operations that outlive Run's context (handovers, the
	// stop's writes); abandon ends it when the stop gives up on the bus (see stop).
	bctx    context.Context
	abandon context.CancelFunc

	mu      sync.Mutex
	parts   map[partKey]*partition     // partitions pulled now, or being handed over
	placed  map[string]*division       // the last division of each agent's partitions (rebalance)
	convs   map[string]*conversation   // conversations with requests held, by stored subject
	held    map[heldKey]*delivery      // requests held, queued or running, by agent and inbox sequence
	acked   *AckedWindow               // requests this host (HostConfig.Acked: its process) acknowledged lately
	blocked map[*conversation]struct{} // conversations waiting for requests held elsewhere
	// resolving is set while the goroutine that watches blocked conversations runs.
	resolving bool
	// beaten is when the host's heartbeat was last written.
	beaten time.Time
	// leaving is set once the host stops: its heartbeat says so (registry.Host.Leaving).
	leaving bool
	// kick asks Run to divide the partitions again now: a partition began to be consumed, and
	// a stale pin on it may be removed (unpinStale).
	kick chan struct{}
	// keepAlive keeps held requests from redelivery (startKeepAlive): it rests while nothing is
	// held, and the next request held wakes it.
	keepAlive *idle.Loop

	// epoch is when the host was made; leaseEnd is when its lease ends, as a duration since
	// epoch (monotonic), 0 before the first heartbeat (lease.go).
	epoch    time.Time
	leaseEnd atomic.Int64
	// leaseMu serialises heartbeats, so that a lapsed lease is renewed once, and guards beater.
	leaseMu sync.Mutex
	beater  registry.Beater
	wg      sync.WaitGroup // drainers
	bg      sync.WaitGroup // handovers and the resolver
}

// NewHost checks cfg and returns a Host; Run starts it.
func NewHost(cfg HostConfig) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &Host{
		cfg: cfg, log: cfg.Logger.With("host", cfg.ID), agents: make(map[string]*Agent),
		slots: make(map[string]*slots), ready: make(chan struct{}), stopping: make(chan struct{}),
		kick: make(chan struct{}, 1), dozeCheck: dozeCheck,
		parts: make(map[partKey]*partition), placed: make(map[string]*division), convs: make(map[string]*conversation),
		held: make(map[heldKey]*delivery), blocked: make(map[*conversation]struct{}),
		tracer: tracing.Tracer(cfg.Tracer), epoch: time.Now(),
		board: inspect.NewLoadBoard(), loadReports: idle.NewLoop(inspect.LoadEvery, 0), keepAlive: idle.NewLoop(keepAliveEvery(cfg.AckWait), keepAliveEvery(cfg.AckWait)),
	}
	if cfg.Caps != nil {
		h.board = cfg.Caps.board
	}
	if h.acked = cfg.Acked; h.acked == nil {
		h.acked = NewAckedWindow()
	}
	h.grants = newGrants(h)
	var shared []string // the agents without slots of their own
	for _, a := range cfg.Agents {
		h.agents[a.name] = a
		h.names = append(h.names, a.name)
		if a.maxConcurrent > 0 {
			h.slots[a.name] = h.newSlots(a.maxConcurrent)
		} else {
			shared = append(shared, a.name)
		}
	}
	if len(shared) > 0 {
		s := h.newSlots(cfg.MaxConcurrent)
		for _, n := range shared {
			h.slots[n] = s
		}
	}
	if cfg.Metrics != nil {
		m, err := newHostMetrics(cfg.Metrics, cfg.Agents)
		if err != nil {
			return nil, fmt.Errorf("registering host metrics: %w", err)
		}
		h.metrics = m
		if err := h.collectLoad(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("registering host metrics: %w", err)
		}
	}
	return h, nil
}

// ID returns the host's id.
func (h *Host) ID() string { return h.cfg.ID }

// Run creates the bus resources it needs, registers the agents, joins the hosts of its agents and
// handles requests of the partitions it owns until ctx ends. Then it hands its partitions over
// to the other hosts, lets running handlers finish and returns, within ShutdownGrace. It returns
// an error only if it could not start.
func (h *Host) Run(ctx context.Context) error {
	h.bctx, h.abandon = context.WithCancel(context.WithoutCancel(ctx))
	defer h.abandon()
	if err := h.start(ctx); err != nil {
		return err
	}
	// Stopping a watch waits for NATS to delete its consumer: not past the stop's time.
	defer h.untilAbandoned(h.releaseDir)
	defer h.untilAbandoned(h.stopFollowing)
	defer h.closeReplies()
	defer func() { _ = h.inspected.Unsubscribe() }()

	// Handlers outlive ctx by the shutdown grace period, so that in-flight work finishes.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	h.hctx = hctx

	defer h.startBackground(hctx)()

	if err := h.rebalance(ctx); err != nil {
		h.stop(ctx, cancelHandlers)
		return err
	}
	if err := h.waitStarted(ctx); err != nil {
		h.stop(ctx, cancelHandlers)
		return err
	}
	h.log.Info("workflow host running", "agents", h.agentNames(), "owned", h.owned())
	close(h.ready)

	h.divide(ctx)
	h.stop(ctx, cancelHandlers)
	return nil
}

// startBackground starts the host's periodic jobs and returns what stops them. The jobs are
// idle.Loops: between their steps, and while they rest, they hold no goroutine, so that a host
// of an idle agent holds few.
func (h *Host) startBackground(hctx context.Context) (stop func()) {
	bgCtx, stopBackground := context.WithCancel(hctx)
	var loops sync.WaitGroup
	h.live.startSweeps(bgCtx)
	h.startKeepAlive()
	for _, in := range h.inboxes {
		in.keeper.Start(bgCtx)
	}
	if h.cfg.TimerRelay == nil {
		loops.Go(func() { relayTimers(bgCtx, h.timers, h.log) })
	}
	if h.cfg.Meter == nil {
		loops.Go(func() { h.runUsage(bgCtx) })
	}
	h.grants.start(bgCtx)
	h.startLoadReports()
	var pendingReads *idle.Loop
	if h.metrics != nil {
		pendingReads = h.startPendingReads(bgCtx)
	}
	return func() {
		stopBackground()
		loops.Wait()
		h.live.stopSweeps()
		h.keepAlive.Stop()
		for _, in := range h.inboxes {
			in.keeper.Stop()
		}
		h.grants.stop()
		h.stopLoadReports()
		if pendingReads != nil {
			pendingReads.Stop()
		}
	}
}

// divide writes the host's heartbeats and divides the partitions again whenever the hosts
// change, until ctx ends.
func (h *Host) divide(ctx context.Context) {
	beat := time.NewTicker(registry.HeartbeatInterval)
	defer beat.Stop()
	// Membership also changes by a heartbeat growing old, which no watch reports: looking often
	// keeps the takeover of a dead host's partitions close to the moment it counts as dead. A
	// host alone with its agents does not look (no other host's heartbeat can grow old, and its
	// own heartbeats signal dirChanged): an idle host wakes only for its heartbeats.
	check := time.NewTicker(checkEvery)
	defer check.Stop()
	checking := true
	for {
		if others := h.dir.OthersOf(h.names, h.cfg.ID); others != checking {
			if others {
				check.Reset(checkEvery)
			} else {
				check.Stop()
			}
			checking = others
		}
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			err := h.beat(ctx)
			if err != nil && ctx.Err() == nil {
				h.log.Warn("heartbeat", "err", err)
			}
			if err == nil && !checking {
				continue // alone: the heartbeat's arrival signals dirChanged, which divides
			}
		case <-h.dirChanged:
		case <-check.C:
		case <-h.kick:
		}
		if err := h.rebalance(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("dividing partitions", "err", err)
		}
	}
}

// start creates the bus resources, registers the agents and starts watching the hosts.
func (h *Host) start(ctx context.Context) error {
	js, err := jetstream.New(h.cfg.Conn)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	res, err := bus.Ensure(ctx, js, h.cfg.Bus)
	if err != nil {
		return err
	}
	res.LogMove(h.log)
	h.js, h.res, h.started = js, res, time.Now().UTC()
	h.live = newLiveSet(h.cfg.IdleBudget, instance.NewStore(res.Instances), h.log, h.cfg.ID, h.metrics.liveGauge(), h.mayAct)
	h.claims = bus.NewBlobs(res.Claims, h.cfg.Conn.MaxPayload())
	h.history = history.NewStore(res.Messages, res.Topics, js)
	h.dead = deadletter.NewStore(res, h.claims)
	h.timers = schedule.NewStore(js, res)
	h.runs = instance.NewIndex(js, res.Runs)
	if err := h.meterUsage(); err != nil {
		return err
	}
	h.replies = h.cfg.Replies
	if h.replies == nil {
		if h.replies, err = bus.NewReplies(h.cfg.Conn, "host-"+subject.Token(h.cfg.ID), h.log); err != nil {
			return err
		}
	}
	// An agent's inbox exists before the agent is registered: whoever finds it registered may
	// publish to it.
	h.inboxes = make(map[string]*agentInbox, len(h.cfg.Agents))
	for _, a := range h.cfg.Agents {
		st, err := res.InboxWith(ctx, a.name, a.partitionCount(res.Config))
		if err != nil {
			h.closeReplies()
			return err
		}
		h.inboxes[a.name] = newAgentInbox(js, st, a.name)
	}
	if err := h.followNotices(ctx); err != nil {
		h.closeReplies()
		return err
	}
	if h.inspected, err = h.serveInspect(); err != nil {
		h.closeReplies()
		return fmt.Errorf("answering inspection: %w", err)
	}

	regs := make([]registry.Agent, 0, len(h.agents))
	for _, a := range h.cfg.Agents {
		regs = append(regs, a.registration())
	}
	// Writes a cluster electing its leaders may lose are tried again, as the watches' starts are.
	register := func(ctx context.Context) error { return registry.Register(ctx, res.Registry, regs) }
	if err := bus.WhileStarting(ctx, register); err != nil {
		return err
	}
	if h.cfg.Directory != nil {
		h.dir = h.cfg.Directory
		h.dirChanged, h.releaseDir = h.dir.Subscribe(h.agentNames()...)
	} else {
		if h.dir, err = registry.NewDirectory(ctx, res.Registry, res.Hosts, h.log, registry.WithoutSchemas()); err != nil {
			return err
		}
		h.dirChanged, h.releaseDir = h.dir.Changed(), func() { _ = h.dir.Close() }
	}
	h.settlePartitions(ctx)
	if err := h.startFollowing(ctx); err != nil {
		h.releaseDir()
		return err
	}
	if err := bus.WhileStarting(ctx, h.beat); err != nil {
		h.stopFollowing()
		h.releaseDir()
		return err
	}
	return nil
}

// settlePartitions gives the inbox of each of the host's agents the agent's partition count
// (Partitions, or bus.Config.Partitions) when it has another, holds no request and no other
// live host runs the agent (bus.Resources.Repartition). Otherwise the host pulls the inbox's
// count, as every other host of the agent does: a host configured otherwise that joins them, or
// one started with another count while the inbox holds requests, changes nothing under them.
func (h *Host) settlePartitions(ctx context.Context) {
	for _, a := range h.cfg.Agents {
		name, want, in := a.name, a.partitionCount(h.res.Config), h.inboxes[a.name]
		if in.partitions == want {
			continue
		}
		if slices.ContainsFunc(h.dir.LiveHosts(name), func(hb registry.Host) bool { return hb.ID != h.cfg.ID }) {
			h.log.Warn("pulling the inbox's partition count, not the configured one: other live hosts of the agent pull it",
				"agent", name, "inbox_partitions", in.partitions, "configured", want)
			continue
		}
		st, err := h.res.Repartition(ctx, name, want)
		if err != nil {
			h.log.Warn("pulling the inbox's partition count, not the configured one", "agent", name,
				"inbox_partitions", in.partitions, "configured", want, "err", err)
			continue
		}
		h.log.Info("repartitioned the agent's inbox", "agent", name, "was", in.partitions, "partitions", want)
		in.stream, in.partitions = st, want
	}
}

// startFollowing starts following the tenants' limits, the hosts' load reports and the grants of
// the caps across the hosts; stopFollowing stops them again.
func (h *Host) startFollowing(ctx context.Context) (err error) {
	if err := h.startLimits(ctx); err != nil {
		return err
	}
	h.caps = h.cfg.Caps
	if h.caps == nil {
		if h.caps, err = watchCaps(ctx, h.cfg.Conn, h.res.SlotGrants, h.board, h.names); err != nil {
			_ = h.stopLimits()
			return err
		}
	}
	h.startGrants()
	return nil
}

func (h *Host) stopFollowing() {
	h.grants.close()
	if h.cfg.Caps == nil { // the host's own
		_ = h.caps.Close()
	}
	_ = h.stopLimits()
}

// closeReplies closes the host's replies subscription if it is its own (HostConfig.Replies).
func (h *Host) closeReplies() {
	if h.cfg.Replies == nil {
		_ = h.replies.Close()
	}
}

// stopReserve is the end of ShutdownGrace that running handlers do not get: the stop cancels
// the ones still running then, and writes what it keeps in memory.
const stopReserve = 2 * time.Second

// stop shuts the host down within ShutdownGrace: its heartbeat says it is leaving, so that the
// other hosts take its partitions at once, it hands every partition over (requests not started
// go back to the bus), lets running handlers finish until stopReserve before the end while its
// heartbeat still lists the partitions they belong to (then cancels them: their requests go back
// too), writes what is only counted in memory, and removes its heartbeat. Once NATS is gone
// (bus.WhenGone), or when the time is up, it gives up on the bus: it cancels the handlers and
// waits for nothing that needs NATS. What it could not hand over is logged once; the bus
// delivers those requests again, to the partition's next owner, at the latest after the ack wait.
func (h *Host) stop(ctx context.Context, cancelHandlers context.CancelFunc) {
	start := time.Now()
	grace := h.cfg.ShutdownGrace
	reserve := min(stopReserve, grace/4)
	handlersBy := start.Add(grace - reserve)
	// Bus operations end a little before the grace does, leaving time to return.
	time.AfterFunc(grace-reserve/4, h.abandon)
	gone := h.watchGone(cancelHandlers)

	h.announceLeaving()
	stopBeating := h.keepBeating()
	h.mu.Lock()
	for _, part := range h.parts {
		h.releaseLocked(part)
	}
	h.mu.Unlock()
	waitUntil(&h.bg, handlersBy) // handovers done: nothing is pulled or queued any more
	h.awaitHandlers(handlersBy, start.Add(grace-reserve/2), cancelHandlers)
	waitUntil(&h.bg, start.Add(grace-reserve/2))
	notWritten := h.live.sweep(h.bctx, true)
	stopBeating()
	lctx, cancel := context.WithTimeout(h.bctx, 2*time.Second)
	leaveErr := registry.Leave(lctx, h.res.Hosts, h.cfg.ID)
	cancel()
	gone.stop()

	// What the host acknowledged or gave back reached NATS if a flush goes through now.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(500*time.Millisecond, max(time.Until(start.Add(grace)), 100*time.Millisecond)))
	delivered := !gone.happened.Load() && h.cfg.Conn.IsConnected() && h.cfg.Conn.FlushWithContext(fctx) == nil
	cancel()
	h.mu.Lock()
	notAcked := len(h.held) // handlers that never returned
	h.mu.Unlock()
	if !delivered {
		notAcked = max(notAcked, int(gone.held.Load()))
	}
	took := time.Since(start).Round(time.Millisecond)
	if notAcked == 0 && notWritten == 0 && leaveErr == nil {
		h.log.Info("workflow host stopped", "took", took)
		return
	}
	h.log.Warn("workflow host stopped without handing everything over; the requests not acknowledged come back by redelivery",
		"requestsNotAcknowledged", notAcked, "ackWait", h.cfg.AckWait, "instanceRecordsNotWritten", notWritten,
		"heartbeatDeleted", leaveErr == nil, "natsReachable", !gone.happened.Load(), "took", took)
}

// goneWatch is what a stopping host knows of its NATS connection going away.
type goneWatch struct {
	// happened is set once NATS is gone; held is the requests held then (or, until then, when
	// the stop began), whose settling may not have reached NATS.
	happened atomic.Bool
	held     atomic.Int64
	// stop ends the watch.
	stop func()
}

// watchGone watches, while the host stops, for its NATS connection going away for good
// (bus.WhenGone): then the host gives up on the bus and cancels the handlers, which could
// neither store nor acknowledge anything.
func (h *Host) watchGone(cancelHandlers context.CancelFunc) *goneWatch {
	g := &goneWatch{}
	h.mu.Lock()
	g.held.Store(int64(len(h.held)))
	h.mu.Unlock()
	gone, stopWatch := bus.WhenGone(h.cfg.Conn)
	quit, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-gone:
			h.mu.Lock()
			g.held.Store(int64(len(h.held)))
			h.mu.Unlock()
			g.happened.Store(true)
			h.abandon()
			cancelHandlers()
		case <-h.bctx.Done():
		case <-quit:
		}
	}()
	g.stop = func() {
		close(quit)
		<-watched
		stopWatch()
	}
	return g
}

// announceLeaving marks the host as stopping and says so in its heartbeat, so that the other
// hosts take its partitions at once.
func (h *Host) announceLeaving() {
	close(h.stopping)
	h.mu.Lock()
	h.leaving = true
	h.mu.Unlock()
	lctx, cancel := context.WithTimeout(h.bctx, 2*time.Second)
	defer cancel()
	if err := h.beat(lctx); err != nil && h.bctx.Err() == nil {
		h.log.Warn("announcing the stop", "err", err)
	}
}

// keepBeating keeps the heartbeat (and so the lease) fresh while running handlers finish, until
// the function it returns is called.
func (h *Host) keepBeating() (stop func()) {
	beating, stopBeating := context.WithCancel(h.bctx)
	var beats sync.WaitGroup
	beats.Go(func() {
		t := time.NewTicker(registry.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-beating.Done():
				return
			case <-t.C:
				bctx, cancel := context.WithTimeout(beating, registry.HeartbeatInterval)
				if err := h.beat(bctx); err != nil && beating.Err() == nil {
					h.log.Warn("heartbeat", "err", err)
				}
				cancel()
			}
		}
	})
	return func() {
		stopBeating()
		beats.Wait()
	}
}

// awaitHandlers lets running handlers finish until handlersBy, then cancels those still
// running and waits for them until by.
func (h *Host) awaitHandlers(handlersBy, by time.Time, cancelHandlers context.CancelFunc) {
	handled := make(chan struct{})
	go func() { h.wg.Wait(); close(handled) }()
	t := time.NewTimer(time.Until(handlersBy))
	defer t.Stop()
	select {
	case <-handled:
	case <-h.bctx.Done(): // NATS is gone: the handlers were cancelled
	case <-t.C:
		h.log.Warn("shutdown grace over; cancelling running handlers", "running", h.running())
		cancelHandlers()
	}
	t.Reset(time.Until(by))
	select {
	case <-handled:
	case <-t.C:
	}
}

// waitUntil waits for wg until the time by and reports whether it is done.
func waitUntil(wg *sync.WaitGroup, by time.Time) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// drainConsumption stops a partition's consumption and waits until the requests pulled already
// have arrived, or until the stop gives up on the bus: a drain waits for NATS to confirm it.
func (h *Host) drainConsumption(cc jetstream.ConsumeContext) {
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-h.bctx.Done():
	}
}

// untilAbandoned calls fn and waits for it until the stop gives up on the bus: an fn that waits
// for NATS then finishes in the background.
func (h *Host) untilAbandoned(fn func()) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-h.bctx.Done():
	}
}

// running counts the requests being handled.
func (h *Host) running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, d := range h.held {
		if d.running {
			n++
		}
	}
	return n
}

// Ready is closed once Run consumes the inbox and has announced the host as alive.
func (h *Host) Ready() <-chan struct{} { return h.ready }

// Readiness reports whether the host does its share of the work now, for a readiness probe:
// nil once it runs, consumes every partition it owns and keeps its heartbeat fresh; otherwise
// an error saying what it waits for (starting, stopping, a partition whose consumer is being
// created again, a heartbeat the hosts' bucket did not take). A host that is not ready keeps
// working as far as it can: the probe only tells an orchestrator not to count on it.
func (h *Host) Readiness() error {
	select {
	case <-h.ready:
	default:
		return errors.New("starting")
	}
	select {
	case <-h.stopping:
		return errors.New("stopping")
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if age := time.Since(h.beaten); age > registry.DeadAfter {
		return fmt.Errorf("heartbeat not written for %s", age.Round(time.Second))
	}
	for key, part := range h.parts {
		if !part.releasing && !part.consuming {
			return fmt.Errorf("partition %d of %s not consumed", key.n, key.agent)
		}
	}
	return nil
}

// Partitions returns the partitions the host pulls now, by agent.
func (h *Host) Partitions() map[string][]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ownedLocked()
}

func (h *Host) owned() map[string][]int { return h.Partitions() }

func (h *Host) agentNames() []string { return h.names }

// features are what this host's heartbeat says it understands (registry.Host.Features).
var features = []string{registry.FeatureReplyTo, registry.FeatureFinishing, registry.FeatureInspect}

// beat writes the host's heartbeat: its agents, the partitions it holds (pulls, hands over or
// finishes requests of), its features and its requests in flight; a heartbeat written renews the host's lease.
func (h *Host) beat(ctx context.Context) error {
	h.leaseMu.Lock()
	defer h.leaseMu.Unlock()
	sent := time.Since(h.epoch)
	h.mu.Lock()
	hb := registry.Host{ID: h.cfg.ID, Agents: h.agentNames(), StartedAt: h.started, Partitions: h.heldPartitionsLocked(),
		Features: features, Leaving: h.leaving, InFlight: len(h.held)}
	h.mu.Unlock()
	if err := h.beater.Beat(ctx, h.res.Hosts, hb); err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			// No stream stores heartbeats: a NATS restart lost the bucket (memory storage).
			if created, cerr := bus.EnsureHosts(ctx, h.js, h.res.Config); cerr != nil {
				err = errors.Join(err, cerr)
			} else if created {
				h.log.Info("hosts bucket created again: NATS had lost it")
			}
		}
		return err
	}
	if err := h.renewLease(ctx, sent); err != nil {
		return err
	}
	h.mu.Lock()
	h.beaten = time.Now()
	h.mu.Unlock()
	return nil
}

// reply sends rep to the waiting caller (if any) and keeps it in the result cache when the
// request is idempotent. Content too large for one message goes by claim check. Failures are
// logged: the caller then times out, and the handler's effects stand.
func (h *Host) reply(ctx context.Context, log *slog.Logger, req *agentbusv1.Request, replyTo string, rep *agentbusv1.Reply) {
	if replyTo == "" && (!req.GetKeepResult() || rep.GetPartial()) {
		return
	}
	if err := h.mayAct(ctx); err != nil {
		log.Warn("reply not sent", "err", err)
		return
	}
	rep.RequestId, rep.Fingerprint = req.GetRequestId(), req.GetFingerprint()
	if !h.claims.Fits(len(rep.Content)) {
		ref, err := h.claims.Put(ctx, subject.ClaimName(req.GetTenantId(), req.GetRequestId(), "reply"), rep.Content)
		if err != nil {
			log.Error("storing large reply", "err", err)
			rep = &agentbusv1.Reply{RequestId: req.GetRequestId(), StatusCode: int32(problem.ReplyTooLarge.Status), Error: problem.ReplyTooLarge.Slug,
				Content: []byte("the reply was too large to deliver"), RunId: rep.GetRunId(), Fingerprint: req.GetFingerprint()}
		} else {
			rep.Content, rep.ContentRef = nil, ref
		}
	}
	data, err := proto.Marshal(rep)
	if err != nil {
		log.Error("encoding reply", "err", err)
		return
	}
	if req.GetKeepResult() && !rep.GetPartial() {
		// A retry with the same requestId is answered from this cache (the inbox drops it as a
		// duplicate), so it must be written: keep trying while the bus recovers.
		key := subject.ResultKey(req.GetTenantId(), req.GetRequestId())
		if err := retry(ctx, log, "caching the result", func() error {
			actx, cancel := bus.Attempt(ctx)
			defer cancel()
			_, err := h.res.Results.Put(actx, key, data)
			return err
		}); err != nil {
			log.Error("caching result", "err", err)
		}
	}
	if replyTo != "" {
		if err := h.cfg.Conn.Publish(replyTo, data); err != nil {
			log.Error("publishing reply", "err", err)
		}
	}
}

// answerFromCache sends the kept result of an already handled request, if there is one. It
// reports whether it answered, or an error when the cache could not be read: the request must
// then wait, since running it again might repeat it. A replayed dead letter (replay) is not
// answered by the answer kept when it was dead-lettered: the replay is what it waited for.
func (h *Host) answerFromCache(ctx context.Context, log *slog.Logger, req *agentbusv1.Request, replyTo string, replay bool) (bool, error) {
	actx, cancel := bus.Attempt(ctx)
	e, err := h.res.Results.Get(actx, subject.ResultKey(req.GetTenantId(), req.GetRequestId()))
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil // not handled yet
	}
	if err != nil {
		return false, fmt.Errorf("reading the result cache: %w", err)
	}
	rep := new(agentbusv1.Reply)
	if err := proto.Unmarshal(e.Value(), rep); err != nil || rep.GetFingerprint() != req.GetFingerprint() ||
		(replay && rep.GetError() == problem.DeadLettered.Slug) {
		return false, nil
	}
	log.Debug("request answered from the result cache")
	h.metrics.handler(req).count(outcomeCached)
	if replyTo != "" {
		if err := h.cfg.Conn.Publish(replyTo, e.Value()); err != nil {
			log.Warn("publishing cached reply", "err", err)
		}
	}
	return true, nil
}

// webhookReply is the bus reply carrying a webhook handler's response.
func webhookReply(resp Response, runID string) *agentbusv1.Reply {
	return &agentbusv1.Reply{StatusCode: int32(resp.StatusCode), Content: resp.Content, ContentType: resp.ContentType,
		RunId: runID, Error: resp.platformError}
}

// callWebhook runs the handler, turning a panic into a retryable failure and a Fail into the
// answer of its cause.
func callWebhook(ctx context.Context, log *slog.Logger, hd WebhookHandler, r *WebhookRequest) (resp Response) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("webhook handler panicked", "method", r.Method, "panic", p, "stack", string(debug.Stack()))
			resp = Retry(fmt.Errorf("panic: %v", p))
		}
	}()
	resp = hd.ServeWebhook(context.WithValue(ctx, webhookKey{}, r), r)
	if resp.retry != nil {
		return resp
	}
	return resp.answer(log, r.Method)
}

// deadLetter keeps the request as a dead letter with its last error, retrying while the bus
// recovers. The caller's answer is the dead letter's (deadLetterResponse): sent, and kept in
// the thread, by the attempt's caller after failed attempts, and by deadLetterUnrun for a
// request that never ran.
func (h *Host) deadLetter(ctx context.Context, log *slog.Logger, in *inbound, cause string) error {
	if err := h.mayAct(ctx); err != nil {
		return err
	}
	var id uint64
	if err := retry(ctx, log, "storing a dead letter", func() (err error) {
		id, err = h.dead.Add(ctx, in.req, in.data, in.seq, in.tries.n, cause)
		return err
	}); err != nil {
		return err
	}
	in.deadLettered, in.deadID = true, id
	trace.SpanFromContext(ctx).SetStatus(codes.Error, "dead-lettered: "+cause)
	h.metrics.deadLettered(in.agent, in.req)
	h.metrics.handler(in.req).count(outcomeDeadLettered)
	log.Error("request kept as a dead letter", "deadLetter", id, "attempts", in.tries.n, "err", cause)
	return nil
}

// platformError is a reply the platform makes on a handler's behalf; ingress turns it into a
// problem+json answer.
func platformError(t problem.Type, detail string) Response {
	return Response{StatusCode: t.Status, Content: []byte(detail), ContentType: "text/plain; charset=utf-8", platformError: t.Slug}
}

// retry calls fn until it succeeds or ctx ends, backing off between attempts: a NATS hiccup
// (leader election, reconnect) must not fail a request that was accepted.
// The waits are busPolicy's.
func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	tries := busPolicy.Start()
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || errors.Is(err, errFenced) {
			return err
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn(what, "attempt", attempt, "err", err)
		}
		if werr := tries.Wait(ctx); werr != nil {
			return fmt.Errorf("%s: %w", what, errors.Join(err, werr))
		}
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (a *Agent) hasWorkflowType(t string) bool {
	for _, w := range a.workflowTypes {
		if w == t {
			return true
		}
	}
	return false
}
