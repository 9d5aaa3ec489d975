package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Bounds of durable steps (Step).
const (
	// MaxSteps bounds the steps of one request.
	MaxSteps = subject.MaxSteps
	// MaxStepName bounds a step's name, in bytes.
	MaxStepName = subject.MaxNameBytes
	// MaxStepResult bounds a step's result, encoded as JSON, in bytes.
	MaxStepResult = 256 << 10
)

// maxStepErrorText bounds each text of a recorded error: what a rerun gets back of it.
const maxStepErrorText = 1 << 10

// ErrStepMismatch means a run of a request called its steps in another order than the run that
// recorded them: step n has another name. The handler must call the same steps in the same
// order on every run of a request.
var ErrStepMismatch = errors.New("agent: step mismatch")

// Step runs fn as a durable step of the request being handled, and records its result: a run of
// the same request after this one (a retry after a Retryable error or a panic, a redelivery after
// its host died, another host that took the request over) gets the recorded result back without
// calling fn. fn's result is recorded as JSON, at most MaxStepResult bytes, and decoded into T
// on those runs.
//
// A permanent error from fn (not Retryable) is recorded too: later runs get an error of the same
// text back, an *Error or a *CallError with its status and message. A Retryable error is not
// recorded: the request is retried and the step runs again. A step whose host died while it ran
// runs again too: a step runs at least once, and once it is recorded, never again.
//
// A rerun starts from the instance state the request found; a replayed step gives the instance
// the state the step left (when it still has the one the step found) and completes it if the
// step called Complete. The posts, timers, calls and steps fn made are not made again, and those
// after the step keep their numbers. A step whose result and the state it left do not fit in one
// record together is not recorded, and runs again on a rerun.
//
// Steps are numbered in the order a run calls them, from one goroutine at a time; a run whose
// step of a number has another name than the recorded one gets ErrStepMismatch. Names are 1 to
// MaxStepName bytes of text, and a request makes at most MaxSteps steps. The record of a
// request's steps is removed once the request is answered.
//
// Step works in Chat, Data, File and webhook handlers, with the context they were given; it
// returns an error elsewhere. A step costs one write on its first run; a run that may find it
// recorded (a retry, a redelivery, a resumed request) reads it first. A request that makes no
// step costs nothing.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	inst, n, err := beginStep(ctx, name)
	if err != nil {
		return zero, err
	}
	fx := inst.fx
	rec, err := fx.recorded(ctx, n)
	if err != nil {
		return zero, Retryable(fmt.Errorf("reading step %q: %w", name, err))
	}
	if rec != nil {
		return replayStep[T](ctx, inst, n, name, rec, fx.counts)
	}
	steps, effects := fx.counts()
	mark := inst.mark()
	v, ferr := fn(ctx)
	if IsRetryable(ferr) {
		return v, ferr
	}
	rec, err = newStepRecord(name, v, ferr)
	if err != nil {
		return zero, err
	}
	inner, innerFx := fx.counts()
	rec.Steps, rec.Effects = inner-steps, innerFx-effects
	rec.StateBefore, rec.State, rec.Complete = inst.stepChanges(mark)
	stored, err := fx.recordStep(ctx, n, rec)
	if errors.Is(err, errStepTooLarge) && rec.State != nil {
		// The state the step left does not fit in its record: the step stays unrecorded, and a
		// rerun runs it again.
		fx.h.log.Warn("step not recorded: the instance state it left is too large; a rerun runs it again",
			"step", name, "stateBytes", len(rec.State))
		return v, ferr
	}
	if err != nil {
		return zero, Retryable(fmt.Errorf("recording step %q: %w", name, err))
	}
	if stored != rec { // another run of the request recorded the step first
		return replayStep[T](ctx, inst, n, name, stored, func() (int, int) { return steps, effects })
	}
	return v, ferr
}

// JournalEntry is a step the request being handled recorded (Journal): its name, and its result
// as JSON or its error (Err, as Step returns it again). A wait's entry has the Event that ended
// it, as JSON, for its result.
type JournalEntry struct {
	Name   string
	Result json.RawMessage
	Err    error
}

// Journal returns the steps the request being handled recorded so far, in order, and numbers the
// handler's next Step or Wait after them. It serves handlers whose steps run elsewhere and are
// replayed there (pkg/remote: a remote agent's kit replays the journal, and the host records
// each new step with Step). A request's first attempt, unless it resumed after a wait, has
// recorded nothing and reads nothing. Call it before any Step of the attempt.
func Journal(ctx context.Context) ([]JournalEntry, error) {
	inst := handlerInstance(ctx)
	if inst == nil || inst.fx == nil {
		return nil, errors.New("agent: Journal needs the context of a running handler")
	}
	fx := inst.fx
	if !fx.replaying() {
		return nil, nil
	}
	var out []JournalEntry
	for n := 1; n <= MaxSteps; n++ {
		rec, err := fx.readStep(ctx, n)
		if err != nil {
			return nil, Retryable(fmt.Errorf("reading the journal: %w", err))
		}
		if rec == nil {
			break
		}
		e := JournalEntry{Name: rec.Name, Result: rec.Result}
		if rec.Error != nil {
			e.Err = rec.Error.err()
		}
		out = append(out, e)
	}
	fx.mu.Lock()
	fx.steps = len(out)
	if len(out) > 0 {
		fx.stepped = true
	}
	fx.mu.Unlock()
	return out, nil
}

// beginStep finds the instance of a handler's context and numbers its request's next step.
func beginStep(ctx context.Context, name string) (*Instance, int, error) {
	inst := handlerInstance(ctx)
	if inst == nil || inst.fx == nil {
		return nil, 0, errors.New("agent: Step, Wait and Sleep need the context of a running handler")
	}
	if err := subject.CheckName("", name); err != nil {
		return nil, 0, fmt.Errorf("agent: step name %s: %w", subject.Quote(name), err)
	}
	n, err := inst.fx.nextStep()
	if err != nil {
		return nil, 0, fmt.Errorf("agent: step %q: %w", name, err)
	}
	return inst, n, nil
}

// errStepTooLarge means a step's record is larger than the journal keeps.
var errStepTooLarge = errors.New("the step's record is too large")

// handlerInstance is the instance of the handler a context belongs to (a Chat, Data, File or
// webhook handler's), nil for another context.
func handlerInstance(ctx context.Context) *Instance {
	if m := MessageFrom(ctx); m != nil {
		return m.inst
	}
	if r, _ := ctx.Value(webhookKey{}).(*WebhookRequest); r != nil {
		return r.inst
	}
	return nil
}

// webhookKey is the context key of the WebhookRequest a webhook handler's context belongs to.
type webhookKey struct{}

// nextStep returns the number of the attempt's next step, and marks the request as one that
// keeps steps.
func (fx *effects) nextStep() (int, error) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if fx.steps >= MaxSteps {
		return 0, fmt.Errorf("a request makes at most %d steps", MaxSteps)
	}
	fx.steps++
	fx.stepped = true
	return fx.steps, nil
}

// usedSteps reports whether a handler of the request called Step.
func (fx *effects) usedSteps() bool {
	if fx == nil {
		return false
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.stepped
}

// stepRecord is what the journal keeps of a step: its name, and its result or its error. A
// Step's record also keeps what a replay must do as the step did: the steps and effects (Post,
// Call, Schedule, …) fn made, which a replay skips so that those after it keep their numbers,
// and the state fn left (with the hash of the state it found) and whether it called Complete.
type stepRecord struct {
	Name        string          `json:"name"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       *stepError      `json:"error,omitempty"`
	Steps       int             `json:"steps,omitempty"`
	Effects     int             `json:"effects,omitempty"`
	StateBefore string          `json:"stateBefore,omitempty"`
	State       json.RawMessage `json:"state,omitempty"`
	Complete    bool            `json:"complete,omitempty"`
}

// stepError is a recorded error: its text, and the status, message and problem type of an
// *Error or a *CallError.
type stepError struct {
	Text    string `json:"text"`
	Status  int    `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Slug    string `json:"slug,omitempty"`
	Kind    string `json:"kind,omitempty"` // a *CallError's sentinel, by its text
	Call    bool   `json:"call,omitempty"` // a *CallError, else an *Error when Status is set
}

// newStepRecord is the record of a step's outcome: v, or ferr when not nil.
func newStepRecord[T any](name string, v T, ferr error) (*stepRecord, error) {
	rec := &stepRecord{Name: name}
	if ferr != nil {
		rec.Error = newStepError(ferr)
		return rec, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("agent: step %q: encoding its result: %w", name, err)
	}
	if len(data) > MaxStepResult {
		return nil, fmt.Errorf("agent: step %q: its result is %d bytes encoded, more than %d", name, len(data), MaxStepResult)
	}
	rec.Result = data
	return rec, nil
}

// newStepError is the record of a step's permanent error.
func newStepError(err error) *stepError {
	se := &stepError{Text: cutText(err.Error())}
	var (
		he *Error
		ce *CallError
	)
	switch {
	case errors.As(err, &ce):
		se.Call, se.Status, se.Slug, se.Message = true, ce.Status, ce.Slug, cutText(ce.Message)
		if ce.kind != nil {
			se.Kind = ce.kind.Error()
		}
	case errors.As(err, &he):
		se.Status, se.Message = he.Status, cutText(he.Message)
		if he.Err != nil {
			se.Text = cutText(he.Err.Error())
		}
	}
	return se
}

// cutText cuts s to maxStepErrorText bytes at a character's start.
func cutText(s string) string {
	if len(s) <= maxStepErrorText {
		return s
	}
	return strings.ToValidUTF8(s[:maxStepErrorText], "") + "…"
}

// callErrorKinds are the sentinels a *CallError wraps, found again by their text.
var callErrorKinds = []error{ErrPeerNotFound, ErrCallTimeout, ErrCallFailed, ErrCallParams, ErrCallDeadLettered, ErrCallWaits, ErrCallCycle, ErrCallDepth, ErrOtherTenant}

// err is the error a rerun gets for the recorded one.
func (se *stepError) err() error {
	switch {
	case se.Call:
		ce := &CallError{Status: se.Status, Slug: se.Slug, Message: se.Message, kind: ErrCallFailed}
		for _, k := range callErrorKinds {
			if k.Error() == se.Kind {
				ce.kind = k
			}
		}
		return ce
	case se.Status != 0:
		return &Error{Status: se.Status, Message: se.Message, Err: errors.New(se.Text)}
	}
	return errors.New(se.Text)
}

// mismatch is ErrStepMismatch, naming both steps, when the record of step n is not of name.
func (rec *stepRecord) mismatch(n int, name string) error {
	if rec.Name == name {
		return nil
	}
	return fmt.Errorf("%w: step %d is %q in this run, but %q in the run that recorded it", ErrStepMismatch, n, name, rec.Name)
}

// replayStep returns the outcome recorded for step n, which a run of the request calls name, and
// does to the instance what the step did: it gives it the state the step left and completes it
// when the step did, and numbers the attempt's next steps and effects after those the step made,
// counted from the numbers base gives.
func replayStep[T any](ctx context.Context, inst *Instance, n int, name string, rec *stepRecord, base func() (steps, effects int)) (T, error) {
	var v T
	if err := rec.mismatch(n, name); err != nil {
		return v, err
	}
	if rec.State != nil {
		if err := inst.replayState(ctx, rec.StateBefore, rec.State); err != nil {
			return v, Retryable(fmt.Errorf("replaying step %q: %w", name, err))
		}
	}
	if rec.Complete {
		inst.Complete()
	}
	steps, effects := base()
	fx := inst.fx
	fx.mu.Lock()
	fx.steps, fx.n = steps+rec.Steps, effects+rec.Effects
	fx.mu.Unlock()
	if rec.Error != nil {
		return v, rec.Error.err()
	}
	if err := json.Unmarshal(rec.Result, &v); err != nil {
		return v, fmt.Errorf("agent: step %q: decoding its recorded result: %w", name, err)
	}
	return v, nil
}

// stepSubject is the journal subject of the request's step n.
func (fx *effects) stepSubject(n int) string {
	return subject.Step(fx.req.GetTenantId(), fx.req.GetWorkflowId(), fx.req.GetRequestId(), n)
}

// replaying reports whether the attempt may find steps recorded (fx.replay: a retry, a
// redelivery, a request resumed after a wait). A first attempt has recorded nothing.
func (fx *effects) replaying() bool {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.replay
}

// recorded returns the record of the request's step n, nil when there is none. Only an attempt
// that may find steps recorded (replaying) reads the journal; a first attempt reads nothing and
// only checks that it may still act (Host.mayAct) before the step runs, as a read would have told
// a host whose partition was taken over.
func (fx *effects) recorded(ctx context.Context, n int) (*stepRecord, error) {
	if fx.replaying() {
		return fx.readStep(ctx, n)
	}
	return nil, fx.h.mayAct(ctx)
}

// readStep reads the record of the request's step n from the stream's leader, nil when there is
// none, retrying while the bus recovers.
func (fx *effects) readStep(ctx context.Context, n int) (*stepRecord, error) {
	var raw *jetstream.RawStreamMsg
	err := retry(ctx, fx.h.log, "reading a step", func() (err error) {
		actx, cancel := bus.Attempt(ctx)
		defer cancel()
		raw, err = bus.LeaderLast(actx, fx.h.js.Conn(), subject.StepsStream, fx.stepSubject(n))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			raw, err = nil, nil
		}
		return err
	})
	if err != nil || raw == nil {
		return nil, err
	}
	var rec stepRecord
	if err := json.Unmarshal(raw.Data, &rec); err != nil {
		return nil, fmt.Errorf("decoding the record: %w", err)
	}
	return &rec, nil
}

// recordStep stores rec as the request's step n, unless another run of the request recorded the
// step first: it returns the record that stands, rec or the other.
func (fx *effects) recordStep(ctx context.Context, n int, rec *stepRecord) (*stepRecord, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding the record: %w", err)
	}
	if len(data) > bus.MaxStepRecord {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", errStepTooLarge, len(data), bus.MaxStepRecord)
	}
	// The first try carries a de-duplication id; a repeat of a record purged since (a dead letter
	// replayed within the de-duplication window) is stored by the second, without it.
	for _, dedupe := range []bool{true, false} {
		stored, err := fx.publishStep(ctx, n, data, dedupe)
		if err != nil {
			return nil, err
		}
		if stored {
			return rec, nil
		}
		other, err := fx.readStep(ctx, n)
		if err != nil || other != nil {
			return other, err
		}
	}
	return nil, errors.New("the record was neither stored nor found")
}

// publishStep publishes the record of step n, expecting the step's subject empty, retrying while
// the bus recovers. It reports false when the stream did not store it: another record is there
// (a conflict), or it is a duplicate of one.
func (fx *effects) publishStep(ctx context.Context, n int, data []byte, dedupe bool) (stored bool, err error) {
	msg := &nats.Msg{Subject: fx.stepSubject(n), Data: data, Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}}
	if dedupe {
		req := fx.req
		msg.Header.Set(subject.HeaderMsgID, subject.StepMsgID(req.GetTenantId(), req.GetWorkflowId(), req.GetRequestId(), n))
	}
	err = retry(ctx, fx.h.log, "recording a step", func() error {
		if err := fx.h.mayAct(ctx); err != nil {
			return err
		}
		actx, cancel := bus.Attempt(ctx)
		defer cancel()
		ack, err := bus.Publish(actx, fx.h.js, msg)
		switch {
		case bus.IsConflict(err):
			return nil
		case err != nil:
			return err
		}
		stored = !ack.Duplicate
		return nil
	})
	return stored, err
}

// dropSteps removes the journal of a request that made steps, once it is answered. A failure is
// logged: the stream's age limit removes the journal in the end.
func (h *Host) dropSteps(ctx context.Context, log *slog.Logger, fx *effects) {
	if !fx.usedSteps() || h.mayAct(ctx) != nil {
		return
	}
	req := fx.req
	actx, cancel := bus.Attempt(ctx)
	defer cancel()
	err := h.res.Steps.Purge(actx, jetstream.WithPurgeSubject(subject.RequestSteps(req.GetTenantId(), req.GetWorkflowId(), req.GetRequestId())))
	if err != nil {
		log.Warn("removing the request's steps; the journal's age limit will", "err", err)
	}
}
