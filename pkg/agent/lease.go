package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Fencing (docs/architecture.md, "Taking over after a crash").
//
// The other hosts take a host for dead registry.DeadAfter after its last heartbeat reached them,
// and then redeliver at once the requests it held (redeliverStale). A host that only paused (a
// SIGSTOP, a long GC pause, a network partition from NATS) must not go on acting on those
// requests once that may have happened. So a host acts on its partitions (starts a request,
// writes a state, history, result or dead letter, replies, acknowledges or gives a request back)
// only while its lease holds: until leaseTTL after it sent the last heartbeat that was written.
// leaseTTL is shorter than DeadAfter and a heartbeat reaches the others after it was sent, so the
// lease ends before any other host can count this one as dead.
//
// Once the lease lapsed, every act waits. The next heartbeat that is written renews it only after
// the host checked that the consumer of every partition it pulls is still pinned to it: a pin
// that changed means another host took the partition over. Such a partition is fenced: its
// requests are dropped here without being acknowledged or given back, and every act of a
// handler still running on one of them fails with errFenced and is logged. Requests of a
// partition the host was only finishing (it had let the partition go) are fenced at once, as no
// pin tells whether they were taken over.
//
// What remains is one write that passed the check just before the pause and lands after it:
// a state write is compare-and-set against the revision its request read, a history append
// expects the thread's last sequence, so either lands only where nothing was written since and
// then counts as the request's first attempt, which the new owner rewinds and reads back.

// leaseTTL is how long after sending a heartbeat that was written the host may act on its
// partitions.
const leaseTTL = registry.DeadAfter - registry.HeartbeatInterval/2

// errFenced fails an act of a request whose partition another host took over.
var errFenced = errors.New("another host took the request's partition over")

// leaseWait is how often an act waiting for a lapsed lease looks again.
const leaseWait = 50 * time.Millisecond

// fenceKey is the context key of the partition a request came from.
type fenceKey struct{}

// withFence marks ctx as the context of a request of part: acts in it go through mayAct.
func withFence(ctx context.Context, part *partition) context.Context {
	return context.WithValue(ctx, fenceKey{}, part)
}

// leaseHeld reports whether the host's lease holds now.
func (h *Host) leaseHeld() bool {
	return time.Since(h.epoch) < time.Duration(h.leaseEnd.Load())
}

// mayAct returns nil when the request of ctx may act now: its partition is not fenced and the
// host's lease holds. While the lease has lapsed it waits for the lease to be renewed or the
// partition to be fenced; errFenced when it was. A context of no request may always act.
func (h *Host) mayAct(ctx context.Context) error {
	part, _ := ctx.Value(fenceKey{}).(*partition)
	if part == nil {
		return nil
	}
	for {
		if part.fenced.Load() {
			return errFenced
		}
		if h.leaseHeld() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the host's heartbeat to be written: %w", ctx.Err())
		case <-time.After(leaseWait):
		}
	}
}

// renewLease is called with h.leaseMu held after a heartbeat sent at sent (since h.epoch) was
// written. When the lease had lapsed before, it first fences the partitions another host may
// have taken over; an error leaves the lease lapsed.
func (h *Host) renewLease(ctx context.Context, sent time.Duration) error {
	if end := time.Duration(h.leaseEnd.Load()); end != 0 && sent >= end {
		h.log.Warn("heartbeat lease lapsed; checking which partitions are still this host's", "lapsedFor", (sent - end).Round(time.Millisecond))
		if err := h.reclaim(ctx); err != nil {
			return fmt.Errorf("checking the partitions after the lease lapsed: %w", err)
		}
	}
	h.leaseEnd.Store(int64(sent + leaseTTL))
	return nil
}

// reclaim fences every partition the host holds requests of that another host may have taken
// over while its lease had lapsed.
func (h *Host) reclaim(ctx context.Context) error {
	type check struct {
		part *partition
		cons jetstream.Consumer
		pin  string
	}
	var checks []check
	finishing := make(map[*partition]bool)
	h.mu.Lock()
	for _, part := range h.parts {
		if !part.releasing && part.pin != "" && part.cons != nil {
			checks = append(checks, check{part, part.cons, part.pin})
		}
	}
	for _, d := range h.held {
		if h.parts[d.part.key] != d.part || d.part.releasing {
			finishing[d.part] = true
		}
	}
	h.mu.Unlock()
	for part := range finishing {
		h.fence(part, "its requests were being finished here after it was let go")
	}
	for _, c := range checks {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := c.cons.Info(ictx)
		cancel()
		if err != nil {
			return fmt.Errorf("reading consumer %s: %w", c.part.durable, err)
		}
		if pinnedID(info) != c.pin {
			h.fence(c.part, "its consumer is pinned to another client now")
		}
	}
	return nil
}

// fence gives up a partition another host may have taken over: it stops pulling it, drops its
// requests without acknowledging them, and makes every act of a handler still running on one
// fail with errFenced.
func (h *Host) fence(part *partition, why string) {
	if part.fenced.Swap(true) {
		return
	}
	h.mu.Lock()
	dropped := 0
	for _, d := range h.held {
		if d.part == part && !d.running {
			h.dropLocked(d)
			dropped++
		}
	}
	part.others = nil
	part.releasing = true
	part.stop()
	if h.parts[part.key] == part {
		delete(h.parts, part.key)
		h.metrics.partitionReleased(part.key)
	}
	h.mu.Unlock()
	h.log.Warn("partition fenced: another host may own it now; its requests are left to that host",
		"agent", part.key.agent, "partition", part.key.n, "why", why, "dropped", dropped)
}

// redeliverStale makes the unacknowledged requests of a partition this host now owns, held by
// the client whose stale pin unpinStale removed, come back at once instead of after the ack wait:
// it gives each back to the bus on that client's behalf (a NAK to the request's acknowledgement
// subject). info is the partition's consumer as read before the unpin, so its deliveries are
// that client's. It gives nothing back while a fresh heartbeat lists the partition, or while a
// live host of the agent does not list the partitions it finishes requests of
// (registry.FeatureFinishing): a request that still runs elsewhere is never given back.
func (h *Host) redeliverStale(ctx context.Context, part *partition, info *jetstream.ConsumerInfo) {
	if holder, held := h.dir.Holder(part.key.agent, part.key.n, h.cfg.ID); held {
		h.log.Debug("not redelivering: a live host holds the partition", "agent", part.key.agent, "partition", part.key.n, "holder", holder)
		return
	}
	if !h.dir.AllLiveHave(part.key.agent, registry.FeatureFinishing) {
		return
	}
	var seqs []uint64
	for seq, last := info.AckFloor.Stream+1, info.Delivered.Stream; seq <= last; {
		m, err := bus.LeaderGet(ctx, h.cfg.Conn, subject.InboxStream, seq, part.filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			h.log.Debug("reading unacknowledged requests to redeliver", "consumer", part.durable, "err", err)
			return
		}
		if m.Sequence > last {
			break
		}
		seqs = append(seqs, m.Sequence)
		seq = m.Sequence + 1
	}
	n := 0
	for _, seq := range seqs {
		h.mu.Lock()
		mine := h.held[seq] != nil
		h.mu.Unlock()
		if mine {
			continue
		}
		if err := h.cfg.Conn.Publish(subject.AckReply(subject.InboxStream, part.durable, seq, info.Delivered.Consumer), nakPayload); err != nil {
			h.log.Debug("redelivering a request", "seq", seq, "err", err)
			continue
		}
		n++
	}
	if n > 0 {
		h.log.Info("requests of a host taken for dead redelivered", "agent", part.key.agent, "partition", part.key.n, "count", n)
	}
}

// nakPayload is the body of a JetStream negative acknowledgement.
var nakPayload = []byte("-NAK")
