package agent

import (
	"context"
	"encoding/json"
	"fmt"
)

// rounds records the rounds of one chat (ChatWithTools) as durable steps of its request: each
// model answer and each tool call's result. An attempt after the first replays the rounds an
// earlier attempt recorded, without calling the model or the tools again.
type rounds struct {
	fx *effects // nil: nothing is recorded
	// off is set once a model answer could not be recorded: the rounds after it follow from it,
	// so this attempt neither replays nor records them; they still take their step numbers.
	off bool
}

// How roundStep got a round's outcome.
type roundHow int

const (
	roundUnrecorded roundHow = iota // ran, and is not recorded
	roundRecorded                   // ran, and is recorded
	roundReplayed                   // recorded by an earlier attempt, not run
	// ran, but another run of the request recorded the round first: the outcome is that run's
	roundRaced
)

// roundRecord is the journal's record of a round: its outcome, and how many steps and effects
// (Post, Call, Schedule, …) the round made while it ran, which a replay skips, so that the steps
// and effects after it keep their numbers.
type roundRecord[T any] struct {
	Value   T   `json:"value"`
	Steps   int `json:"steps,omitempty"`
	Effects int `json:"effects,omitempty"`
}

// roundStep runs fn as the chat's durable step name, or returns the outcome an earlier attempt
// recorded under the step's number. It differs from Step in what it records: only fn's result
// when fn says to keep it (keep) and it fits in MaxStepResult, never an error. A round that is
// not recorded runs again on a later attempt. Errors reading or writing the journal are
// Retryable, as Step's.
func roundStep[T any](ctx context.Context, rs *rounds, name string, fn func(context.Context) (v T, keep bool, err error)) (T, roundHow, error) {
	var zero T
	fx := rs.fx
	if fx == nil {
		v, _, err := fn(ctx)
		return v, roundUnrecorded, err
	}
	n, err := fx.nextStep()
	if err != nil { // more steps than a request may make: the rest of the chat is not recorded
		rs.off, fx = true, nil
	}
	if fx != nil && !rs.off {
		rec, err := fx.recorded(ctx, n)
		if err != nil {
			return zero, 0, Retryable(fmt.Errorf("reading step %q: %w", name, err))
		}
		if rec != nil {
			v, err := replayRound[T](fx, n, name, rec, fx.counts)
			return v, roundReplayed, err
		}
	}
	steps, effects := fx.counts()
	v, keep, err := fn(ctx)
	if err != nil || !keep || rs.off {
		return v, roundUnrecorded, err
	}
	inner, innerFx := fx.counts()
	data, err := json.Marshal(roundRecord[T]{Value: v, Steps: inner - steps, Effects: innerFx - effects})
	if err != nil || len(data) > MaxStepResult {
		return v, roundUnrecorded, nil
	}
	rec := &stepRecord{Name: name, Result: data}
	stored, err := fx.recordStep(ctx, n, rec)
	if err != nil {
		return zero, 0, Retryable(fmt.Errorf("recording step %q: %w", name, err))
	}
	if stored != rec { // another run of the request recorded the round first
		v, err := replayRound[T](fx, n, name, stored, func() (int, int) { return steps, effects })
		return v, roundRaced, err
	}
	return v, roundRecorded, nil
}

// replayRound returns the outcome recorded for step n, which a run of the request calls name,
// and numbers the attempt's next steps and effects after those the round made, counted from
// the numbers base gives.
func replayRound[T any](fx *effects, n int, name string, rec *stepRecord, base func() (steps, effects int)) (T, error) {
	var r roundRecord[T]
	if err := rec.mismatch(n, name); err != nil {
		return r.Value, err
	}
	if rec.Error != nil || json.Unmarshal(rec.Result, &r) != nil {
		return r.Value, fmt.Errorf("agent: step %q: its record is not a chat round's", name)
	}
	steps, effects := base()
	fx.mu.Lock()
	fx.steps, fx.n = steps+r.Steps, effects+r.Effects
	fx.mu.Unlock()
	return r.Value, nil
}

// counts returns the numbers of the attempt's last step and last effect; 0, 0 for nil.
func (fx *effects) counts() (steps, effects int) {
	if fx == nil {
		return 0, 0
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.steps, fx.n
}
