package instance

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
)

// BackfillResult says what one Backfill did.
type BackfillResult struct {
	// Scanned is how many instance records were read.
	Scanned int `json:"scanned"`
	// Indexed is how many of them got their current run's index entry now.
	Indexed int `json:"indexed"`
	// Remaining is how many are still to index: Backfill ran out of time before them.
	Remaining int `json:"remaining"`
}

// unindexed is an instance record whose current run has no index entry.
type unindexed struct {
	tenant, workflowID, runID string
	startedAt                 time.Time
}

// Backfill gives the current run of every instance record that has none an index entry, oldest
// run first, and marks the record (Record.Indexed): records written before the run index existed,
// or by hosts of an earlier release. It reads the whole instances bucket once, so it is an
// operator's one-off after an upgrade. It stops starting new entries at deadline (zero: none);
// running it again goes on where it stopped, since marked records are skipped.
//
// A record whose run changes meanwhile is left to its host, which indexes every run it starts.
// A Backfill that stops between an entry and its record's mark leaves that instance with two
// entries of one run; a listing shows it once per page.
func (x *Index) Backfill(ctx context.Context, kv jetstream.KeyValue, store *Store, deadline time.Time) (BackfillResult, error) {
	var res BackfillResult
	todo, err := x.scanUnindexed(ctx, kv, &res)
	if err != nil {
		return res, err
	}
	slices.SortFunc(todo, func(a, b unindexed) int {
		return cmp.Or(a.startedAt.Compare(b.startedAt), cmp.Compare(a.workflowID, b.workflowID))
	})
	for i, u := range todo {
		if !deadline.IsZero() && time.Now().After(deadline) {
			res.Remaining = len(todo) - i
			break
		}
		done, err := x.backfillOne(ctx, store, u)
		if err != nil {
			res.Remaining = len(todo) - i
			return res, err
		}
		if done {
			res.Indexed++
		}
	}
	return res, nil
}

// scanUnindexed reads every instance record and returns those not indexed.
func (x *Index) scanUnindexed(ctx context.Context, kv jetstream.KeyValue, res *BackfillResult) ([]unindexed, error) {
	seen := make(map[string]bool)
	todo := make(map[string]unindexed)
	err := bus.Scan(ctx, x.js, kv, nil, func(e jetstream.KeyValueEntry) error {
		delete(todo, e.Key()) // an entry of a key seen before is newer
		if e.Operation() != jetstream.KeyValuePut {
			return nil
		}
		if !seen[e.Key()] {
			seen[e.Key()] = true
			res.Scanned++
		}
		var r struct {
			Tenant     string    `json:"tenant"`
			WorkflowID string    `json:"workflowId"`
			RunID      string    `json:"runId"`
			StartedAt  time.Time `json:"startedAt"`
			Indexed    bool      `json:"indexed"`
		}
		if err := json.Unmarshal(e.Value(), &r); err == nil && !r.Indexed && r.RunID != "" {
			todo[e.Key()] = unindexed{tenant: r.Tenant, workflowID: r.WorkflowID, runID: r.RunID, startedAt: r.StartedAt}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the instances: %w", err)
	}
	return slices.Collect(maps.Values(todo)), nil
}

// markPatience is how long a backfill's mark of a record goes on meeting hosts' writes.
const markPatience = 10 * bus.ConflictPatience

// backfillOne indexes one record's run and marks the record; it reports false when the record
// changed run, was marked by someone else or was deleted meanwhile. A mark that meets a host's
// write pauses a little (bus.ConflictBackoff) and reads the record again, for as long as ctx and
// markPatience allow.
func (x *Index) backfillOne(ctx context.Context, store *Store, u unindexed) (bool, error) {
	parts := strings.Split(u.workflowID, ":")
	if len(parts) != 4 {
		return false, nil // not a workflow id: no agent to list it under
	}
	rec, err := store.Get(ctx, u.tenant, u.workflowID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if rec.Indexed || rec.RunID != u.runID {
		return false, nil
	}
	if err := x.Add(ctx, u.tenant, parts[1], Entry{WorkflowID: u.workflowID, RunID: u.runID, StartedAt: u.startedAt}); err != nil {
		return false, err
	}
	// Nobody waits for a backfill, and a host that writes the record over and over wins most
	// races (it needs no read): the mark keeps trying for longer than a call's write would.
	backoff := bus.ConflictBackoff{Patience: markPatience}
	for {
		rec.Indexed = true
		_, err := store.Put(ctx, rec)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ErrConflict) {
			return false, err
		}
		// A host wrote the record meanwhile (state, counts): after a pause, mark it as it is
		// now, if it still runs the run just indexed.
		if werr := backoff.Wait(ctx); werr != nil {
			return false, fmt.Errorf("marking an instance indexed: %w: %w", err, werr)
		}
		rec, err = store.Get(ctx, u.tenant, u.workflowID)
		if errors.Is(err, ErrNotFound) {
			return false, nil // deleted meanwhile: its entry lists a run that no record has
		}
		if err != nil {
			return false, err
		}
		if rec.Indexed || rec.RunID != u.runID {
			return true, nil
		}
	}
}
