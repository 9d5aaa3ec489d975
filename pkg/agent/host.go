package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// HostConfig configures a Host. Zero values mean the documented defaults.
type HostConfig struct {
	// Conn is the NATS connection. Required. The Host does not close it.
	Conn *nats.Conn
	// Agents the host runs. Required; names must be unique.
	Agents []*Agent
	// ID names the host in heartbeats and logs. Default: the hostname and a random suffix.
	ID string
	// Bus sizes the streams and buckets, which the host creates if they are missing.
	Bus bus.Config
	// ContinueAsNewEvents is the run length after which an instance rolls over to a new run id,
	// carrying its state. Default 1000; negative disables it.
	ContinueAsNewEvents int
	// MaxConcurrent caps handlers running at once. Default 1024.
	MaxConcurrent int
	// AckWait is how long the bus waits for a host before redelivering a request elsewhere;
	// long handlers extend it while they run. Default 30s.
	AckWait time.Duration
	// ShutdownGrace is how long Run waits for running handlers after its context ends before
	// cancelling theirs. Default 30s.
	ShutdownGrace time.Duration
	// Logger receives the host's logs; nil discards them.
	Logger *slog.Logger
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
	return c.Bus.Validate()
}

func (c HostConfig) withDefaults() HostConfig {
	if c.ID == "" {
		name, _ := os.Hostname()
		c.ID = name + "-" + uuid.NewString()[:8]
	}
	if c.ContinueAsNewEvents == 0 {
		c.ContinueAsNewEvents = 1000
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 1024
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Host runs agents: it consumes the inbox, keeps instances and calls handlers.
type Host struct {
	cfg    HostConfig
	log    *slog.Logger
	agents map[string]*Agent

	live    *liveSet
	history *history.Store
	files   jetstream.ObjectStore
	claims  *bus.Blobs
	results jetstream.KeyValue
	sem     chan struct{}

	ready chan struct{}

	mu     sync.Mutex
	queues map[string][]jetstream.Msg // per conversation, while it has work
	wg     sync.WaitGroup
}

const (
	// priorityGroup is the pinned-client group every host pulls partitions with.
	priorityGroup = "hosts"
	// pullExpiry keeps pull requests short so that a live host renews its pin well within
	// pinnedTTL even when idle.
	pullExpiry = 5 * time.Second
	// pinnedTTL is how long a crashed host keeps its partitions before another host may pull.
	pinnedTTL = 15 * time.Second
)

// NewHost checks cfg and returns a Host; Run starts it.
func NewHost(cfg HostConfig) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &Host{cfg: cfg, log: cfg.Logger.With("host", cfg.ID), agents: make(map[string]*Agent),
		queues: make(map[string][]jetstream.Msg), sem: make(chan struct{}, cfg.MaxConcurrent), ready: make(chan struct{})}
	for _, a := range cfg.Agents {
		h.agents[a.name] = a
	}
	return h, nil
}

// Run creates the bus resources it needs, registers the agents, and handles requests until ctx
// ends; then it stops pulling, lets running handlers finish (up to ShutdownGrace), hands its
// partitions back and returns. It returns an error only if it could not start.
func (h *Host) Run(ctx context.Context) error {
	js, err := jetstream.New(h.cfg.Conn)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	res, err := bus.Ensure(ctx, js, h.cfg.Bus)
	if err != nil {
		return err
	}
	h.live = newLiveSet(instance.NewStore(res.Instances), h.log)
	h.claims = bus.NewBlobs(res.Claims, h.cfg.Conn.MaxPayload())
	h.history = history.NewStore(res.Messages, res.Topics, js)
	h.files = res.Files
	h.results = res.Results

	regs := make([]registry.Agent, 0, len(h.agents))
	names := make([]string, 0, len(h.agents))
	for _, a := range h.cfg.Agents {
		regs = append(regs, a.registration())
		names = append(names, a.name)
	}
	if err := registry.Register(ctx, res.Registry, regs); err != nil {
		return err
	}

	// Handlers outlive ctx by the shutdown grace period, so that in-flight work finishes.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	// One puller per partition of each agent; pullCtx stops them.
	pullCtx, stopPulling := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPulling()
	var (
		pullers  []*puller
		pullWG   sync.WaitGroup
		startErr error
	)
	for _, a := range h.cfg.Agents {
		for p := range res.Config.PartitionCount() {
			pullers = append(pullers, &puller{h: h, js: js, agent: a.name, p: p, name: subject.PartitionConsumer(a.name, p)})
		}
	}
	started := make(chan error, len(pullers))
	for _, pl := range pullers {
		pullWG.Go(func() { pl.run(pullCtx, hctx, started) })
	}
	for range pullers {
		startErr = errors.Join(startErr, <-started)
	}
	stopConsumers := func() {
		stopPulling()
		pullWG.Wait()
	}
	if startErr != nil {
		stopConsumers()
		return startErr
	}

	sweepCtx, stopSweep := context.WithCancel(hctx)
	sweepDone := make(chan struct{})
	go func() { h.live.run(sweepCtx); close(sweepDone) }()
	defer func() { stopSweep(); <-sweepDone }()

	beat := registry.Host{ID: h.cfg.ID, Agents: names, StartedAt: time.Now().UTC()}
	if err := registry.Beat(ctx, res.Hosts, beat); err != nil {
		stopConsumers()
		return err
	}
	h.log.Info("workflow host running", "agents", names, "partitions", res.Config.PartitionCount())
	close(h.ready)

	ticker := time.NewTicker(registry.HeartbeatInterval)
	defer ticker.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
			if err := registry.Beat(ctx, res.Hosts, beat); err != nil && ctx.Err() == nil {
				h.log.Warn("heartbeat", "err", err)
			}
		}
	}

	// Shut down: leave first so ingress stops sending here, then drain what was pulled.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := registry.Leave(lctx, res.Hosts, h.cfg.ID); err != nil {
		h.log.Warn("leaving", "err", err)
	}
	stopConsumers()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(h.cfg.ShutdownGrace):
		h.log.Warn("shutdown grace over; cancelling running handlers")
		cancelHandlers()
		<-done
	}
	// Write what is only counted in memory, then hand the partitions over at once instead of
	// after the pin expires.
	stopSweep()
	<-sweepDone
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer ucancel()
	h.live.sweep(uctx, true)
	for _, pl := range pullers {
		if err := res.Inbox.UnpinConsumer(uctx, pl.name, priorityGroup); err != nil {
			h.log.Debug("unpinning", "consumer", pl.name, "err", err)
		}
	}
	h.log.Info("workflow host stopped")
	return nil
}

// Ready is closed once Run consumes the inbox and has announced the host as alive.
func (h *Host) Ready() <-chan struct{} { return h.ready }

// dispatch queues m behind earlier requests of its conversation; a conversation with work has
// one goroutine, an idle one has none.
func (h *Host) dispatch(ctx context.Context, m jetstream.Msg) {
	key := m.Subject() // one stored inbox subject per (tenant, workflow, participant)
	h.mu.Lock()
	q, busy := h.queues[key]
	h.queues[key] = append(q, m)
	if !busy {
		h.wg.Add(1)
	}
	h.mu.Unlock()
	if !busy {
		go h.drain(ctx, key)
	}
}

func (h *Host) drain(ctx context.Context, key string) {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		q := h.queues[key]
		if len(q) == 0 {
			delete(h.queues, key)
			h.mu.Unlock()
			return
		}
		m := q[0]
		q[0] = nil
		h.queues[key] = q[1:]
		h.mu.Unlock()

		h.sem <- struct{}{}
		ok := h.process(ctx, m)
		<-h.sem
		if !ok {
			// Later requests of this conversation must not overtake m: leave them unacknowledged
			// so the bus redelivers them after m, in order.
			h.mu.Lock()
			delete(h.queues, key)
			h.mu.Unlock()
			return
		}
	}
}

// process handles one request and acknowledges it. It returns false if it gave up (shutdown)
// without acknowledging.
func (h *Host) process(ctx context.Context, m jetstream.Msg) bool {
	stop := keepAlive(m, h.cfg.AckWait)
	defer stop()

	req := new(agentbusv1.Request)
	if err := proto.Unmarshal(m.Data(), req); err != nil {
		h.log.Error("dropping undecodable request", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return true
	}
	replyTo := m.Headers().Get(subject.HeaderReplyTo)
	log := h.log.With("requestId", req.GetRequestId(), "workflowId", req.GetWorkflowId())
	claim := req.GetEnvelopeRef()
	if claim != nil {
		full := new(agentbusv1.Request)
		if err := retry(ctx, log, "reading the claimed request", func() error {
			data, err := h.claims.Get(ctx, claim)
			if err != nil {
				return err
			}
			return proto.Unmarshal(data, full)
		}); err != nil {
			return false
		}
		req = full
	}

	// A redelivered request may have been handled already (its acknowledgement lost when a
	// NATS node failed): when its result was kept, answer with it instead of running it again.
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 && req.GetKeepResult() {
		if h.answerFromCache(ctx, log, req, replyTo) {
			if err := m.Ack(); err != nil {
				log.Warn("acknowledging request", "err", err)
			}
			return true
		}
	}

	if err := h.handle(ctx, log, req, replyTo); err != nil {
		log.Warn("request not handled; leaving it for redelivery", "err", err)
		return false
	}
	if err := m.Ack(); err != nil {
		log.Warn("acknowledging request", "err", err)
	}
	if claim != nil {
		if err := h.claims.Delete(ctx, claim); err != nil {
			log.Warn("deleting request claim", "err", err)
		}
	}
	return true
}

// startOrLoad returns the running instance of the request's workflow, starting a new run when
// there is none or the last one completed (update-with-start). When several hosts race to
// start, compare-and-set lets exactly one win; the others load its run.
func (h *Host) startOrLoad(ctx context.Context, log *slog.Logger, a *Agent, l *liveInstance) (*Instance, error) {
	l.mu.Lock()
	started := false
	for {
		if !l.loaded {
			if err := l.reloadLocked(ctx); err != nil {
				l.mu.Unlock()
				return nil, err
			}
		}
		if l.found && l.rec.Status == instance.Running {
			break
		}
		now := time.Now().UTC()
		fresh := instance.Record{
			Tenant: l.key.tenant, WorkflowID: l.key.workflowID, RunID: uuid.NewString(),
			Status: instance.Running, StartedAt: now, LastActiveAt: now, Revision: l.rec.Revision,
		}
		err := l.writeLocked(ctx, fresh)
		if err == nil {
			started = true
			log.Debug("started run", "runId", fresh.RunID)
			break
		}
		if !errors.Is(err, instance.ErrConflict) {
			l.mu.Unlock()
			return nil, err
		}
		l.loaded = false // someone else started it: read theirs
	}
	l.mu.Unlock()
	inst := &Instance{live: l}
	if started && a.onStart != nil {
		if err := a.onStart(ctx, inst); err != nil {
			log.Error("start hook failed", "err", err)
		}
	}
	return inst, nil
}

// finishRun counts the event, completes the run if asked, and rolls over long runs
// (continue-as-new). Counting alone is not written at once: it goes with the next write of the
// record or when the host drops the idle instance.
func (h *Host) finishRun(ctx context.Context, log *slog.Logger, inst *Instance, runID string) error {
	l := inst.live
	complete := inst.completing()
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.rec.RunID != runID || l.rec.Status != instance.Running {
			return nil // the run ended meanwhile (another participant completed it)
		}
		now := time.Now().UTC()
		rec := l.rec
		rec.Events++
		rec.LastActiveAt = now
		switch {
		case complete:
			rec.Status = instance.Completed
			rec.CompletedAt = &now
		case h.cfg.ContinueAsNewEvents > 0 && rec.Events >= int64(h.cfg.ContinueAsNewEvents):
			log.Info("continue-as-new", "oldRunId", rec.RunID, "events", rec.Events)
			rec.RunID = uuid.NewString()
			rec.Events = 0
			rec.StartedAt = now
		default:
			l.rec, l.dirty = rec, true
			return nil
		}
		err := l.writeLocked(ctx, rec)
		if err == nil {
			return nil
		}
		if !errors.Is(err, instance.ErrConflict) {
			return err
		}
		if err := l.reloadLocked(ctx); err != nil {
			return err
		}
	}
}

// reply sends rep to the waiting caller (if any) and keeps it in the result cache when the
// request is idempotent. Content too large for one message goes by claim check. Failures are
// logged: the caller then times out, and the handler's effects stand.
func (h *Host) reply(ctx context.Context, log *slog.Logger, req *agentbusv1.Request, replyTo string, rep *agentbusv1.Reply) {
	if replyTo == "" && (!req.GetKeepResult() || rep.GetPartial()) {
		return
	}
	rep.RequestId, rep.Fingerprint = req.GetRequestId(), req.GetFingerprint()
	if !h.claims.Fits(len(rep.Content)) {
		ref, err := h.claims.Put(ctx, subject.ClaimName(req.GetTenantId(), req.GetRequestId(), "reply"), rep.Content)
		if err != nil {
			log.Error("storing large reply", "err", err)
			rep = &agentbusv1.Reply{RequestId: req.GetRequestId(), StatusCode: http.StatusBadGateway, Error: "reply-too-large",
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
			_, err := h.results.Put(ctx, key, data)
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

// answerFromCache sends the kept result of an already handled request, if there is one.
func (h *Host) answerFromCache(ctx context.Context, log *slog.Logger, req *agentbusv1.Request, replyTo string) bool {
	e, err := h.results.Get(ctx, subject.ResultKey(req.GetTenantId(), req.GetRequestId()))
	if err != nil {
		return false // not handled yet (or the cache cannot be read): handle it
	}
	rep := new(agentbusv1.Reply)
	if err := proto.Unmarshal(e.Value(), rep); err != nil || rep.GetFingerprint() != req.GetFingerprint() {
		return false
	}
	log.Debug("redelivered request answered from the result cache")
	if replyTo != "" {
		if err := h.cfg.Conn.Publish(replyTo, e.Value()); err != nil {
			log.Warn("publishing cached reply", "err", err)
		}
	}
	return true
}

// webhookReply is the bus reply carrying a webhook handler's response.
func webhookReply(resp Response, runID string) *agentbusv1.Reply {
	return &agentbusv1.Reply{StatusCode: int32(resp.StatusCode), Content: resp.Content, ContentType: resp.ContentType,
		RunId: runID, Error: resp.platformError}
}

// callWebhook runs the handler, turning a panic into a 500 that names no internals.
func callWebhook(ctx context.Context, log *slog.Logger, hd WebhookHandler, r *WebhookRequest) (resp Response) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("webhook handler panicked", "method", r.Method, "panic", p, "stack", string(debug.Stack()))
			resp = platformError(http.StatusInternalServerError, "handler-error", "the handler failed")
		}
	}()
	return hd.ServeWebhook(ctx, r).normalized()
}

// platformError is a reply the platform makes on a handler's behalf; ingress turns it into a
// problem+json answer.
func platformError(status int, slug, detail string) Response {
	return Response{StatusCode: status, Content: []byte(detail), ContentType: "text/plain; charset=utf-8", platformError: slug}
}

// keepAlive tells the bus the request is still being worked on, so a long handler is not
// redelivered to another host. The returned func stops it.
func keepAlive(m jetstream.Msg, ackWait time.Duration) func() {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	t = time.AfterFunc(ackWait/3, func() {
		_ = m.InProgress()
		mu.Lock()
		if !stopped {
			t.Reset(ackWait / 3)
		}
		mu.Unlock()
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// retry calls fn until it succeeds or ctx ends, backing off between attempts: a NATS hiccup
// (leader election, reconnect) must not fail a request that was accepted.
func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn(what, "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
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
