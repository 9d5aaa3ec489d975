package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/placement"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
)

// How partitions change hands (docs/architecture.md, "Hosts and partitions").
//
// Every host computes the same division of each agent's partitions among the agent's live hosts
// (package placement) and pulls only the partitions it owns. A partition's consumer uses a
// pinned-client priority group, so the server delivers to one host at a time, and marks every
// message with the id of the pin it was delivered under.
//
// A host that loses a partition stops pulling it, gives the requests it has not started back to
// the bus, and unpins the consumer; its running handlers go on and acknowledge when done. The host
// that gains it sees a new pin id on the first request it gets, and before it runs anything of the
// partition it reads which earlier requests are still unacknowledged in the inbox: they are held
// by the previous owner (running, or about to be redelivered after a crash). A conversation with
// such a request waits until it is acknowledged (it vanishes from the inbox) or redelivered here,
// so the requests of one conversation are never handled by two hosts at once, nor out of order.

// partKey names one partition of one agent.
type partKey struct {
	agent string
	n     int
}

// partition is a partition the host pulls, or is handing over.
type partition struct {
	key     partKey
	inbox   *agentInbox
	durable string
	filter  string
	stop    context.CancelFunc
	// started receives the outcome of the first attempt to consume.
	started chan error
	// disrupted is signalled when the partition's deliveries may have been cut short: the
	// connection reconnected, or the consumption missed its heartbeats or saw its consumer's
	// leader change (watchConsumption then looks for lost deliveries: findLost).
	disrupted chan struct{}
	// tenureMu keeps one takeOver of the partition at a time.
	tenureMu sync.Mutex
	// pulled is closed when pull has returned: nothing more arrives from the partition.
	pulled chan struct{}

	// Guarded by Host.mu.
	releasing bool
	// late are the requests delivered while the partition is handed over, before its pulling
	// stopped: handOver gives them back with the ones not started. Given back at once, each
	// would come straight back to this host's consumption, which still holds the pin, spending
	// a delivery each time until it counts as failed.
	late []lateDelivery
	// givenBack is set once handOver has given the requests back: one arriving later goes back
	// at once.
	givenBack bool
	cons      jetstream.Consumer
	// pin is the pin id the requests held from this partition were delivered under; a request
	// with another one starts a new tenure (see snapshot).
	pin string
	// others are, by conversation (stored subject), the sequences of requests unacknowledged in
	// the inbox when this tenure began (or a delivery was lost) and not held here, ascending: each
	// one holds back the conversation's later requests until it is acknowledged elsewhere or
	// redelivered here.
	others map[string][]uint64
	// delivered is the consumer's delivery sequence of the latest delivery that arrived, and
	// lost is set when one arrived beyond the next: a delivery between never arrived (it was in
	// flight on a connection whose server died, or to a pull that was stopped). See arrive.
	delivered uint64
	lost      bool
	// unpinChecked is false while a stale pin of a dead host may stand in the way.
	unpinChecked bool
	// acked are the requests of the partition the host acknowledged last, a ring whose next slot
	// is ackedNext % ackedKept, with the subjects their acknowledgements went to. An
	// acknowledgement in flight to a consumer leader that dies is lost: its request stays in the
	// inbox until its ack wait ends, and the tenure that begins under the new leader finds it
	// held elsewhere, holding its conversation back that long. takeOver acknowledges such a
	// request again instead.
	acked     [ackedKept]ackedRequest
	ackedNext int
	// consuming is true while the partition's consumer is pulled, or dozes (Host.Readiness).
	consuming bool
	// arrivals counts the deliveries from the partition, and holding the requests of it the host
	// holds (queued or running): an idle partition dozes (doze.go).
	arrivals uint64
	holding  int
	dozing   bool
	// crowded is set when holding reaches crowdedAt, which asks for a load report at once
	// (queueLocked), and cleared below three quarters of that (dropLocked): one early report
	// each time the partition becomes crowded.
	crowded bool

	// fenced is set once another host took the partition over while this host's lease had
	// lapsed (lease.go): nothing of it may act any more.
	fenced atomic.Bool
	// tenure is the partition's takeover count (lease.go) as this host knew it when it gained
	// the partition, or took it over itself. Guarded by Host.mu.
	tenure uint64
}

// lateDelivery is a request delivered while its partition is handed over.
type lateDelivery struct {
	seq uint64
	msg jetstream.Msg
}

// ackedRequest is a request the host acknowledged: its inbox sequence and the subject its
// acknowledgement went to.
type ackedRequest struct {
	seq   uint64
	reply string
}

// ackedKept is how many of a partition's latest acknowledgements the host remembers. The ones
// lost with a dying leader are among the last sent before the partition's deliveries stopped.
const ackedKept = 32

// noteAckedLocked remembers that the host acknowledged the request at seq through reply.
func (part *partition) noteAckedLocked(seq uint64, reply string) {
	part.acked[part.ackedNext%ackedKept] = ackedRequest{seq, reply}
	part.ackedNext++
}

// ackedReplyLocked returns the subject the host acknowledged the request at seq through, if it
// is among the ones it remembers.
func (part *partition) ackedReplyLocked(seq uint64) (string, bool) {
	for _, a := range part.acked {
		if a.seq == seq && a.reply != "" {
			return a.reply, true
		}
	}
	return "", false
}

// AckedWindow remembers which of the newest ackedWindow inbox sequences the hosts of a process
// acknowledged (HostConfig.Acked): a slot per sequence modulo the window (offset by the agent's
// inbox salt) holds the stored time of the request that last used it, which tells it apart from
// another with the same slot, or from one in an inbox deleted and made again. An acknowledgement
// is sent once and not confirmed: one lost on its way (to a consumer leader that died) leaves the
// request in the inbox, and the bus delivers it again once the ack wait has run out, after the
// conversation's later requests ran. A host that finds such a copy here acknowledges it and drops
// it instead of running the request again, for as long as its sequence is in the window: about
// 16 s of a process acknowledging 16,000 requests a second. (The 32 last acknowledgements of a
// partition, acked, also keep the subjects they went to, which a new tenure needs.) The window
// takes 2 MiB once a request is acknowledged: one for a process, not one for each of its hosts
// (a workflow host process runs one for each remote agent). It is safe for concurrent use.
type AckedWindow struct {
	slots atomic.Pointer[[ackedWindow]atomic.Int64]
}

// ackedWindow is how many inbox sequences an AckedWindow covers: 2 MiB of slots.
const ackedWindow = 1 << 18

// NewAckedWindow returns a window for the hosts of a process to share; it takes its memory
// when the first request is acknowledged.
func NewAckedWindow() *AckedWindow { return new(AckedWindow) }

// add remembers the request at seq, stored at stored (Unix nanoseconds), as acknowledged.
func (a *AckedWindow) add(seq uint64, stored int64) {
	s := a.slots.Load()
	if s == nil {
		a.slots.CompareAndSwap(nil, new([ackedWindow]atomic.Int64))
		s = a.slots.Load()
	}
	s[seq%ackedWindow].Store(stored)
}

// has reports whether the request at seq, stored at stored, was acknowledged.
func (a *AckedWindow) has(seq uint64, stored int64) bool {
	s := a.slots.Load()
	return s != nil && stored != 0 && s[seq%ackedWindow].Load() == stored
}

// consumerConfig is the configuration of a partition's durable consumer.
func (h *Host) consumerConfig(part *partition) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       part.durable,
		FilterSubject: part.filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       h.cfg.AckWait,
		MaxDeliver:    -1, // an accepted request is never dropped: the host dead-letters it
		MaxAckPending: maxHeldPerPartition,
		// The server delivers a partition to one host at a time.
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{priorityGroup},
		PinnedTTL:      pinnedTTL,
		// The consumers of an agent no host runs any more go (HostConfig.ConsumerInactiveThreshold).
		InactiveThreshold: h.cfg.ConsumerInactiveThreshold,
		// The inbox is a work queue: acknowledged requests leave the stream, so a consumer that
		// loses its state in a full restart only re-reads what is still unacknowledged. Keeping
		// the state in memory spares a file write per partition ten times a second.
		MemoryStorage: true,
	}
}

const (
	// maxHeldPerPartition is the most requests of a partition a host holds at once, waiting or
	// running (its consumer's MaxAckPending); the partition's others wait in the inbox, in
	// arrival order. From crowdedAt held, the partition is crowded: the tenants holding at least
	// their share of crowdedAt are refused new calls of the agent until they do not (load.go), so
	// that one tenant's backlog leaves the others room.
	maxHeldPerPartition = 4096
	crowdedAt           = maxHeldPerPartition / 2
	// priorityGroup is the pinned-client group every host pulls partitions with.
	priorityGroup = "hosts"
	// pullExpiry keeps pull requests short so that a live host renews its pin well within
	// pinnedTTL even when idle.
	pullExpiry = 5 * time.Second
	// pinnedTTL is how long the pin of a host that stopped pulling stands. A host that gains the
	// partition of a dead host unpins it at once; this is the fallback.
	pinnedTTL = 15 * time.Second
	// resolveEvery is how often a blocked conversation looks whether the earlier requests it
	// waits for have been acknowledged elsewhere.
	resolveEvery = 100 * time.Millisecond
)

// division is how an agent's partitions were divided last, and among which hosts.
type division struct {
	ids    []string // this host's id, then the live hosts' ids in order
	owners []string
}

// placeLocked returns the owner of each of the agent's partitions among this host and the live
// hosts, computing it anew only when the hosts changed since the last call.
func (h *Host) placeLocked(agent string, live []registry.Host) []string {
	last := h.placed[agent]
	same := last != nil && len(last.ids) == len(live)+1
	for i := 0; same && i < len(live); i++ {
		same = last.ids[i+1] == live[i].ID
	}
	if same {
		return last.owners
	}
	ids := make([]string, 0, len(live)+1)
	ids = append(ids, h.cfg.ID)
	for _, hb := range live {
		ids = append(ids, hb.ID)
	}
	owners := placement.Assign(agent, h.inboxes[agent].partitions, ids)
	h.placed[agent] = &division{ids: ids, owners: owners}
	return owners
}

// rebalance divides the partitions of each agent among its live hosts and starts or hands over
// partitions to match, then announces what the host pulls.
func (h *Host) rebalance(ctx context.Context) error {
	changed := false
	h.mu.Lock()
	select {
	case <-h.stopping:
		h.mu.Unlock()
		return nil
	default:
	}
	liveOf := h.dir.LiveHostsOf(h.agentNames())
	for _, a := range h.cfg.Agents {
		live := liveOf[a.name]
		owners := h.placeLocked(a.name, live)
		for p, owner := range owners {
			key := partKey{a.name, p}
			part := h.parts[key]
			switch {
			case owner == h.cfg.ID && part == nil:
				h.gainLocked(key)
				changed = true
			case owner != h.cfg.ID && part != nil && !part.releasing:
				h.releaseLocked(part)
				changed = true
			}
			// A partition the host owns but a dead host (or one that let it go) may still be
			// pinned to: look once nobody else claims it.
			if part != nil && !part.releasing {
				_, claimed := h.claimant(live, key)
				switch {
				case claimed:
					part.unpinChecked = false
				case !part.unpinChecked && part.cons != nil && time.Since(h.started) >= registry.DeadAfter:
					// Not before this host has watched the heartbeats for DeadAfter: a host that
					// started at the same moment may hold the pin before its first heartbeat
					// lists the partition, and counting a takeover from it would fence it later
					// for nothing.
					part.unpinChecked = true
					h.bg.Go(func() { h.unpinStale(ctx, part) })
				}
			}
		}
	}
	h.mu.Unlock()
	if changed {
		return h.beat(ctx)
	}
	return nil
}

// waitStarted waits until every partition pulled now has begun its consumption or failed to
// (pullOn), and returns the errors of those that failed. It writes the host's heartbeat
// meanwhile, as Run does once started: a start that waits for its cluster keeps its lease.
func (h *Host) waitStarted(ctx context.Context) error {
	h.mu.Lock()
	var parts []*partition
	for _, part := range h.parts {
		parts = append(parts, part)
	}
	h.mu.Unlock()
	beat := time.NewTicker(registry.HeartbeatInterval)
	defer beat.Stop()
	var errs []error
	for _, part := range parts {
		for waiting := true; waiting; {
			select {
			case err := <-part.started:
				errs = append(errs, err)
				waiting = false
			case <-beat.C:
				if err := h.beat(ctx); err != nil && ctx.Err() == nil {
					h.log.Warn("heartbeat", "err", err)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return errors.Join(errs...)
}

// gainLocked starts pulling a partition the host now owns.
func (h *Host) gainLocked(key partKey) {
	pctx, stop := context.WithCancel(h.hctx)
	part := &partition{key: key, inbox: h.inboxes[key.agent], durable: subject.PartitionConsumer(key.agent, key.n), filter: subject.Partition(key.agent, key.n),
		stop: stop, others: make(map[string][]uint64), started: make(chan error, 1), pulled: make(chan struct{}), disrupted: make(chan struct{}, 1)}
	h.parts[key] = part
	h.metrics.partitionGained(key)
	h.bg.Go(func() { h.pull(pctx, part) })
	h.log.Debug("partition gained", "agent", key.agent, "partition", key.n)
}

// releaseLocked hands a partition over: stop pulling, give back what was not started, unpin.
// The partition stays listed (and in the heartbeat) until that is done.
func (h *Host) releaseLocked(part *partition) {
	if part.releasing {
		return
	}
	part.releasing = true
	part.stop()
	h.bg.Go(func() { h.handOver(part) })
}

// handOver finishes a release once the partition's pulling has stopped.
func (h *Host) handOver(part *partition) {
	ctx, cancel := context.WithTimeout(h.bctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	select {
	case <-part.pulled: // nothing more arrives from this partition
	case <-ctx.Done(): // what still arrives goes back at once
	}
	h.mu.Lock()
	// Requests not started go back, in order, with those delivered during the handover;
	// running ones finish here and acknowledge.
	back := part.late
	part.late, part.givenBack = nil, true
	for _, d := range h.held {
		if d.part == part && !d.running {
			back = append(back, lateDelivery{d.seq, d.msg})
			h.dropLocked(d)
		}
	}
	slices.SortFunc(back, func(a, b lateDelivery) int { return compareSeq(a.seq, b.seq) })
	part.others = nil
	cons, pin := part.cons, part.pin
	h.mu.Unlock()
	if h.leaseHeld() && !part.fenced.Load() {
		for _, d := range back {
			if err := d.msg.Nak(); err != nil {
				h.log.Debug("giving a request back", "seq", d.seq, "err", err)
			}
		}
	} else if len(back) > 0 {
		h.log.Warn("requests not given back: the host's lease lapsed; they come back after the ack wait", "agent", part.key.agent, "partition", part.key.n, "count", len(back))
	}
	// Unpin only a pin of ours: another host may already hold the partition.
	if cons != nil && pin != "" {
		if info, err := cons.Info(ctx); err == nil && pinnedID(info) == pin {
			if err := part.inbox.stream.UnpinConsumer(ctx, part.durable, priorityGroup); err != nil {
				h.log.Debug("unpinning", "consumer", part.durable, "err", err)
			}
		}
	}
	h.mu.Lock()
	if h.parts[part.key] == part {
		delete(h.parts, part.key)
		h.metrics.partitionReleased(part.key)
	}
	h.mu.Unlock()
	h.log.Debug("partition handed over", "agent", part.key.agent, "partition", part.key.n, "gaveBack", len(back), "took", time.Since(start))
	select {
	case <-h.stopping:
	default:
		if err := h.beat(ctx); err != nil {
			h.log.Debug("heartbeat after handover", "err", err)
		}
	}
}

// unpinStale unpins a partition the host owns when another client holds its pin: the pin of a
// host that died (or of an earlier life of this host), which would otherwise stand for pinnedTTL.
// Then the requests that client held come back at once (redeliverStale), not after the ack wait.
func (h *Host) unpinStale(ctx context.Context, part *partition) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lookAgain := func() { // on the next round
		h.mu.Lock()
		part.unpinChecked = false
		h.mu.Unlock()
	}
	h.mu.Lock()
	cons, pin := part.cons, part.pin
	h.mu.Unlock()
	info, err := cons.Info(ctx)
	if err != nil {
		lookAgain()
		return
	}
	id := pinnedID(info)
	if id == "" || id == pin {
		return
	}
	// The pin's holder is taken for dead, by the heartbeats the directory's watch delivered.
	if !h.holderGone(ctx, part) {
		lookAgain()
		return
	}
	// Count the takeover first, so that a holder that only paused finds its partition taken when
	// it comes back (lease.go).
	if err := h.bumpTenure(ctx, part); err != nil {
		h.log.Warn("counting a takeover; the stale pin stays for now", "consumer", part.durable, "err", err)
		lookAgain()
		return
	}
	// Still so once counted: a holder whose heartbeat was written before the count was, and
	// after the look above, may have read the count before this host wrote it and renewed its
	// lease. One written later renews it only after the holder read the count (lease.go), and
	// then it stops acting on the partition. A count left without an unpin costs nothing: the
	// holder, alive after all, keeps the pin and fences the partition at its next lapse, if any.
	if !h.holderGone(ctx, part) {
		lookAgain()
		return
	}
	h.log.Debug("unpinning a stale pin", "consumer", part.durable)
	if err := part.inbox.stream.UnpinConsumer(ctx, part.durable, priorityGroup); err != nil {
		h.log.Debug("unpinning", "consumer", part.durable, "err", err)
		return
	}
	// Read before the unpin, info covers only deliveries to the stale pin's client.
	h.redeliverStale(ctx, part, info)
}

// holderGone reports whether the partition's previous holder may be taken for dead now: the
// directory's watch has delivered every heartbeat the hosts bucket holds (a watch can lag
// seconds behind it after a NATS election, while the holder writes heartbeats and holds its
// lease), and no live heartbeat other than this host's claims the partition.
func (h *Host) holderGone(ctx context.Context, part *partition) bool {
	if current, err := h.dir.HostsCurrent(ctx); err != nil || !current {
		h.log.Debug("not taking a partition over while the heartbeats are not all read", "consumer", part.durable, "err", err)
		return false
	}
	if holder, claimed := h.claimant(h.dir.LiveHosts(part.key.agent), part.key); claimed {
		h.log.Debug("not taking a partition over: a live host claims it", "consumer", part.durable, "holder", holder)
		return false
	}
	return true
}

// claimant returns a host among live, other than this one, whose heartbeat says it owns the
// partition.
func (h *Host) claimant(live []registry.Host, key partKey) (string, bool) {
	for _, hb := range live {
		if hb.ID != h.cfg.ID && hb.Owns(key.agent, key.n) {
			return hb.ID, true
		}
	}
	return "", false
}

func pinnedID(info *jetstream.ConsumerInfo) string {
	for _, g := range info.PriorityGroups {
		if g.Group == priorityGroup {
			return g.PinnedClientID
		}
	}
	return ""
}

// pull keeps a partition consumed until ctx ends: it creates the partition's durable consumer
// and pulls from it, and when the consumption stops on its own (the consumer was deleted, the
// server restarted without it) it creates it again. An idle partition dozes between its
// requests (doze.go), with no goroutine of its own. On ctx's end it drains what was pulled.
func (h *Host) pull(ctx context.Context, part *partition) {
	if err := h.learnTenure(ctx, part); err != nil {
		if ctx.Err() != nil {
			err = nil // let go, fenced or stopped before it began: nothing failed
		}
		part.started <- err
		close(part.pulled)
		return
	}
	h.pullOn(ctx, part, false)
}

// pullOn is pull once the partition's tenure is known; woken says that it comes back from a doze,
// to pull the same consumer again. It closes part.pulled when the partition's pulling is over,
// not when it returns for a doze: the doze goes on with pullOn once woken.
//
// Unless woken, it tells waitStarted (part.started) how the partition's first consumption went:
// once it began, or failed for good. A failure JetStream may get over by itself (a cluster still
// electing its leaders: bus.Transient) is tried again first, for up to bus.StartWait, as Ensure
// does for the streams: a host started beside its NATS cluster waits for it rather than exit.
func (h *Host) pullOn(ctx context.Context, part *partition, woken bool) {
	dozing := false
	report, began := !woken, time.Now()
	defer func() {
		if report {
			part.started <- nil // let go, fenced or stopped before it began: nothing failed
		}
		if !dozing {
			close(part.pulled)
		}
	}()
	tries := consumePolicy.Start()
	for {
		var cc jetstream.ConsumeContext
		var err error
		resumed := woken // a failure to pull again counts as a consumption that stopped
		if woken {
			woken = false
			cc, err = h.startConsuming(ctx, part, part.cons)
		} else {
			cc, err = h.consume(ctx, part)
			if report && ctx.Err() == nil && (err == nil || !bus.Transient(err) || time.Since(began) >= bus.StartWait) {
				part.started <- err
				report = false
			}
			if err == nil {
				select {
				case h.kick <- struct{}{}:
				default:
				}
			}
		}
		if err == nil || resumed {
			tries.Reset()
			for stopped := false; !stopped && err == nil; {
				switch h.watchConsumption(ctx, part, cc) {
				case consumptionCancelled:
					h.drainConsumption(cc)
					return
				case consumptionIdle:
					switch h.doze(ctx, part, cc) {
					case dozeCancelled:
						return
					case dozeAsleep:
						dozing = true
						return
					case dozeAwake:
						cc, err = h.startConsuming(ctx, part, part.cons)
					}
				default:
					stopped = true
				}
			}
			if err != nil {
				h.log.Warn("consuming inbox", "agent", part.key.agent, "partition", part.key.n, "err", err)
			} else {
				h.log.Warn("inbox consumption stopped; starting it again", "agent", part.key.agent, "partition", part.key.n)
			}
			h.mu.Lock()
			part.pin = "" // a new consumer has new pins: the next request starts a new tenure
			part.consuming = false
			// The pin of the consumption that stopped may still stand on a consumer that was
			// not deleted: the next rebalance unpins it rather than wait for pinnedTTL.
			part.unpinChecked = false
			h.mu.Unlock()
		} else if ctx.Err() == nil {
			h.log.Warn("consuming inbox", "agent", part.key.agent, "partition", part.key.n, "err", err)
		}
		if tries.Wait(ctx) != nil {
			return
		}
	}
}

// consume creates the partition's consumer and begins pulling into arrive.
func (h *Host) consume(ctx context.Context, part *partition) (jetstream.ConsumeContext, error) {
	cons, err := h.js.CreateOrUpdateConsumer(ctx, part.inbox.name, h.consumerConfig(part))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// The inbox was deleted: by an operator, or by the removal of a remote agent that
		// raced with this host of its new registration (bus.Resources.DeleteInbox).
		st, ierr := h.res.InboxWith(ctx, part.key.agent, part.inbox.partitions)
		if ierr != nil {
			return nil, fmt.Errorf("making the inbox of %s again: %w", part.key.agent, ierr)
		}
		h.log.Warn("made the agent's deleted inbox again", "agent", part.key.agent)
		if n := bus.InboxPartitions(st); n != part.inbox.partitions {
			// Another process made it first, configured otherwise: this host's partitions
			// miss some of its requests until it restarts and reads the count anew.
			h.log.Error("the agent's inbox was made again with another partition count: restart the host",
				"agent", part.key.agent, "inbox_partitions", n, "pulled", part.inbox.partitions)
		}
		cons, err = h.js.CreateOrUpdateConsumer(ctx, part.inbox.name, h.consumerConfig(part))
	}
	if err != nil {
		return nil, fmt.Errorf("creating consumer of %s partition %d: %w", part.key.agent, part.key.n, err)
	}
	h.mu.Lock()
	part.cons = cons
	h.mu.Unlock()
	return h.startConsuming(ctx, part, cons)
}

// startConsuming begins pulling the partition's consumer cons into arrive. Pulling the same cons
// again (after a doze) goes on under its pin, if the pin has not run out meanwhile.
func (h *Host) startConsuming(ctx context.Context, part *partition, cons jetstream.Consumer) (jetstream.ConsumeContext, error) {
	cc, err := cons.Consume(func(m jetstream.Msg) { h.arrive(ctx, part, m) },
		jetstream.PullMaxMessages(128),
		jetstream.PullPriorityGroup(priorityGroup),
		jetstream.PullExpiry(pullExpiry),
		jetstream.ConsumeErrHandler(func(cc jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) && !errors.Is(err, jetstream.ErrPinIDMismatch) {
				h.log.Warn("consuming inbox", "agent", part.key.agent, "partition", part.key.n, "err", err)
			}
			if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerLeadershipChanged) {
				part.disrupt()
			}
			if errors.Is(err, nats.ErrNoResponders) && consumerGone(ctx, cons) {
				// The consumer was deleted while no pull request was waiting, so the server
				// never said so; the consumption would go on pulling from nothing. Stopping
				// it makes pull create the consumer again.
				cc.Drain()
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("consuming %s partition %d: %w", part.key.agent, part.key.n, err)
	}
	h.mu.Lock()
	part.consuming = true
	h.mu.Unlock()
	return cc, nil
}

// consumerGone reports whether the inbox says the consumer does not exist, or that the inbox
// itself does not (deleted with its consumers). Any other answer, or none (a cluster electing the
// consumer's leader), counts as there.
func consumerGone(ctx context.Context, cons jetstream.Consumer) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := cons.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// snapshot reads, from the inbox's leader, the requests of the partition that are delivered but
// not acknowledged: those the previous owners hold. It is called with the first request of a new
// tenure in hand, so no earlier request can be delivered anywhere else any more.
func (h *Host) snapshot(ctx context.Context, part *partition) (map[string][]uint64, error) {
	h.mu.Lock()
	cons := part.cons
	h.mu.Unlock()
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading partition state: %w", err)
	}
	others := make(map[string][]uint64)
	err = h.eachUnacked(ctx, part, info, func(seq uint64, subj string) { others[subj] = append(others[subj], seq) })
	if err != nil {
		return nil, err
	}
	return others, nil
}

// eachUnacked calls fn, in stream order, with each request of the partition that info shows
// delivered and not acknowledged and that the inbox's leader still holds.
func (h *Host) eachUnacked(ctx context.Context, part *partition, info *jetstream.ConsumerInfo, fn func(seq uint64, subj string)) error {
	for seq, last := info.AckFloor.Stream+1, info.Delivered.Stream; seq <= last; {
		m, err := bus.LeaderGet(ctx, h.cfg.Conn, part.inbox.name, seq, part.filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading unacknowledged requests: %w", err)
		}
		if m.Sequence > last {
			break
		}
		fn(m.Sequence, m.Subject)
		seq = m.Sequence + 1
	}
	return nil
}

// takeOver begins a new tenure of part under pin: it snapshots the requests held elsewhere,
// retrying while the bus recovers. It returns false when the partition is being let go.
//
// With lost set, the tenure under part's own pin goes on, but a delivery under it never arrived:
// lost is the delivery that arrived after it (its inbox and consumer sequences). The snapshot is
// taken again, so that a lost request holds its conversation's later requests back as one held
// elsewhere does, and each request of the pin's deliveries before lost that is neither held nor
// acknowledged here is given back to the bus at once (a NAK through lost's consumer sequence,
// which the server accepts for any delivery up to it) rather than after its ack wait: it comes
// back here and runs first.
func (h *Host) takeOver(ctx context.Context, part *partition, pin string, lost *deliverySeqs) bool {
	part.tenureMu.Lock()
	defer part.tenureMu.Unlock()
	tries := busPolicy.Start()
	for {
		others, err := h.snapshot(ctx, part)
		if err == nil {
			taken, reacks, again := h.beginTenure(part, pin, others, lost)
			if taken && lost == nil {
				// Another host may have run the partition's instances since this one last
				// did: the copies kept in memory are read again before their next request.
				h.live.stale()
			}
			for _, seq := range again {
				if err := h.giveBackFor(part, seq, lost.consumerSeq); err != nil {
					h.log.Debug("giving a lost delivery back", "seq", seq, "err", err)
				}
			}
			if len(again) > 0 {
				h.log.Info("deliveries lost on their way here given back", "agent", part.key.agent, "partition", part.key.n, "count", len(again))
			}
			// Requests this host finished whose acknowledgement the bus never got: acknowledged
			// again, they leave the inbox, and the conversations waiting for them go on at the
			// next look of resolve instead of after the ack wait.
			for _, reply := range reacks {
				if err := h.cfg.Conn.Publish(reply, ackPayload); err != nil {
					h.log.Debug("acknowledging a request again", "err", err)
				}
			}
			if len(reacks) > 0 {
				h.log.Debug("requests acknowledged again", "agent", part.key.agent, "partition", part.key.n, "count", len(reacks))
			}
			return taken
		}
		h.log.Warn("taking a partition over", "agent", part.key.agent, "partition", part.key.n, "err", err)
		if tries.Wait(ctx) != nil {
			return false
		}
	}
}

// ackPayload is the body of a JetStream acknowledgement.
var ackPayload = []byte("+ACK")

// deliverySeqs names a delivery by its inbox and consumer sequences.
type deliverySeqs struct{ seq, consumerSeq uint64 }

// beginTenure makes others, the partition's unacknowledged requests less those held here, the
// requests the new tenure under pin waits for. It returns false when the partition is being let
// go, and the subjects to acknowledge again the requests among others that this host finished.
// With lost set (takeOver), it returns too the requests to give back: those before lost that
// were not already waited for, and that this host neither holds nor acknowledged.
func (h *Host) beginTenure(part *partition, pin string, others map[string][]uint64, lost *deliverySeqs) (bool, []string, []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if part.releasing {
		return false, nil, nil
	}
	var (
		reacks []string
		again  []uint64
	)
	for key, seqs := range others {
		seqs = slices.DeleteFunc(seqs, func(s uint64) bool { return h.held[part.heldKey(s)] != nil })
		for _, s := range seqs {
			if reply, ok := part.ackedReplyLocked(s); ok {
				reacks = append(reacks, reply)
			} else if lost != nil && s < lost.seq && !slices.Contains(part.others[key], s) {
				again = append(again, s)
			}
		}
		if len(seqs) == 0 {
			delete(others, key)
		} else {
			others[key] = seqs
		}
	}
	part.pin, part.others = pin, others
	slices.Sort(again)
	if len(others) > 0 {
		h.log.Debug("partition taken over", "agent", part.key.agent, "partition", part.key.n, "heldElsewhere", len(others))
	}
	// Queued conversations may now wait for requests held elsewhere.
	for _, c := range h.convs {
		if len(c.queue) > 0 && c.queue[0].part == part && !c.running {
			h.scheduleLocked(c)
		}
	}
	return true, reacks, again
}

// heldPartitionsLocked lists, by agent, the partitions the heartbeat names: those pulled or
// handed over now, and those whose requests still run here (registry.FeatureFinishing).
func (h *Host) heldPartitionsLocked() map[string][]int {
	out := h.ownedLocked()
	for _, d := range h.held {
		k := d.part.key
		if d.running && !d.part.fenced.Load() && h.parts[k] != d.part && !slices.Contains(out[k.agent], k.n) {
			out[k.agent] = append(out[k.agent], k.n)
			slices.Sort(out[k.agent])
		}
	}
	return out
}

// ownedLocked lists the partitions pulled now, by agent.
func (h *Host) ownedLocked() map[string][]int {
	out := make(map[string][]int)
	for key := range h.parts {
		out[key.agent] = append(out[key.agent], key.n)
	}
	for _, ps := range out {
		slices.Sort(ps)
	}
	return out
}

// RemoveConsumers deletes the inbox consumers of an agent that no host serves any more, one per
// partition, without waiting for their inactive threshold (HostConfig.ConsumerInactiveThreshold):
// each is state the NATS servers keep, and their removal says that the agent is gone.
// Requests still queued for the agent stay in the inbox: a host that serves an agent of that
// name again creates the consumers anew and is delivered them, as a host still pulling a
// partition whose consumer is deleted does. Partition 0's consumer goes last, after every other
// one is gone, so that its absence says a call finished.
func RemoveConsumers(ctx context.Context, res *bus.Resources, agentName string) error {
	partitions, err := res.PartitionsOf(ctx, agentName)
	if err != nil {
		return err
	}
	for p := partitions - 1; p >= 0; p-- {
		err := res.JS.DeleteConsumer(ctx, subject.InboxStream(agentName), subject.PartitionConsumer(agentName, p))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("deleting the consumer of %s partition %d: %w", agentName, p, err)
		}
	}
	return nil
}
