package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// Dozing (docs/architecture.md, "Idle partitions").
//
// A pulled partition costs the bus a pull request, a heartbeat and an expiry every pullExpiry
// even when nothing comes: 16 partitions an agent, on every host of it, for every agent. So a
// partition that has delivered nothing for HostConfig.IdleAfter, and of which the host holds
// no request, stops pulling: it dozes. Before it stops, the host subscribes to the agent's inbox
// subjects (one subscription per agent, while any of its partitions doze); every request
// published to the agent after that wakes the partition it is for (subject.RequestPartition, the
// inbox's own hashing), and only that one. One published before was either delivered
// (and is held here), or waits in the consumer, or went to the pull that was stopping: the look
// at the consumer after the stop sees the last two (pending, or delivered and not
// acknowledged), and the partition pulls on instead of dozing. The host also looks at the
// consumers of the agent's dozing partitions dozeFirstCheck after it subscribed and then every
// dozeCheck, with one request for all of them (a wake lost with a NATS connection, or published
// on another server of a cluster before that server learned of the subscription), and a dozing
// partition pulls again before its consumer's
// inactive threshold, which would delete it.
//
// The pin stays the host's while it dozes less than pinnedTTL; past it the next request comes
// under a new pin and starts a new tenure, as after any lapse of the pin. A pin the host cannot
// tell for its own (no request came under it) it removes before dozing, unless another live
// host claims the partition: a pull request without the pin would wait for the pin to run out.

// dozeCheck is how often the host looks at the consumers of an agent's dozing partitions for
// requests no wake announced, one request for all of them (Host.dozeCheck, which tests shorten).
const dozeCheck = 30 * time.Second

// dozeFirstCheck is when the host first looks, after it subscribed to an agent's requests.
const dozeFirstCheck = time.Second

// consumptionEnd says why watchConsumption returned.
type consumptionEnd int

const (
	consumptionCancelled consumptionEnd = iota // ctx ended
	consumptionStopped                         // it stopped on its own
	consumptionIdle                            // the partition is idle: doze
)

// watchConsumption waits until ctx ends, the consumption cc of part stops on its own, or the
// partition has delivered nothing for at least IdleAfter while the host held none of its
// requests. Meanwhile, after a disruption of the deliveries (a reconnection of the host's
// connection, or one part.disrupt reports), it looks for deliveries that never arrived
// (findLost).
func (h *Host) watchConsumption(ctx context.Context, part *partition, cc jetstream.ConsumeContext) consumptionEnd {
	var idle <-chan time.Time
	if h.cfg.IdleAfter > 0 {
		t := time.NewTicker(h.cfg.IdleAfter)
		defer t.Stop()
		idle = t.C
	}
	h.mu.Lock()
	seen := part.arrivals
	h.mu.Unlock()
	reconnected := h.cfg.Conn.StatusChanged(nats.CONNECTED)
	defer h.cfg.Conn.RemoveStatusListener(reconnected)
	for {
		select {
		case <-ctx.Done():
			return consumptionCancelled
		case <-cc.Closed():
			return consumptionStopped
		case <-reconnected:
			h.findLost(ctx, part)
		case <-part.disrupted:
			h.findLost(ctx, part)
		case <-idle:
			h.mu.Lock()
			quiet := part.arrivals == seen && part.holding == 0 && !part.releasing
			seen = part.arrivals
			h.mu.Unlock()
			if quiet {
				return consumptionIdle
			}
		}
	}
}

// dozeEnd says how doze returned.
type dozeEnd int

const (
	dozeCancelled dozeEnd = iota // ctx ended
	dozeAwake                    // the consumption stopped: pull part.cons again
	dozeNot                      // the consumption goes on
	dozeAsleep                   // the partition dozes: nap pulls it again once woken
)

// doze stops the idle partition's consumption cc and, unless a request may be waiting for it,
// leaves it dozing (nap): then the caller returns, and the partition holds no goroutine until
// it is woken.
func (h *Host) doze(ctx context.Context, part *partition, cc jetstream.ConsumeContext) dozeEnd {
	woken, err := h.watchRequests(part.inbox, part.key)
	if err != nil {
		h.log.Debug("not dozing", "agent", part.key.agent, "partition", part.key.n, "err", err)
		return dozeNot
	}
	h.mu.Lock()
	seen := part.arrivals
	h.mu.Unlock()
	cc.Drain() // what the last pull brought is handed to arrive, and counts
	select {
	case <-cc.Closed():
	case <-ctx.Done():
		h.unwatchRequests(part.inbox)
		return dozeCancelled
	}
	// Once the server has the subscription and has dropped the stopped pull's, every request
	// either wakes the partition or shows in the consumer.
	if err := h.flush(ctx); err != nil || !h.quiet(ctx, part, seen) {
		h.unwatchRequests(part.inbox)
		return awake(ctx)
	}
	h.log.Debug("partition dozing", "agent", part.key.agent, "partition", part.key.n)
	h.mu.Lock()
	part.dozing = true
	h.metrics.dozeBegan(part.key, h.parts[part.key] == part && !part.releasing) // none pending, as quiet read
	h.mu.Unlock()
	h.nap(ctx, part, woken)
	return dozeAsleep
}

// nap keeps the dozing partition part without a goroutine until the first of: woken's end (a
// request for it, or the agent's look at its consumers, checkDozing), the pull request that keeps
// its consumer before the consumer's inactive threshold, and ctx's end. Then a new goroutine
// ends the doze and pulls again (pullOn), or, once ctx ended, closes part.pulled. The nap holds a
// count of h.bg, so the host's stop waits for it as for the goroutine it replaces.
func (h *Host) nap(ctx context.Context, part *partition, woken context.Context) {
	h.bg.Add(1)
	var n struct {
		mu     sync.Mutex // held until renew and stops are set
		renew  *time.Timer
		stops  [2]func() bool
		waking sync.Once
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	wake := func() {
		n.waking.Do(func() {
			h.bg.Go(func() {
				n.mu.Lock()
				n.renew.Stop()
				for _, stop := range n.stops {
					stop()
				}
				n.mu.Unlock()
				h.mu.Lock()
				part.dozing = false
				h.metrics.dozeEnded(part.key)
				h.mu.Unlock()
				h.unwatchRequests(part.inbox)
				if ctx.Err() != nil {
					close(part.pulled)
					return
				}
				h.pullOn(ctx, part, true)
			})
			h.bg.Done()
		})
	}
	n.renew = time.AfterFunc(h.cfg.ConsumerInactiveThreshold/2, wake)
	n.stops = [2]func() bool{context.AfterFunc(woken, wake), context.AfterFunc(ctx, wake)}
}

// awake is dozeAwake, or dozeCancelled once ctx ended.
func awake(ctx context.Context) dozeEnd {
	if ctx.Err() != nil {
		return dozeCancelled
	}
	return dozeAwake
}

// flush waits until the server has processed what the host's connection sent.
func (h *Host) flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return h.cfg.Conn.FlushWithContext(ctx)
}

// quiet reports whether nothing waits for the partition: nothing delivered since arrivals was
// seen, and its consumer holds no request pending or delivered and not acknowledged. It also
// removes a pin the host does not know (see above). Any doubt is not quiet.
func (h *Host) quiet(ctx context.Context, part *partition, seen uint64) bool {
	h.mu.Lock()
	cons, pin := part.cons, part.pin
	quiet := part.arrivals == seen && part.holding == 0 && !part.releasing
	h.mu.Unlock()
	if !quiet || cons == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			h.log.Debug("reading a dozing partition's consumer", "consumer", part.durable, "err", err)
		}
		return false
	}
	if waiting(info) {
		return false
	}
	if id := pinnedID(info); id != "" && id != pin {
		if _, claimed := h.claimant(h.dir.LiveHosts(part.key.agent), part.key); claimed {
			return false
		}
		if err := part.inbox.stream.UnpinConsumer(ctx, part.durable, priorityGroup); err != nil {
			h.log.Debug("unpinning a dozing partition", "consumer", part.durable, "err", err)
			return false
		}
	}
	return true
}

// waiting reports whether a partition's consumer holds requests: pending, or delivered and not
// acknowledged.
func waiting(info *jetstream.ConsumerInfo) bool { return info.NumPending > 0 || info.NumAckPending > 0 }

// inboxWake is the subscription to an agent's requests that wakes its dozing partitions, and the
// timer of the look at their consumers.
type inboxWake struct {
	// Guarded by Host.mu: the doze calls between their watchRequests and unwatchRequests (the
	// partitions dozing, or about to), the subscription while there are any, and the look's timer.
	watchers int
	sub      *nats.Subscription
	check    *time.Timer

	// woken holds, by partition, the end of the context its doze naps on: called, and taken
	// out, by the first wake of the partition after it was made.
	mu    sync.Mutex
	woken map[int]wakeSignal
}

// wakeSignal is a context that a wake of one partition ends, and its end.
type wakeSignal struct {
	ctx  context.Context
	wake context.CancelFunc
}

// watchRequests returns a context that ends once a request for the partition key is published to
// its agent's inbox after the server has the subscription (which the caller makes sure of). Call
// unwatchRequests after.
func (h *Host) watchRequests(in *agentInbox, key partKey) (context.Context, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &in.wake
	if w.sub == nil {
		partitions := in.partitions
		sub, err := h.cfg.Conn.Subscribe(subject.InboxSubjects(key.agent), func(m *nats.Msg) {
			if p, ok := subject.RequestPartition(m.Subject, partitions); ok {
				w.wake(p)
			}
		})
		if err != nil {
			return nil, err
		}
		w.sub = sub
		var check func()
		check = func() {
			h.checkDozing(in, key.agent)
			h.mu.Lock()
			defer h.mu.Unlock()
			if w.sub == sub { // the partitions woken may doze again meanwhile
				w.check = time.AfterFunc(h.dozeCheck, check)
			}
		}
		// The first look comes soon: on a cluster, a server other than the host's learns of the
		// subscription a moment after the flush that doze waits for, and a request published
		// there meanwhile wakes nobody.
		w.check = time.AfterFunc(min(dozeFirstCheck, h.dozeCheck), check)
	}
	w.mu.Lock()
	if w.woken == nil {
		w.woken = make(map[int]wakeSignal)
	}
	woken, ok := w.woken[key.n]
	if !ok {
		woken.ctx, woken.wake = context.WithCancel(context.Background())
		w.woken[key.n] = woken
	}
	w.mu.Unlock()
	w.watchers++
	return woken.ctx, nil
}

// unwatchRequests ends a watchRequests; the last one unsubscribes.
func (h *Host) unwatchRequests(in *agentInbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &in.wake
	if w.watchers--; w.watchers == 0 && w.sub != nil {
		_ = w.sub.Unsubscribe()
		w.check.Stop()
		w.sub, w.check = nil, nil
	}
}

// wake wakes partition p of the agent, if it dozes here or is about to.
func (w *inboxWake) wake(p int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.woken[p]; ok {
		s.wake()
		delete(w.woken, p)
	}
}

// wakeAll wakes the agent's dozing partitions.
func (w *inboxWake) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, s := range w.woken {
		s.wake()
		delete(w.woken, p)
	}
}

// checkDozing looks at the consumers of the agent's partitions that doze here, with one request
// for all of them, and wakes each whose consumer holds a request or is gone.
func (h *Host) checkDozing(in *agentInbox, agent string) {
	h.mu.Lock()
	dozing := make(map[string]int) // partition by consumer
	for key, part := range h.parts {
		if key.agent == agent && part.dozing {
			dozing[part.durable] = key.n
		}
	}
	h.mu.Unlock()
	if len(dozing) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(h.bctx, 5*time.Second)
	defer cancel()
	list := in.stream.ListConsumers(ctx)
	for info := range list.Info() { // read to the end: the lister's goroutine waits for each read
		if n, ok := dozing[info.Name]; ok {
			delete(dozing, info.Name)
			if waiting(info) {
				in.wake.wake(n)
			}
		}
	}
	if err := list.Err(); err != nil {
		if ctx.Err() == nil {
			h.log.Debug("reading a dozing agent's consumers", "agent", agent, "err", err)
		}
		in.wake.wakeAll() // unknown
		return
	}
	for _, n := range dozing { // a consumer not listed is gone: pulling makes it again
		in.wake.wake(n)
	}
}
