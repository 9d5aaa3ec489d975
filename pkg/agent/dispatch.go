package agent

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/fairshare"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// delivery is one request the host holds: queued behind its conversation, or being handled.
type delivery struct {
	seq  uint64
	part *partition
	conv *conversation
	// stored is when the inbox stored the request (Unix nanoseconds): with seq, it names the
	// request even across an inbox deleted and made again (AckedWindow).
	stored int64

	// Guarded by Host.mu.
	msg      jetstream.Msg // the latest delivery of the request (a redelivery replaces it)
	running  bool
	progress time.Time // when the bus last heard the request is being worked on
	// started is when its current attempt began (zero before the first); wait is what its
	// handler waits for, nil while nothing (inspect.go).
	started time.Time
	wait    *deliveryWait
	// dropped is set once the host no longer holds it (dropLocked).
	dropped bool
}

// conversation is one workflow instance and participant (one stored inbox subject) while the
// host holds requests of it. Its requests run one at a time, in inbox order; an idle
// conversation costs nothing.
type conversation struct {
	key   string
	share shareKey // its tenant (from the stored subject) and agent: whose turn its requests take
	slots *slots   // the handler slots its agent's requests run in

	// Guarded by Host.mu.
	queue   []*delivery // ascending sequence; the head may be running
	running bool        // its head is running
	ready   bool        // it waits in its slots' queue for a slot to run its head
	blocked bool        // the head waits for an earlier request held elsewhere
}

// slots are the handler slots an agent's requests run in, which free up one at a time and go to
// the tenants in turn (package fairshare): the host's MaxConcurrent, shared by the agents that
// have no capacity of their own, or an agent's own (MaxConcurrent). A conversation whose head may
// run waits in ready under its tenant and agent (on slots several agents share, a tenant takes
// turns per agent); the drainers, at most one per slot, each take the next conversation the queue
// hands out, run its head, and put it back at the end of its tenant's line if it has more. So a
// waiting conversation costs no goroutine, and a tenant with a backlog takes one turn in each
// round like any other, however much it queued first.
type slots struct {
	size int

	// Guarded by Host.mu.
	ready *fairshare.Queue[shareKey, *conversation]
	// drainers run now (at most size); idle of them wait on wake for a conversation to be ready.
	drainers, idle int
	wake           chan struct{}
}

// newSlots returns size slots, whose tenants' shares shareOf gives (limits.go).
func (h *Host) newSlots(size int) *slots {
	return &slots{size: size, ready: fairshare.New[shareKey, *conversation](h.shareOf), wake: make(chan struct{}, size)}
}

func compareSeq(a, b uint64) int { return cmp.Compare(a, b) }

// arrive takes a request the partition's consumer delivered.
func (h *Host) arrive(ctx context.Context, part *partition, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		h.log.Error("dropping a delivery without metadata", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	seq, stored := md.Sequence.Stream, md.Timestamp.UnixNano()
	pin := m.Headers().Get(subject.HeaderPinID)
	h.mu.Lock()
	part.arrivals++
	if part.fenced.Load() {
		h.mu.Unlock()
		return // another host may own the partition: the request is left to it
	}
	if part.delivered != 0 && md.Sequence.Consumer > part.delivered+1 {
		part.lost = true // handled with the next request queued (below)
	}
	part.delivered = max(part.delivered, md.Sequence.Consumer)
	if part.releasing {
		// Arrived while the partition is handed over: the next owner gets it.
		kept := h.keepLateLocked(part, seq, m)
		h.mu.Unlock()
		if !kept {
			_ = m.Nak()
		}
		return
	}
	if _, done := part.ackedReplyLocked(seq); done || h.acked.has(part.inbox.salt+seq, stored) {
		// A copy of a request this host finished and acknowledged, delivered before the
		// acknowledgement reached the bus (redeliverStale gives a dead host's requests back just
		// as the bus may hand one here), or after it was lost (AckedWindow): nothing is left to
		// do but to acknowledge it again.
		h.mu.Unlock()
		_ = m.Ack()
		return
	}
	if d := h.held[part.heldKey(seq)]; d != nil && !d.part.fenced.Load() {
		// A redelivery of a request held here (its ack wait ran out under a stall): keep the one
		// copy, answering to the latest delivery. One already running has read its delivery and
		// counted it: this one is counted here. (One still running under a fenced tenure can no
		// longer act: the redelivery is queued behind it, as a request of its own.)
		running := d.running
		d.msg, d.progress = m, time.Now()
		h.mu.Unlock()
		if running && h.metrics != nil {
			req := new(agentbusv1.Request)
			_ = proto.Unmarshal(m.Data(), req) // one that does not decode counts as unknown
			h.metrics.redelivered(part.key.agent, req)
		}
		return
	}
	// A request under a new pin begins a new tenure. One after a delivery that never arrived
	// (part.lost: lost with a connection, its request stays unacknowledged until its ack wait
	// ends) must not run before that request if it is of the same conversation: the lost one is
	// waited for, and asked for again at once (takeOver).
	if newPin := pin != "" && pin != part.pin; newPin || part.lost {
		var lost *deliverySeqs
		if newPin {
			part.delivered = md.Sequence.Consumer // a new consumer counts from 1
		} else {
			pin, lost = part.pin, &deliverySeqs{seq: seq, consumerSeq: md.Sequence.Consumer}
		}
		part.lost = false
		h.mu.Unlock()
		if !h.takeOver(ctx, part, pin, lost) {
			// Handed over meanwhile (beginTenure).
			h.mu.Lock()
			kept := h.keepLateLocked(part, seq, m)
			h.mu.Unlock()
			if !kept {
				_ = m.Nak()
			}
			return
		}
		h.mu.Lock()
	}
	h.queueLocked(part, m, seq, stored)
	h.mu.Unlock()
}

// queueLocked holds a request delivered from part and queues it in its conversation, in inbox
// order, behind the request being handled.
func (h *Host) queueLocked(part *partition, m jetstream.Msg, seq uint64, stored int64) {
	// A request held elsewhere that comes here is no longer waited for: it is queued in order.
	if seqs := part.others[m.Subject()]; len(seqs) > 0 {
		if i, found := slices.BinarySearch(seqs, seq); found {
			part.others[m.Subject()] = slices.Delete(seqs, i, i+1)
		}
	}
	c := h.convs[m.Subject()]
	if c == nil {
		c = &conversation{key: m.Subject(), share: shareKey{subject.StoredInboxTenant(m.Subject()), part.key.agent}, slots: h.slots[part.key.agent]}
		h.convs[c.key] = c
	}
	d := &delivery{seq: seq, part: part, conv: c, msg: m, progress: time.Now(), stored: stored}
	h.held[d.key()] = d
	h.keepAlive.Wake()
	part.holding++
	h.wakeLoadLocked()
	if part.holding >= crowdedAt && !part.crowded {
		// Reported now rather than at the next step, so that the ingress instances refuse the
		// tenants crowding the partition before what they send meanwhile fills it.
		part.crowded = true
		h.reportSoon()
	}
	i, _ := slices.BinarySearchFunc(c.queue, seq, func(d *delivery, s uint64) int { return compareSeq(d.seq, s) })
	if i == 0 && len(c.queue) > 0 && c.queue[0].running {
		i = 1 // never ahead of the request being handled
	}
	c.queue = slices.Insert(c.queue, i, d)
	h.scheduleLocked(c)
}

// waitsLocked reports whether the conversation's head must wait for an earlier request of the
// conversation that is held elsewhere.
func (h *Host) waitsLocked(c *conversation) bool {
	head := c.queue[0]
	seqs := head.part.others[c.key]
	return len(seqs) > 0 && seqs[0] < head.seq
}

// scheduleLocked puts a conversation whose head may run in its slots' queue, and wakes or starts
// a drainer for it.
func (h *Host) scheduleLocked(c *conversation) {
	if h.readyLocked(c) {
		h.wakeLocked(c.slots)
	}
}

// readyLocked puts a conversation whose head may run at the end of its tenant's line in its slots'
// queue, or parks it when its head waits for a request held elsewhere. It reports whether it
// queued it.
func (h *Host) readyLocked(c *conversation) bool {
	if c.running || c.ready || len(c.queue) == 0 {
		return false
	}
	if h.waitsLocked(c) {
		h.blockLocked(c)
		return false
	}
	if c.blocked {
		c.blocked = false
		delete(h.blocked, c)
	}
	c.ready = true
	c.slots.ready.Push(c.share, c)
	return true
}

// wakeLocked gets a drainer to take the next conversation of the slots: an idle one, or a new one
// while fewer run than there are slots. When every slot is taken, the next drainer that finishes
// a request takes it.
func (h *Host) wakeLocked(s *slots) {
	switch {
	case s.idle > 0:
		s.idle--
		s.wake <- struct{}{} // never blocks: it holds a place for each drainer
	case s.drainers < s.size:
		s.drainers++
		h.wg.Add(1)
		go h.drainer(s)
	}
}

// drainerIdle is how long a drainer waits for the next conversation before it ends. Reusing
// drainers spares a new goroutine per burst of work, and the stack growth of each: handlers'
// stacks are deep (docs/performance.md).
const drainerIdle = time.Second

// drainer is one of the slots: it runs the head of the conversation the slots' queue hands out
// next, one request at a time, until none is ready for drainerIdle or the host stops.
func (h *Host) drainer(s *slots) {
	defer h.wg.Done()
	idle := time.NewTimer(drainerIdle)
	defer idle.Stop()
	for {
		h.mu.Lock()
		c, d := h.takeLocked(s)
		if c == nil {
			s.idle++
			h.mu.Unlock()
			if !h.awaitWork(s, idle) {
				return
			}
			continue
		}
		h.mu.Unlock()
		h.drain(c, d)
	}
}

// awaitWork waits, as an idle drainer of s, until it is woken, and reports whether it was; false
// when drainerIdle passed or the host stops first, and the drainer ends.
func (h *Host) awaitWork(s *slots, idle *time.Timer) bool {
	idle.Reset(drainerIdle)
	select {
	case <-s.wake:
		return true
	case <-idle.C:
	case <-h.stopping:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-s.wake: // woken just as it gave up: a conversation is ready
		return true
	default:
	}
	s.idle--
	s.drainers--
	return false
}

// takeLocked takes the next conversation whose head may run from the slots' queue and marks its
// head running; nil when none is ready (or its tenant is at its cap).
func (h *Host) takeLocked(s *slots) (*conversation, *delivery) {
	for {
		key, c, ok := s.ready.Next()
		if !ok {
			return nil, nil
		}
		c.ready = false
		if len(c.queue) == 0 || h.waitsLocked(c) {
			// Its requests went back to the bus while it waited (a handover), or a new tenure
			// found an earlier request of it held elsewhere.
			s.ready.Done(key)
			if len(c.queue) == 0 {
				h.forgetLocked(c)
			} else {
				h.blockLocked(c)
			}
			continue
		}
		d := c.queue[0]
		c.running, d.running = true, true
		return c, d
	}
}

// blockLocked parks a conversation until the request it waits for is resolved.
func (h *Host) blockLocked(c *conversation) {
	if !c.blocked {
		c.blocked = true
		h.blocked[c] = struct{}{}
	}
	if !h.resolving {
		h.resolving = true
		h.bg.Go(h.resolve)
	}
}

// drain handles the conversation's head d in a slot, then puts the conversation back at the end
// of its tenant's line if it has more, and frees the slot.
func (h *Host) drain(c *conversation, d *delivery) {
	gaveBack := !h.process(h.hctx, d)

	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(d)
	if gaveBack {
		// It goes back to the bus and comes back after the requests queued behind it, which
		// must therefore wait for it as for a request held elsewhere.
		seqs := d.part.others[c.key]
		i, _ := slices.BinarySearch(seqs, d.seq)
		if d.part.others != nil {
			d.part.others[c.key] = slices.Insert(seqs, i, d.seq)
		}
	}
	c.running = false
	// Queued before the slot is freed, so that a tenant that keeps its place keeps its share
	// too; no drainer is woken: this one takes the next conversation itself.
	h.readyLocked(c)
	c.slots.ready.Done(c.share)
	if len(c.queue) == 0 {
		h.forgetLocked(c)
	}
}

// keepLateLocked keeps a request delivered while part is handed over, for handOver to give back
// once the partition's pulling has stopped; it reports false once handOver has given the
// requests back, or when part is not handed over (takeOver failed for another reason), and the
// caller gives it back itself.
func (h *Host) keepLateLocked(part *partition, seq uint64, m jetstream.Msg) bool {
	if !part.releasing || part.givenBack {
		return false
	}
	part.late = append(part.late, lateDelivery{seq, m})
	return true
}

// dropLocked forgets a request the host no longer holds.
func (h *Host) dropLocked(d *delivery) {
	if h.held[d.key()] == d {
		delete(h.held, d.key()) // not its redelivery, queued behind it
	}
	if !d.dropped {
		d.dropped = true
		d.part.holding--
		if d.part.crowded && d.part.holding < crowdedAt*3/4 {
			d.part.crowded = false
		}
	}
	c := d.conv
	if i := slices.Index(c.queue, d); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
	}
	if len(c.queue) == 0 && !c.running {
		h.forgetLocked(c)
	}
}

// forgetLocked drops an empty conversation.
func (h *Host) forgetLocked(c *conversation) {
	if c.blocked {
		c.blocked = false
		delete(h.blocked, c)
	}
	if h.convs[c.key] == c {
		delete(h.convs, c.key)
	}
}

// resolve watches the blocked conversations: every resolveEvery it asks the inbox's leader
// whether the requests they wait for are still there; one that is gone was acknowledged by the
// host that held it, and the conversation goes on. It ends when nothing is blocked.
func (h *Host) resolve() {
	type wait struct {
		c    *conversation
		part *partition
		seq  uint64
	}
	t := time.NewTicker(resolveEvery)
	defer t.Stop()
	for {
		select {
		case <-h.hctx.Done():
			h.mu.Lock()
			h.resolving = false
			h.mu.Unlock()
			return
		case <-t.C:
		}
		h.mu.Lock()
		var waits []wait
		for c := range h.blocked {
			if len(c.queue) == 0 || !h.waitsLocked(c) {
				h.scheduleLocked(c)
				continue
			}
			part := c.queue[0].part
			waits = append(waits, wait{c, part, part.others[c.key][0]})
		}
		if len(waits) == 0 {
			h.resolving = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()

		ctx, cancel := context.WithTimeout(h.hctx, 5*time.Second)
		var gone []wait
		for _, w := range waits {
			_, err := bus.LeaderGet(ctx, h.cfg.Conn, w.part.inbox.name, w.seq, "")
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				gone = append(gone, w)
			}
		}
		cancel()
		h.mu.Lock()
		for _, w := range gone {
			seqs := w.part.others[w.c.key]
			if i, found := slices.BinarySearch(seqs, w.seq); found {
				w.part.others[w.c.key] = slices.Delete(seqs, i, i+1)
			}
			if len(w.part.others[w.c.key]) == 0 {
				delete(w.part.others, w.c.key)
			}
			h.scheduleLocked(w.c)
		}
		h.mu.Unlock()
	}
}

// keepAliveEvery is how often keepAlive looks for requests due for progress, given the ack wait:
// twice in each third of it.
func keepAliveEvery(ackWait time.Duration) time.Duration {
	return max(ackWait/6, 10*time.Millisecond)
}

// startKeepAlive tells the bus, every third of the ack wait until h.keepAlive stops, that each
// request the host holds is being worked on, so that neither a long handler nor a long queue
// makes the bus give the request to another host. One loop serves every held request. While the
// host holds none it rests, and the next request held wakes it: that request's first progress
// is due a third of the ack wait after it was held, more than a step after the wake.
func (h *Host) startKeepAlive() {
	every := h.cfg.AckWait / 3
	var due []jetstream.Msg
	h.keepAlive.Start(keepAliveEvery(h.cfg.AckWait), func() bool {
		if h.holdsNone() {
			return true
		}
		if !h.leaseHeld() {
			return false // another host may hold the requests now
		}
		now := time.Now()
		due = due[:0]
		h.mu.Lock()
		for _, d := range h.held {
			if now.Sub(d.progress) >= every && !d.part.fenced.Load() {
				d.progress = now
				due = append(due, d.msg)
			}
		}
		h.mu.Unlock()
		for _, m := range due {
			_ = m.InProgress()
		}
		return false
	})
}

// holdsNone reports whether the host holds no request.
func (h *Host) holdsNone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held) == 0
}
