package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// A host that takes a partition over from a host taken for dead counts the takeover in the
// partition's key of AGENTBUS_TENURES (compare-and-set) before it removes the other host's pin
// and gives its requests back to the bus; it takes nothing over while it cannot count, nor
// unless, before and after counting, its directory has read every heartbeat in the bucket and
// none claims the partition (holderGone). Every host reads the count of a partition when it
// gains it.
//
// Once the lease lapsed, every act waits. The next heartbeat that is written renews it only after
// the host read the count of every partition it holds requests of: one whose count moved was
// taken over from it. Such a partition is fenced: its requests are dropped here without being
// acknowledged or given back, and every act of a handler still running on one of them fails with
// errFenced and is logged. The others go on where they were.
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
// written. When the lease had lapsed before the write ended, it first fences the partitions
// another host may have taken over; an error leaves the lease lapsed. A heartbeat sent before
// the lease ended but written after it counts as lapsed too: while its write hung (a NATS
// election), the others may have counted this host dead by the heartbeat before it.
func (h *Host) renewLease(ctx context.Context, sent time.Duration) error {
	if end, written := time.Duration(h.leaseEnd.Load()), time.Since(h.epoch); end != 0 && written >= end {
		h.log.Warn("heartbeat lease lapsed; checking which partitions are still this host's", "lapsedFor", (written - end).Round(time.Millisecond))
		if err := h.reclaim(ctx); err != nil {
			return fmt.Errorf("checking the partitions after the lease lapsed: %w", err)
		}
	}
	h.leaseEnd.Store(int64(sent + leaseTTL))
	return nil
}

// reclaim fences every partition the host holds requests of that another host took over while
// its lease had lapsed: those whose takeover count moved since the host gained them. (Their
// consumer's pin says less: a consumer that gets a new leader in a NATS election gets a new pin
// too, with no other host involved.)
func (h *Host) reclaim(ctx context.Context) error {
	parts := make(map[*partition]uint64)
	h.mu.Lock()
	for _, part := range h.parts {
		parts[part] = part.tenure
	}
	for _, d := range h.held {
		parts[d.part] = d.part.tenure // also one it let go and still finishes requests of
	}
	h.mu.Unlock()
	for part, known := range parts {
		if part.fenced.Load() {
			continue
		}
		now, _, err := h.tenureOf(ctx, part.key)
		if err != nil {
			return err
		}
		if now != known {
			h.fence(part, fmt.Sprintf("it was taken over from this host (takeover %d, this host knew %d)", now, known))
		}
	}
	return nil
}

// tenureOf reads the takeover count of a partition and its revision (0 when never taken over).
func (h *Host) tenureOf(ctx context.Context, key partKey) (n, rev uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := h.res.Tenures.Get(ctx, subject.TenureKey(key.agent, key.n))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, 0, nil
	case err != nil:
		return 0, 0, fmt.Errorf("reading the takeovers of %s partition %d: %w", key.agent, key.n, err)
	}
	n, err = strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the takeovers of %s partition %d: %w", key.agent, key.n, err)
	}
	return n, e.Revision(), nil
}

// learnTenure reads the takeover count of a partition the host gained, before it pulls it,
// trying again while the bus recovers.
func (h *Host) learnTenure(ctx context.Context, part *partition) error {
	var n uint64
	err := retryUntil(ctx, func() (err error) {
		n, _, err = h.tenureOf(ctx, part.key)
		return err
	})
	if err != nil {
		return err
	}
	h.mu.Lock()
	part.tenure = n
	h.mu.Unlock()
	return nil
}

// bumpTenure counts a takeover of the partition by this host, which then knows the new count.
// A count that meets another host's (a compare-and-set conflict) pauses a little
// (bus.ConflictBackoff), reads the count again and adds one to it, for as long as ctx and
// bus.ConflictPatience allow.
func (h *Host) bumpTenure(ctx context.Context, part *partition) error {
	key := subject.TenureKey(part.key.agent, part.key.n)
	return bus.RetryConflicts(ctx, func() error {
		n, rev, err := h.tenureOf(ctx, part.key)
		if err != nil {
			return err
		}
		next := []byte(strconv.FormatUint(n+1, 10))
		if rev == 0 {
			_, err = h.res.Tenures.Create(ctx, key, next)
		} else {
			_, err = h.res.Tenures.Update(ctx, key, next, rev)
		}
		if err != nil {
			// On a conflict (another host counted one meanwhile) the count is read again.
			return fmt.Errorf("counting a takeover of %s partition %d: %w", part.key.agent, part.key.n, err)
		}
		h.mu.Lock()
		part.tenure = n + 1
		h.mu.Unlock()
		return nil
	})
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
	if err := h.eachUnacked(ctx, part, info, func(seq uint64, _ string) { seqs = append(seqs, seq) }); err != nil {
		h.log.Debug("reading unacknowledged requests to redeliver", "consumer", part.durable, "err", err)
		return
	}
	n := 0
	for _, seq := range seqs {
		h.mu.Lock()
		mine := h.held[part.heldKey(seq)] != nil
		h.mu.Unlock()
		if mine {
			continue
		}
		if err := h.giveBackFor(part, seq, info.Delivered.Consumer); err != nil {
			h.log.Debug("redelivering a request", "seq", seq, "err", err)
			continue
		}
		n++
	}
	if n > 0 {
		h.log.Info("requests of a host taken for dead redelivered", "agent", part.key.agent, "partition", part.key.n, "count", n)
	}
}

// giveBackFor gives the partition's request at seq back to its consumer on behalf of the client
// it was delivered to, which may be another or none (a NAK to the request's acknowledgement
// subject, through consumerSeq: the server accepts any delivery sequence up to its last).
func (h *Host) giveBackFor(part *partition, seq, consumerSeq uint64) error {
	return h.cfg.Conn.Publish(subject.AckReply(part.inbox.name, part.durable, seq, consumerSeq), nakPayload)
}

// nakPayload is the body of a JetStream negative acknowledgement.
var nakPayload = []byte("-NAK")
