package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/instance"
)

// Instance is the workflow instance a handler runs on: its identity, its run, and the agent's
// state, which survives restarts and is shared by every participant of the instance.
//
// Its methods are safe for concurrent use while the handler that received it runs; it must not
// be used after the handler returned.
type Instance struct {
	store *instance.Store

	mu       sync.Mutex
	rec      instance.Record
	complete bool
}

// WorkflowID returns the instance's workflow id, {tenantId}:{agentName}:{workflowType}:{activationName}.
func (i *Instance) WorkflowID() string { return i.rec.WorkflowID }

// Tenant returns the tenant the instance belongs to.
func (i *Instance) Tenant() string { return i.rec.Tenant }

// RunID returns the id of the current run: new after the instance completed and a message
// started it again, and after continue-as-new.
func (i *Instance) RunID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.rec.RunID
}

// State decodes the current state into v. A fresh run has no state and leaves v as it is.
func (i *Instance) State(v any) error {
	i.mu.Lock()
	raw := i.rec.State
	i.mu.Unlock()
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decoding state: %w", err)
	}
	return nil
}

// UpdateRawState changes the state atomically: fn gets the current JSON state (nil for none) and
// returns the new one. The change is written at once with compare-and-set; when another
// handler changed the state in between, fn is called again on the newer state. fn must have no
// side effects beyond computing the new state.
func (i *Instance) UpdateRawState(ctx context.Context, fn func(old json.RawMessage) (json.RawMessage, error)) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for {
		next, err := fn(i.rec.State)
		if err != nil {
			return err
		}
		rec := i.rec
		rec.State = next
		rec.LastActiveAt = time.Now().UTC()
		saved, err := i.store.Put(ctx, rec)
		if err == nil {
			i.rec = saved
			return nil
		}
		if !errors.Is(err, instance.ErrConflict) {
			return fmt.Errorf("saving state: %w", err)
		}
		if err := i.reloadLocked(ctx); err != nil {
			return err
		}
	}
}

// UpdateState changes the instance's state atomically: fn gets a pointer to the current state
// (the zero T for a fresh run) and modifies it. See Instance.UpdateRawState. It returns the state
// as saved.
func UpdateState[T any](ctx context.Context, inst *Instance, fn func(s *T) error) (T, error) {
	var saved T
	err := inst.UpdateRawState(ctx, func(old json.RawMessage) (json.RawMessage, error) {
		var s T
		if len(old) > 0 {
			if err := json.Unmarshal(old, &s); err != nil {
				return nil, fmt.Errorf("decoding state: %w", err)
			}
		}
		if err := fn(&s); err != nil {
			return nil, err
		}
		saved = s
		return json.Marshal(s)
	})
	return saved, err
}

// Complete marks the instance completed once the handler returns (after its reply is sent). The
// next message to the workflow starts a new run with fresh state.
func (i *Instance) Complete() {
	i.mu.Lock()
	i.complete = true
	i.mu.Unlock()
}

func (i *Instance) reloadLocked(ctx context.Context) error {
	rec, err := i.store.Get(ctx, i.rec.Tenant, i.rec.WorkflowID)
	if err != nil {
		return fmt.Errorf("reloading instance: %w", err)
	}
	i.rec = rec
	return nil
}
