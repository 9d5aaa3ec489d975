package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/instance"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Instance is the workflow instance a handler runs on: its identity, its run, and the agent's
// state, which survives restarts and is shared by every participant of the instance.
//
// Its methods are safe for concurrent use while the handler that received it runs; it must not
// be used after the handler returned.
type Instance struct {
	live *liveInstance
	// requestID is the request the handler runs for: its state changes are marked with it.
	requestID string
	// wrote is set once this attempt changed the state.
	wrote bool
	// changes counts the state changes and Complete calls of the handler's attempts, so that a
	// chat tells a tool call that changed the instance (toolRound).
	changes atomic.Int64
	// fx sends what the handler sends besides its reply (posts, timers).
	fx *effects

	mu       sync.Mutex
	complete bool
}

// liveInstance is a host's in-memory copy of an instance record while the instance is in use
// (and for a while after): every handler running on the instance shares it, so they see each
// other's state changes, and a busy instance is not read from the bucket on each request. The
// host writes its counts once the instance has been idle for liveIdle, and drops it once idle
// for liveKeep (liveSet.sweep).
type liveInstance struct {
	store  *instance.Store
	key    liveKey
	hostID string
	// mayAct says whether the request of a context may write now (Host.mayAct).
	mayAct func(context.Context) error

	mu     sync.Mutex
	loaded bool
	// gen is the liveSet's gen when rec was read: a copy read before the host's last tenure
	// began is read again (liveSet.stale).
	gen   uint64
	found bool
	rec   instance.Record
	// size is about what the copy holds (liveInstance.bytes), set with rec.
	size atomic.Int64
	// dirty means rec holds event counts or activity times not written yet; they are written
	// with the next write of the record, or when the host drops it.
	dirty bool

	// cursors are the history append cursors of the instance's conversations, by participant.
	cursors map[string]*history.Cursor
	// stale are cursors that met a conflict, until the next use reads the thread anew and
	// carries what they knew to be stored (history.Cursor.Carry).
	stale map[string]*history.Cursor
	// kept are the requests with a kept result finished here lately; nil before the first.
	kept *keptRing

	// users and idleSince are guarded by the host's live map lock.
	users     int
	idleSince time.Time
}

type liveKey struct{ tenant, workflowID string }

// WorkflowID returns the instance's workflow id, {tenantId}:{agentName}:{workflowType}:{activationName}.
func (i *Instance) WorkflowID() string { return i.live.key.workflowID }

// HostID returns the id of the workflow host the handler runs on (HostConfig.ID).
func (i *Instance) HostID() string { return i.live.hostID }

// Tenant returns the tenant the instance belongs to.
func (i *Instance) Tenant() string { return i.live.key.tenant }

// RunID returns the id of the current run: new after the instance completed and a message
// started it again, and after continue-as-new.
func (i *Instance) RunID() string {
	i.live.mu.Lock()
	defer i.live.mu.Unlock()
	return i.live.rec.RunID
}

// State decodes the current state into v. A fresh run has no state and leaves v as it is.
func (i *Instance) State(v any) error {
	i.live.mu.Lock()
	raw := i.live.rec.State
	i.live.mu.Unlock()
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decoding state: %w", err)
	}
	return nil
}

// UpdateRawState changes the state atomically: fn gets the current JSON state (nil for none) and
// returns the new one. The change is written at once with compare-and-set; when the record
// changed in between (another host, an operator), fn is called again on the newer state, after
// a short pause (bus.ConflictBackoff), for as long as ctx and bus.ConflictPatience allow. fn
// must have no side effects beyond computing the new state.
func (i *Instance) UpdateRawState(ctx context.Context, fn func(old json.RawMessage) (json.RawMessage, error)) error {
	return i.changeState(ctx, func(base json.RawMessage) (json.RawMessage, bool, error) {
		next, err := fn(base)
		return next, true, err
	})
}

// changeState is UpdateRawState's compare-and-set loop: fn gets the state to build on and
// returns the new one, and whether to write it at all.
func (i *Instance) changeState(ctx context.Context, fn func(base json.RawMessage) (next json.RawMessage, write bool, err error)) error {
	l := i.live
	l.mu.Lock()
	defer l.mu.Unlock()
	var backoff bus.ConflictBackoff
	for {
		base := l.rec.State
		a := l.rec.Applying
		if a != nil && a.RequestID == i.requestID && !i.wrote {
			// An earlier attempt or stored copy of this request changed the state already (and
			// was not rewound, or the rewind read a stale record): build on the state it found,
			// so that the change counts once.
			base = a.Before
		}
		next, write, err := fn(base)
		if err != nil || !write {
			return err
		}
		rec := l.rec
		rec.State = next
		rec.LastActiveAt = time.Now().UTC()
		if a == nil || a.RequestID != i.requestID {
			rec.Applying = &instance.Applying{RequestID: i.requestID, Before: l.rec.State}
		}
		err = l.writeLocked(ctx, rec)
		if err == nil {
			i.wrote = true
			i.changes.Add(1)
			return nil
		}
		if errors.Is(err, errFenced) {
			return fmt.Errorf("saving state: %w", err)
		}
		if errors.Is(err, instance.ErrConflict) {
			if werr := backoff.Wait(ctx); werr != nil {
				return fmt.Errorf("saving state: %w: %w", err, werr)
			}
		} else {
			// Not written (writeLocked checked): try again while the bus recovers, on the state
			// as stored now.
			select {
			case <-ctx.Done():
				return fmt.Errorf("saving state: %w", err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err := retryUntil(ctx, func() error { return l.reloadLocked(ctx) }); err != nil {
			return fmt.Errorf("saving state: %w", err)
		}
	}
}

// stateMark is what a durable step notes of the instance before it runs, to tell what it
// changed (Instance.stepChanges).
type stateMark struct {
	state    json.RawMessage
	changes  int64
	complete bool
}

// mark notes the instance before a step runs.
func (i *Instance) mark() stateMark {
	i.live.mu.Lock()
	state := i.live.rec.State
	i.live.mu.Unlock()
	return stateMark{state: state, changes: i.changes.Load(), complete: i.completing()}
}

// stepChanges tells what the instance changed since m: the state it has now, with the hash of
// the state m found (nil when the state is unchanged), and whether Complete was called.
func (i *Instance) stepChanges(m stateMark) (before string, after json.RawMessage, complete bool) {
	complete = i.completing() && !m.complete
	if i.changes.Load() == m.changes {
		return "", nil, complete
	}
	i.live.mu.Lock()
	state := i.live.rec.State
	i.live.mu.Unlock()
	if bytes.Equal(state, m.state) {
		return "", nil, complete
	}
	if state == nil {
		state = json.RawMessage("null")
	}
	return stateHash(m.state), state, complete
}

// stateHash names a state by its content, for replayState.
func stateHash(state json.RawMessage) string {
	sum := sha256.Sum256(state)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// replayState gives the instance the state a recorded step left (after), when it has the state
// the step found (the hash before): a rerun that replays the step without running it changes
// the state as the step did. A state that is neither (another request changed it meanwhile) is
// kept.
func (i *Instance) replayState(ctx context.Context, before string, after json.RawMessage) error {
	return i.changeState(ctx, func(base json.RawMessage) (json.RawMessage, bool, error) {
		if bytes.Equal(base, after) || stateHash(base) != before {
			return nil, false, nil
		}
		return after, true, nil
	})
}

// rewind undoes the state change of an earlier attempt of the handler's request before it runs
// again: when the request was the last to change the state, the state goes back to what it was
// before, so that a request that crashed its host after changing the state, or that failed and
// is retried, changes it once. (When a request of another conversation of the instance changed
// the state since, the earlier attempt's change stays: it cannot be told apart any more.) A write
// that meets another's (a compare-and-set conflict) pauses a little (bus.ConflictBackoff) and
// reads the record again, for as long as ctx and bus.ConflictPatience allow.
func (i *Instance) rewind(ctx context.Context) error {
	l := i.live
	l.mu.Lock()
	defer l.mu.Unlock()
	// The copy in memory may be older than what the earlier attempt wrote on another host.
	if err := l.reloadLocked(ctx); err != nil {
		return err
	}
	var backoff bus.ConflictBackoff
	for {
		a := l.rec.Applying
		if a == nil || a.RequestID != i.requestID {
			return nil
		}
		rec := l.rec
		rec.State = a.Before
		rec.Applying = nil
		err := l.writeLocked(ctx, rec)
		if err == nil {
			return nil
		}
		if !errors.Is(err, instance.ErrConflict) {
			return fmt.Errorf("undoing an earlier attempt's state change: %w", err)
		}
		if werr := backoff.Wait(ctx); werr != nil {
			return fmt.Errorf("undoing an earlier attempt's state change: %w: %w", err, werr)
		}
		if err := retryUntil(ctx, func() error { return l.reloadLocked(ctx) }); err != nil {
			return fmt.Errorf("undoing an earlier attempt's state change: %w", err)
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
	i.changes.Add(1)
}

func (i *Instance) completing() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.complete
}

// writeLocked writes rec with compare-and-set against the revision last seen.
func (l *liveInstance) writeLocked(ctx context.Context, rec instance.Record) error {
	if err := l.mayAct(ctx); err != nil {
		return err
	}
	if !l.found {
		rec.Revision, rec.Size = 0, 0
	}
	rec.WriteID = nuid.Next()
	actx, cancel := bus.Attempt(ctx)
	saved, err := l.store.Put(actx, rec)
	cancel()
	if err != nil && !errors.Is(err, instance.ErrConflict) {
		// The outcome is unknown (a timeout while the cluster elects a leader, say): the write
		// may have landed. Read the record back, retrying while the bus recovers, and keep what
		// is stored; only a write that did not land is an error (the caller tries again).
		rerr := retryUntil(ctx, func() error { return l.reloadLocked(ctx) })
		if rerr == nil && l.found && l.rec.WriteID == rec.WriteID {
			l.store.Landed(rec, l.rec)
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	l.rec, l.found, l.dirty = saved, true, false
	l.size.Store(int64(len(saved.State)))
	return nil
}

// bytes is about what the copy holds in memory: its state and liveBaseBytes.
func (l *liveInstance) bytes() int { return liveBaseBytes + int(l.size.Load()) }

// retryUntil calls fn until it succeeds or ctx ends, backing off up to a second (reloadPolicy).
func retryUntil(ctx context.Context, fn func() error) error {
	tries := reloadPolicy.Start()
	for {
		err := fn()
		if err == nil || errors.Is(err, errFenced) {
			return err
		}
		if werr := tries.Wait(ctx); werr != nil {
			return errors.Join(err, werr)
		}
	}
}

// reloadLocked reads the record from the bucket, dropping unwritten counts.
func (l *liveInstance) reloadLocked(ctx context.Context) error {
	actx, cancel := bus.Attempt(ctx)
	rec, err := l.store.Get(actx, l.key.tenant, l.key.workflowID)
	cancel()
	switch {
	case errors.Is(err, instance.ErrNotFound):
		l.rec, l.found = instance.Record{Tenant: l.key.tenant, WorkflowID: l.key.workflowID}, false
	case err != nil:
		return fmt.Errorf("reloading instance: %w", err)
	default:
		l.rec, l.found = rec, true
	}
	l.loaded, l.dirty = true, false
	l.size.Store(int64(len(l.rec.State)))
	return nil
}

// needsFlush reports whether the record has counts not written yet.
func (l *liveInstance) needsFlush() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dirty && l.found
}

// flush writes unwritten counts. A conflict means someone else wrote the record meanwhile; the
// counts are dropped then (they only pace continue-as-new).
func (l *liveInstance) flush(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.dirty || !l.found {
		return nil
	}
	err := l.writeLocked(ctx, l.rec)
	if errors.Is(err, instance.ErrConflict) {
		l.dirty = false
		return nil
	}
	return err
}

// cursor returns the history append cursor of a conversation of the instance, reading it from the
// stream the first time. Only the conversation's own (serial) handling uses it.
func (l *liveInstance) cursor(ctx context.Context, store *history.Store, tenant, participant string) (*history.Cursor, error) {
	l.mu.Lock()
	cur := l.cursors[participant]
	l.mu.Unlock()
	if cur != nil {
		return cur, nil
	}
	c, err := store.Cursor(ctx, tenant, l.key.workflowID, participant)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.stale[participant]; old != nil {
		c.Carry(old)
		delete(l.stale, participant)
	}
	if l.cursors == nil {
		l.cursors = make(map[string]*history.Cursor)
	}
	l.cursors[participant] = &c
	return &c, nil
}

// recoverCursor reads the cursor of req's conversation anew, knowing the messages its earlier
// deliveries stored (history.Store.Recover): req stores none of them again.
func (l *liveInstance) recoverCursor(ctx context.Context, store *history.Store, req *agentbusv1.Request, deep bool) error {
	participant := req.GetParticipantId()
	c, err := store.Recover(ctx, req.GetTenantId(), l.key.workflowID, participant, req.GetRequestId(), deep)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.stale, participant) // what it knew is what Recover read back
	if l.cursors == nil {
		l.cursors = make(map[string]*history.Cursor)
	}
	l.cursors[participant] = &c
	return nil
}

// staleCursor sets a conversation's cursor aside after a conflict: the next use reads the thread
// anew and keeps what this one knew to be stored, so that a request retried after the conflict
// stores none of its messages twice.
func (l *liveInstance) staleCursor(participant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.cursors[participant]
	if cur == nil {
		return
	}
	delete(l.cursors, participant)
	if old := l.stale[participant]; old != nil {
		cur.Carry(old) // a second conflict before a reload succeeded
	}
	if l.stale == nil {
		l.stale = make(map[string]*history.Cursor)
	}
	l.stale[participant] = cur
}
