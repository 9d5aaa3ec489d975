package subscription

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// ErrEventNotFound means the subscription has no undelivered event with that id.
var ErrEventNotFound = errors.New("no such undelivered event")

// Undelivered is an event a subscription's receiver did not accept within the retry period.
type Undelivered struct {
	// ID is the undelivered event's sequence in its stream: stable, increasing with time.
	ID uint64 `json:"id"`
	// EventID is the event's webhook-id.
	EventID string `json:"eventId"`
	Type    string `json:"type"`
	// Error is what the last attempt got.
	Error    string       `json:"error"`
	Attempts int          `json:"attempts"`
	FailedAt timefmt.Time `json:"failedAt"`
	// Event is the body that was POSTed.
	Event json.RawMessage `json:"event"`
}

// Page sizes of ListUndelivered.
const (
	DefaultLimit = bus.KeptDefaultLimit
	MaxLimit     = bus.KeptMaxLimit
)

func undeliveredOf(raw *jetstream.RawStreamMsg) Undelivered {
	u := Undelivered{
		ID: raw.Sequence, EventID: raw.Header.Get(subject.HeaderEventID), Type: raw.Header.Get(subject.HeaderEventType),
		Error: raw.Header.Get(subject.HeaderError), Attempts: bus.Attempts(raw), FailedAt: timefmt.Of(raw.Time),
	}
	if json.Valid(raw.Data) {
		u.Event = json.RawMessage(raw.Data)
	}
	return u
}

// ListUndelivered returns a page of the subscription's undelivered events, oldest first, after
// the id after (0: from the oldest), and the id to continue after (0 when there are no more).
func (s *Store) ListUndelivered(ctx context.Context, tenant, id string, after uint64, limit int) ([]Undelivered, uint64, error) {
	if _, err := s.Get(ctx, tenant, id); err != nil {
		return nil, 0, err
	}
	raws, next, err := s.undelivered.Page(ctx, subject.Undelivered(tenant, id), after, limit)
	if err != nil {
		return nil, 0, err
	}
	out := make([]Undelivered, 0, len(raws))
	for _, raw := range raws {
		out = append(out, undeliveredOf(raw))
	}
	return out, next, nil
}

// getUndelivered reads one undelivered event of the subscription: another subscription's, or
// another tenant's, is not found.
func (s *Store) getUndelivered(ctx context.Context, sub *Subscription, seq uint64) (*jetstream.RawStreamMsg, error) {
	return s.undelivered.Get(ctx, seq, subject.Undelivered(sub.TenantID, sub.ID))
}

// Replay delivers an undelivered event once, now, as it was (same webhook-id, a new signature and
// timestamp), and removes it when the receiver accepted it. A failed attempt returns the error
// (a *StatusError when the receiver answered) and keeps the event.
func (s *Store) Replay(ctx context.Context, tenant, id string, seq uint64) (Undelivered, error) {
	sub, err := s.Get(ctx, tenant, id)
	if err != nil {
		return Undelivered{}, err
	}
	raw, err := s.getUndelivered(ctx, &sub, seq)
	if err != nil {
		return Undelivered{}, err
	}
	u := undeliveredOf(raw)
	if err := s.post(ctx, &sub, Event{ID: u.EventID, Type: u.Type, Body: raw.Data}); err != nil {
		return u, err
	}
	if err := s.undelivered.Remove(ctx, tenant, raw); err != nil && !errors.Is(err, ErrEventNotFound) { // not found: removed meanwhile
		return u, fmt.Errorf("delivered, then %w", err)
	}
	return u, nil
}

// Discard removes an undelivered event.
func (s *Store) Discard(ctx context.Context, tenant, id string, seq uint64) error {
	sub, err := s.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	raw, err := s.getUndelivered(ctx, &sub, seq)
	if err != nil {
		return err
	}
	return s.undelivered.Remove(ctx, tenant, raw)
}
