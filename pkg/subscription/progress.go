package subscription

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// progress is how far the delivery of one consumed message got. A history record may hold two
// events (a request and its reply), but the consumer knows only the message: it is acknowledged
// once every event is done, and retried as a whole. So when an event is done and a later one
// must be retried, the deliverer stores its progress in the subscriptions bucket, and the next
// delivery of the message goes on from there: an accepted event is not sent again, and each event
// counts its own attempts. Memory would not do: the retry goes to whichever host asks for the
// consumer's next message, and every workflow host does.
type progress struct {
	// Seq is the message's stream sequence.
	Seq uint64 `json:"seq"`
	// Done are the webhook-ids of its events that the receiver accepted or that were kept as
	// undelivered.
	Done []string `json:"done"`
	// From is the delivery of the message (its delivery count) that first tried the first event
	// not done.
	From uint64 `json:"from"`
	// stored is how many of Done the stored progress holds.
	stored int
}

// progressSave bounds storing a delivery's progress, also while its host stops.
const progressSave = 5 * time.Second

// done reports whether the event is done.
func (p *progress) done(eventID string) bool { return slices.Contains(p.Done, eventID) }

// attempts is the attempt of the first event not done that delivery n of the message makes.
func (p *progress) attempts(n uint64) uint64 {
	if n < p.From {
		return 1 // a consumer made anew counts deliveries from 1 again
	}
	return n - p.From + 1
}

// finish marks the event done in delivery n; the next event is first tried in the same delivery.
func (p *progress) finish(eventID string, n uint64) {
	p.Done = append(p.Done, eventID)
	p.From = n
}

// progressOf returns the delivery's progress of the message: what an earlier delivery stored, or
// none done. Only a message with more than one event, delivered before, can have any.
func (s *Store) progressOf(ctx context.Context, sub *Subscription, src string, md *jetstream.MsgMetadata, events int) *progress {
	p := &progress{Seq: md.Sequence.Stream, From: 1}
	if events < 2 || md.NumDelivered < 2 {
		return p
	}
	e, err := s.kv.Get(ctx, subject.SubscriptionProgressKey(sub.TenantID, sub.ID, src))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return p
	}
	var stored progress
	if err == nil {
		err = json.Unmarshal(e.Value(), &stored)
	}
	if err != nil {
		// Delivering again from the first event is what a host that died would do.
		s.cfg.Logger.Warn("reading the delivery's progress; delivering every event of the message",
			"tenant", sub.TenantID, "subscription", sub.ID, "seq", p.Seq, "err", err)
		return p
	}
	if stored.Seq != p.Seq {
		return p // another message's
	}
	stored.stored = len(stored.Done)
	return &stored
}

// saveProgress stores the progress if an event was done since it was read, so that the next
// delivery of the message goes on from there.
func (s *Store) saveProgress(ctx context.Context, sub *Subscription, src string, p *progress) {
	if len(p.Done) == p.stored {
		return
	}
	b, err := json.Marshal(p)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), progressSave)
		defer cancel()
		_, err = s.kv.Put(ctx, subject.SubscriptionProgressKey(sub.TenantID, sub.ID, src), b)
	}
	if err != nil {
		s.cfg.Logger.Warn("storing the delivery's progress; its events may be delivered again",
			"tenant", sub.TenantID, "subscription", sub.ID, "seq", p.Seq, "err", err)
		return
	}
	p.stored = len(p.Done)
}

// removeProgress deletes the subscription's delivery progress, where there is any.
func (s *Store) removeProgress(ctx context.Context, sub *Subscription) error {
	for _, src := range s.sources(sub) {
		key := subject.SubscriptionProgressKey(sub.TenantID, sub.ID, src.name)
		_, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err == nil {
			err = s.kv.Purge(ctx, key)
		}
		if err != nil {
			return fmt.Errorf("removing the subscription's delivery progress: %w", err)
		}
	}
	return nil
}
