package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/subject"
)

// MaxWait bounds how long a request waits (For.Timeout): a day less than the inbox keeps a
// request by default (7 days), which is also how long a waiting request's journal is kept.
const MaxWait = 6 * 24 * time.Hour

// ErrWaiting is what Wait and Sleep return on the run that parks the request: the handler returns
// it (as it returns any error), and the request waits. Its handler runs again, with its steps
// recorded, once the wait ends.
var ErrWaiting = errors.New("agent: the request waits for an event")

// For says what ends a wait (Wait): the next Chat message of the request's participant (Chat), a
// Data call of one of Methods by the participant, a signal of one of Signals sent to the
// conversation over the API, or the deadline (Timeout after the wait began). At least one is set.
type For struct {
	Chat    bool
	Methods []string
	// Signals are names of signals (1-256 bytes of text each), sent with
	// POST /api/v1/admin/tenants/{tenantId}/messaging/signal.
	Signals []string
	// Timeout is at most MaxWait; zero means MaxWait.
	Timeout time.Duration
}

// The types of Event.
const (
	EventChat    = "chat"
	EventData    = "data"
	EventSignal  = "signal"
	EventTimeout = "timeout"
)

// Event is what ended a wait: a Chat message (Text), a Data call (Method and Data), a signal (its
// name in Method, and Data), or the deadline (Type EventTimeout).
type Event struct {
	Type          string          `json:"type"`
	Text          string          `json:"text,omitempty"`
	Method        string          `json:"method,omitempty"`
	Data          json.RawMessage `json:"data,omitempty"`
	ParticipantID string          `json:"participantId,omitempty"`
	RequestID     string          `json:"requestId,omitempty"`
	At            time.Time       `json:"at"`
}

// TimedOut reports whether the wait ended at its deadline.
func (e Event) TimedOut() bool { return e.Type == EventTimeout }

// Wait parks the request until an event ends the wait (f): the handler returns the ErrWaiting it
// gets, the caller is answered that the request waits (202), and nothing of the request is held
// in memory: no goroutine, no handler slot, no unacknowledged delivery. The later requests of the
// conversation queue behind it (answered 202 too), except one that ends the wait. When the event
// comes, the request runs again, its steps replayed from the journal, and this Wait returns the
// event; the handler's answer then goes to the thread, and to the caller of the message that
// ended the wait when both are Chat, Data or File messages. The held requests run after it, in
// order.
//
// A wait is a step of the request (Step): it has a name, is numbered with the steps, and must be
// called in the same order on every run. A handler waits for one thing at a time. Wait works
// in Chat, Data, File and webhook handlers, with the context they were given.
func Wait(ctx context.Context, name string, f For) (Event, error) {
	if err := f.check(); err != nil {
		return Event{}, err
	}
	inst, n, err := beginStep(ctx, name)
	if err != nil {
		return Event{}, err
	}
	fx := inst.fx
	rec, err := fx.recorded(ctx, n)
	if err != nil {
		return Event{}, Retryable(fmt.Errorf("reading wait %q: %w", name, err))
	}
	if rec != nil {
		if err := rec.mismatch(n, name); err != nil {
			return Event{}, err
		}
		var ev Event
		if err := json.Unmarshal(rec.Result, &ev); err != nil {
			return Event{}, fmt.Errorf("agent: wait %q: decoding its event: %w", name, err)
		}
		return ev, nil
	}
	fx.mu.Lock()
	if fx.wait == nil {
		fx.wait = &pendingWait{step: n, name: name, f: f}
	}
	fx.mu.Unlock()
	return Event{}, fmt.Errorf("%w (%q)", ErrWaiting, name)
}

// Sleep parks the request for d, as Wait does with only a deadline: the handler returns the
// ErrWaiting it gets, and runs again after d, when Sleep returns nil. The conversation's later
// requests queue behind it meanwhile. A d of zero or less returns nil at once. The deadline is a
// JetStream timer: it is kept to the second, and survives the restart of every process.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	_, err := Wait(ctx, "sleep", For{Timeout: d})
	return err
}

// check tells whether f is a wait's condition.
func (f For) check() error {
	switch {
	case !f.Chat && len(f.Methods) == 0 && len(f.Signals) == 0 && f.Timeout == 0:
		return errors.New("agent: a wait needs Chat, Methods, Signals or a Timeout")
	case f.Timeout < 0 || f.Timeout > MaxWait:
		return fmt.Errorf("agent: a wait's Timeout is 0 to %v", MaxWait)
	}
	for _, m := range f.Methods {
		if m == "" || subject.CheckName("", m) != nil {
			return fmt.Errorf("agent: wait for method %s: not a method name", subject.Quote(m))
		}
	}
	for _, sig := range f.Signals {
		if sig == "" || subject.CheckName("", sig) != nil {
			return fmt.Errorf("agent: wait for signal %s: not a signal name", subject.Quote(sig))
		}
	}
	return nil
}

// pendingWait is the wait a run of a request asked for (Wait).
type pendingWait struct {
	step int
	name string
	f    For
}

// waiting returns the wait the attempt asked for, nil when none.
func (fx *effects) waiting() *pendingWait {
	if fx == nil {
		return nil
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.wait
}

// methodsFolded is f's methods as a Data call's method is matched: whatever their case.
func (f For) methodsFolded() []string {
	out := make([]string, 0, len(f.Methods))
	for _, m := range f.Methods {
		if m = strings.ToLower(m); !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}
