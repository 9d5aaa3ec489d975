package agent

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Deliveries lost on their way (docs/architecture.md, "A delivery lost on its way").
//
// A delivery in flight on a connection whose NATS server dies never arrives, yet the consumer
// counts it delivered: its request stays unacknowledged until its ack wait ends. The next
// delivery of the partition shows the gap in the consumer's delivery sequence (arrive). When
// the lost delivery was the partition's last, none follows; so after a disruption (the host's
// connection reconnected, the consumption missed its heartbeats or saw its consumer's leader
// change) the host asks the consumer for its latest delivery, and one that has not arrived
// lostGrace later it takes for lost, as at a gap.

// lostGrace is how long findLost gives the deliveries the consumer reports sent to arrive before
// it takes the missing ones for lost. One taken for lost that was on its way costs a NAK: its
// copy is kept once (arrive).
const lostGrace = 500 * time.Millisecond

// disrupt asks the partition's watchConsumption to look for lost deliveries (findLost).
func (part *partition) disrupt() {
	select {
	case part.disrupted <- struct{}{}:
	default: // a look is asked for already
	}
}

// findLost looks, after a disruption of part's deliveries, for deliveries that never arrived: if
// the consumer's latest delivery under the partition's pin has not arrived lostGrace after the
// consumer reported it, the tenure goes on as after a gap (takeOver with lost): the requests of
// the pin's deliveries up to it that the host neither holds nor acknowledged are given back to
// the bus at once, and hold their conversations' later requests back until they come again. It
// gives up after the ack wait, past which the bus delivers the lost requests again by itself.
func (h *Host) findLost(ctx context.Context, part *partition) {
	h.mu.Lock()
	pin, cons := part.pin, part.cons
	h.mu.Unlock()
	if pin == "" || cons == nil {
		return // nothing delivered under this consumption yet: nothing to compare with
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.AckWait)
	defer cancel()
	var info *jetstream.ConsumerInfo
	log := h.log.With("agent", part.key.agent, "partition", part.key.n)
	if retry(ctx, log, "reading the partition's latest delivery", func() (err error) {
		info, err = cons.Info(ctx)
		return err
	}) != nil {
		return
	}
	if pinnedID(info) != pin {
		return // delivered under another pin since: its first delivery begins a new tenure
	}
	latest := deliverySeqs{seq: info.Delivered.Stream, consumerSeq: info.Delivered.Consumer}
	select {
	case <-ctx.Done():
		return
	case <-time.After(lostGrace):
	}
	h.mu.Lock()
	lost := part.pin == pin && !part.releasing && !part.fenced.Load() && part.delivered < latest.consumerSeq
	if lost {
		part.delivered = latest.consumerSeq
	}
	h.mu.Unlock()
	if lost {
		// The requests before latest.seq+1: latest's own too.
		h.takeOver(ctx, part, pin, &deliverySeqs{seq: latest.seq + 1, consumerSeq: latest.consumerSeq})
	}
}
