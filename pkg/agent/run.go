package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
)

// startOrLoad returns the running instance of the request's workflow, starting a new run when
// there is none, the last one completed, or it has been idle for longer than the idle timeout
// (update-with-start). When several hosts race to start, compare-and-set lets exactly one win;
// the others pause a little (bus.ConflictBackoff) and load its run.
func (h *Host) startOrLoad(ctx context.Context, log *slog.Logger, a *Agent, l *liveInstance) (*Instance, error) {
	l.mu.Lock()
	started := false
	var backoff bus.ConflictBackoff
	for {
		if gen := h.liveGen(); !l.loaded || l.gen != gen {
			if err := l.reloadLocked(ctx); err != nil {
				l.mu.Unlock()
				return nil, err
			}
			l.gen = gen
		}
		if l.found && l.rec.Status == instance.Running && !h.idleToComplete(ctx, log, a, l.rec) {
			break
		}
		if l.found && l.rec.Status == instance.Running {
			log.Info("completing an idle run", "runId", l.rec.RunID, "lastActiveAt", l.rec.LastActiveAt)
		}
		now := time.Now().UTC()
		fresh := instance.Record{
			Tenant: l.key.tenant, WorkflowID: l.key.workflowID, RunID: uuid.NewString(),
			Status: instance.Running, StartedAt: now, LastActiveAt: now, Revision: l.rec.Revision,
			Runs: l.rec.EarlierRuns(l.rec.LastActiveAt), Indexed: true,
			// A request waiting in a conversation (Wait) outlives the run that parked it.
			Waits: l.rec.Waits,
		}
		err := h.indexRun(ctx, l, fresh)
		if err == nil {
			err = l.writeLocked(ctx, fresh)
		}
		if err == nil {
			started = true
			log.Debug("started run", "runId", fresh.RunID)
			break
		}
		if !errors.Is(err, instance.ErrConflict) {
			l.mu.Unlock()
			return nil, err
		}
		// Someone else started it: read theirs once it has landed.
		if werr := backoff.Wait(ctx); werr != nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("starting a run: %w: %w", err, werr)
		}
		l.loaded = false
	}
	l.mu.Unlock()
	inst := &Instance{live: l}
	if started && a.onStart != nil {
		if err := a.onStart(ctx, inst); err != nil {
			log.Error("start hook failed", "err", err)
		}
	}
	return inst, nil
}

// liveGen is the generation of the host's copies in memory (liveSet.stale).
func (h *Host) liveGen() uint64 {
	if h.live == nil {
		return 0 // a test's host without one
	}
	return h.live.gen.Load()
}

// finishRun counts the event, completes the run if asked, and rolls over long runs
// (continue-as-new). Counting alone is not written at once: it goes with the next write of the
// record or when the host drops the idle instance. A write that meets another's (a
// compare-and-set conflict) pauses a little (bus.ConflictBackoff), reads the record again and
// finishes the run as it is then, for as long as ctx and bus.ConflictPatience allow.
func (h *Host) finishRun(ctx context.Context, log *slog.Logger, inst *Instance, runID string) error {
	l := inst.live
	complete := inst.completing()
	l.mu.Lock()
	defer l.mu.Unlock()
	var backoff bus.ConflictBackoff
	for {
		if l.rec.RunID != runID || l.rec.Status != instance.Running {
			return nil // the run ended meanwhile (another participant completed it)
		}
		now := time.Now().UTC()
		rec := l.rec
		rec.Events++
		rec.LastActiveAt = now
		switch {
		case complete:
			rec.Status = instance.Completed
			rec.CompletedAt = &now
		case h.cfg.ContinueAsNewEvents > 0 && rec.Events >= int64(h.cfg.ContinueAsNewEvents):
			log.Info("continue-as-new", "oldRunId", rec.RunID, "events", rec.Events)
			rec.Runs = rec.EarlierRuns(now)
			rec.RunID = uuid.NewString()
			rec.Events = 0
			rec.StartedAt = now
			rec.Indexed = true
			if err := h.indexRun(ctx, l, rec); err != nil {
				return err
			}
		default:
			l.rec, l.dirty = rec, true
			return nil
		}
		err := l.writeLocked(ctx, rec)
		if err == nil {
			return nil
		}
		if !errors.Is(err, instance.ErrConflict) {
			return err
		}
		if werr := backoff.Wait(ctx); werr != nil {
			return fmt.Errorf("finishing a run: %w: %w", err, werr)
		}
		if err := l.reloadLocked(ctx); err != nil {
			return err
		}
	}
}

// idleToComplete reports whether a running instance has been idle long enough to complete: the
// agent's IdleAfter or else the host's IdleTimeout (neither is set by default), and no timer of
// the instance may still fire. When the timers cannot be read, it stays running.
func (h *Host) idleToComplete(ctx context.Context, log *slog.Logger, a *Agent, rec instance.Record) bool {
	timeout := h.cfg.IdleTimeout
	if a.idleAfter != 0 {
		timeout = a.idleAfter
	}
	if !rec.IdleFor(timeout, time.Now()) {
		return false
	}
	pending, err := h.timers.Pending(ctx, rec.Tenant, rec.WorkflowID)
	if err != nil {
		log.Warn("reading the instance's timers; it stays running", "err", err)
		return false
	}
	return !pending
}
