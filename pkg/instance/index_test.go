package instance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// indexSetup returns a bus, its instance store and its run index.
func indexSetup(t *testing.T) (context.Context, *bus.Resources, *instance.Store, *instance.Index) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	res := natstest.Bus(t, bus.Config{})
	return ctx, res, instance.NewStore(res.Instances), instance.NewIndex(res.JS, res.Runs)
}

// startRun indexes a new run of the workflow and writes its record, as a host does.
func startRun(t *testing.T, ctx context.Context, store *instance.Store, x *instance.Index, tenant, agent, activation, runID string, at time.Time) instance.Record {
	t.Helper()
	wf := tenant + ":" + agent + ":Supervisor Workflow:" + activation
	rec, err := store.Get(ctx, tenant, wf)
	if err != nil {
		require.ErrorIs(t, err, instance.ErrNotFound)
		rec = instance.Record{Tenant: tenant, WorkflowID: wf}
	}
	require.NoError(t, x.Add(ctx, tenant, agent, instance.Entry{WorkflowID: wf, RunID: runID, StartedAt: at}))
	fresh := instance.Record{Tenant: tenant, WorkflowID: wf, RunID: runID, Status: instance.Running,
		StartedAt: at, LastActiveAt: at, Revision: rec.Revision, Runs: rec.EarlierRuns(rec.LastActiveAt), Indexed: true}
	fresh, err = store.Put(ctx, fresh)
	require.NoError(t, err)
	return fresh
}

// entryRuns decodes an index entry: one run as an object, or several as an array.
func entryRuns(t *testing.T, data []byte) []instance.Entry {
	t.Helper()
	if len(data) > 0 && data[0] == '[' {
		var runs []instance.Entry
		require.NoError(t, json.Unmarshal(data, &runs))
		return runs
	}
	var e instance.Entry
	require.NoError(t, json.Unmarshal(data, &e))
	return []instance.Entry{e}
}

func workflows(items []instance.Listed) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, it.Entry.WorkflowID)
	}
	return out
}

// TestIndexListsNewestFirstAcrossPages: 75 instances list newest run first in pages that follow
// their cursors to the oldest, and an instance that started a new run shows once, at its new
// place, with its earlier run in its record.
func TestIndexListsNewestFirstAcrossPages(t *testing.T) {
	ctx, _, store, x := indexSetup(t)
	base := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	for i := range 75 {
		startRun(t, ctx, store, x, "acme", "Echo", fmt.Sprintf("a%02d", i), fmt.Sprintf("run-%d", i), base.Add(time.Duration(i)*time.Second))
	}
	// a05 completes and starts again: its new run is the newest.
	rec, err := store.Get(ctx, "acme", "acme:Echo:Supervisor Workflow:a05")
	require.NoError(t, err)
	done := base.Add(time.Hour)
	rec.Status, rec.CompletedAt, rec.Events = instance.Completed, &done, 3
	_, err = store.Put(ctx, rec)
	require.NoError(t, err)
	again := startRun(t, ctx, store, x, "acme", "Echo", "a05", "run-again", base.Add(2*time.Hour))
	require.Len(t, again.Runs, 1)
	assert.Equal(t, instance.RunSummary{RunID: "run-5", StartedAt: timefmt.Of(base.Add(5 * time.Second)), CompletedAt: timefmt.Of(done), Events: 3}, again.Runs[0])
	// Another agent and another tenant list apart.
	startRun(t, ctx, store, x, "acme", "Other", "o", "run-o", base)
	startRun(t, ctx, store, x, "zeta", "Echo", "z", "run-z", base)

	var all []string
	var cursor instance.Cursor
	for page := 0; ; page++ {
		items, next, err := x.List(ctx, store, "acme", "Echo", instance.ListOptions{Limit: 20, Before: cursor})
		require.NoError(t, err)
		all = append(all, workflows(items)...)
		if next == (instance.Cursor{}) {
			break
		}
		require.Less(t, page, 10, "pages end")
		cursor = next
	}
	require.Len(t, all, 75)
	assert.Equal(t, "acme:Echo:Supervisor Workflow:a05", all[0], "the newest run first")
	assert.Equal(t, "acme:Echo:Supervisor Workflow:a74", all[1])
	assert.Equal(t, "acme:Echo:Supervisor Workflow:a00", all[74], "the oldest last")
	assert.NotContains(t, all[2:], "acme:Echo:Supervisor Workflow:a05", "the replaced run is not listed")

	items, _, err := x.List(ctx, store, "zeta", "Echo", instance.ListOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"zeta:Echo:Supervisor Workflow:z"}, workflows(items))
	items, next, err := x.List(ctx, store, "zeta", "Nobody", instance.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, items)
	assert.Zero(t, next)

	// A cursor of another subject is refused.
	first, _, err := x.List(ctx, store, "acme", "Other", instance.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, first, 1)
	_, _, err = x.List(ctx, store, "zeta", "Echo", instance.ListOptions{Before: instance.Cursor{Seq: 1}})
	assert.ErrorIs(t, err, instance.ErrBadCursor)
	_, _, err = x.List(ctx, store, "acme", "Echo", instance.ListOptions{Before: instance.Cursor{Seq: 1 << 40}})
	assert.ErrorIs(t, err, instance.ErrBadCursor)
}

// TestIndexFilters: status (with the idle timeout), activation prefix and activity times select
// instances; a sparse filter examines a bounded number of entries and hands back a cursor.
func TestIndexFilters(t *testing.T) {
	ctx, _, store, x := indexSetup(t)
	now := time.Now().UTC()
	// Instance i last ran 30-i minutes (and 30 s) ago: with a 20-minute idle timeout, those up
	// to i=10 are idle. Every tenth is named rare-.
	for i := range 30 {
		name := fmt.Sprintf("busy-%02d", i)
		if i%10 == 0 {
			name = fmt.Sprintf("rare-%02d", i)
		}
		startRun(t, ctx, store, x, "acme", "Echo", name, "run-"+name, now.Add(-time.Duration(30-i)*time.Minute-30*time.Second))
	}
	rec, err := store.Get(ctx, "acme", "acme:Echo:Supervisor Workflow:rare-00")
	require.NoError(t, err)
	rec.Status, rec.CompletedAt = instance.Completed, &now
	_, err = store.Put(ctx, rec)
	require.NoError(t, err)

	list := func(opt instance.ListOptions) ([]string, instance.Cursor) {
		t.Helper()
		opt.IdleTimeout = 20 * time.Minute
		items, next, err := x.List(ctx, store, "acme", "Echo", opt)
		require.NoError(t, err)
		var out []string
		for _, it := range items {
			out = append(out, activation(it.Entry.WorkflowID)+"/"+string(it.Status))
		}
		return out, next
	}
	got, _ := list(instance.ListOptions{Prefix: "rare-"})
	assert.Equal(t, []string{"rare-20/running", "rare-10/idle", "rare-00/completed"}, got)
	got, _ = list(instance.ListOptions{Status: instance.Completed})
	assert.Equal(t, []string{"rare-00/completed"}, got)
	got, _ = list(instance.ListOptions{Status: instance.Running, Limit: 2})
	assert.Equal(t, []string{"busy-29/running", "busy-28/running"}, got)
	got, _ = list(instance.ListOptions{Status: instance.Idle, ActiveAfter: now.Add(-22 * time.Minute)})
	assert.Equal(t, []string{"rare-10/idle", "busy-09/idle"}, got)
	got, _ = list(instance.ListOptions{ActiveBefore: now.Add(-28 * time.Minute)})
	assert.Equal(t, []string{"busy-02/idle", "busy-01/idle", "rare-00/completed"}, got)

	// One per page with a sparse filter: at most 10 entries are examined per page, so the pages
	// go on until the filter has been applied to every entry.
	var pages [][]string
	var cursor instance.Cursor
	for {
		got, next := list(instance.ListOptions{Prefix: "rare-", Limit: 1, Before: cursor})
		pages = append(pages, got)
		if next == (instance.Cursor{}) {
			break
		}
		require.Less(t, len(pages), 10)
		cursor = next
	}
	assert.Equal(t, [][]string{{"rare-20/running"}, {"rare-10/idle"}, {"rare-00/completed"}}, pages)
	got, next := list(instance.ListOptions{Prefix: "none-", Limit: 1})
	assert.Empty(t, got)
	assert.NotZero(t, next, "a page that examined its whole budget hands on a cursor")
}

func activation(wf string) string {
	for i := len(wf) - 1; i >= 0; i-- {
		if wf[i] == ':' {
			return wf[i+1:]
		}
	}
	return wf
}

// TestIndexConcurrentWritersKeepOneChain: writers with an index each (hosts of different
// partitions) appending to one agent's subject at once keep a chain that lists every run.
func TestIndexConcurrentWritersKeepOneChain(t *testing.T) {
	ctx, res, store, _ := indexSetup(t)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		x := instance.NewIndex(res.JS, res.Runs)
		wg.Go(func() {
			for i := range each {
				startRun(t, ctx, store, x, "acme", "Echo", fmt.Sprintf("w%d-%02d", w, i), fmt.Sprintf("run-%d-%d", w, i), time.Now())
			}
		})
	}
	wg.Wait()
	x := instance.NewIndex(res.JS, res.Runs)
	items, next, err := x.List(ctx, store, "acme", "Echo", instance.ListOptions{Limit: instance.MaxListLimit})
	require.NoError(t, err)
	assert.Zero(t, next)
	assert.Len(t, items, writers*each)
}

// TestIndexSharedByManyWritersKeepsOneChain: one Index used by many goroutines at once (a host's
// partitions starting runs of one agent) appends every run without meeting its own entries (no
// append is refused for a wrong last sequence), each entry naming the one stored before it, and
// keeps nothing for the subject once they are done.
func TestIndexSharedByManyWritersKeepsOneChain(t *testing.T) {
	ctx, res, store, x := indexSetup(t)
	seen := natstest.WatchAPIErrorsOn(t, res.JS.Conn())
	const writers, each = 16, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				startRun(t, ctx, store, x, "acme", "Echo", fmt.Sprintf("w%02d-%d", w, i), fmt.Sprintf("run-%d-%d", w, i), time.Now())
			}
		})
	}
	wg.Wait()
	assert.Zero(t, x.Turns(), "turns left behind")
	assert.Zero(t, seen.Count(jetstream.JSErrCodeStreamWrongLastSequence), "appends refused for a wrong last sequence")

	items, next, err := x.List(ctx, store, "acme", "Echo", instance.ListOptions{Limit: instance.MaxListLimit})
	require.NoError(t, err)
	assert.Zero(t, next)
	assert.Len(t, items, writers*each)
	// Each entry's header names the entry before it on the subject: one chain, no forks, and
	// every run in it once.
	var chain []uint64
	runs := map[string]bool{}
	for seq := uint64(1); ; seq++ {
		raw, err := res.Runs.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		require.NoError(t, err)
		prev, err := bus.ParsePrev(raw.Header)
		require.NoError(t, err)
		if len(chain) == 0 {
			assert.Empty(t, prev, "entry %d", seq)
		} else {
			require.NotEmpty(t, prev, "entry %d", seq)
			assert.Equal(t, chain[len(chain)-1], prev[0], "entry %d", seq)
		}
		for _, e := range entryRuns(t, raw.Data) {
			assert.False(t, runs[e.RunID], "run %s stored twice", e.RunID)
			runs[e.RunID] = true
		}
		chain = append(chain, seq)
	}
	assert.Len(t, runs, writers*each, "runs stored")
	t.Logf("%d runs in %d entries", len(runs), len(chain))
}

// TestIndexAppendsRunsQueuedMeanwhileAsOneEntry: the runs added while an append to the subject
// is under way go as one entry, in the order they came, and list newest first, a page able to end
// inside an entry; a run whose Add gave up while it waited is not appended.
func TestIndexAppendsRunsQueuedMeanwhileAsOneEntry(t *testing.T) {
	ctx, res, store, x := indexSetup(t)
	subj := subject.Runs("acme", "Echo")
	base := time.Now().Add(-time.Hour)
	startRun(t, ctx, store, x, "acme", "Echo", "a0", "run-0", base)

	release := x.Hold(subj)
	gaveUp, cancel := context.WithCancel(ctx)
	errs := make([]error, 6)
	returned := make(chan struct{}) // by the Add that gives up
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		addCtx := ctx
		if i == 3 {
			addCtx = gaveUp
		}
		wg.Go(func() {
			wf := fmt.Sprintf("acme:Echo:Supervisor Workflow:a%d", i)
			errs[i] = x.Add(addCtx, "acme", "Echo", instance.Entry{WorkflowID: wf, RunID: fmt.Sprintf("run-%d", i), StartedAt: base.Add(time.Duration(i) * time.Second)})
			if i == 3 {
				close(returned)
			}
		})
		require.Eventually(t, func() bool { return x.Queued(subj) == i }, 5*time.Second, time.Millisecond, "run %d queued", i)
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the Add that gave up did not return while the turn was held")
	}
	require.ErrorIs(t, errs[3], context.Canceled)
	release()
	wg.Wait()
	for i, err := range errs {
		if i != 3 {
			require.NoError(t, err, "run %d", i)
		}
	}
	assert.Zero(t, x.Turns(), "turns left behind")

	// Two entries: the first run alone, as an object; the four others as one array, oldest first.
	last, err := res.Runs.GetLastMsgForSubject(ctx, subj)
	require.NoError(t, err)
	require.EqualValues(t, 2, last.Sequence, "entries stored")
	var runs []instance.Entry
	require.NoError(t, json.Unmarshal(last.Data, &runs))
	var ids []string
	for _, e := range runs {
		ids = append(ids, e.RunID)
	}
	assert.Equal(t, []string{"run-1", "run-2", "run-4", "run-5"}, ids)

	for _, i := range []int{1, 2, 4, 5} {
		wf := fmt.Sprintf("acme:Echo:Supervisor Workflow:a%d", i)
		at := base.Add(time.Duration(i) * time.Second)
		_, err := store.Put(ctx, instance.Record{Tenant: "acme", WorkflowID: wf, RunID: fmt.Sprintf("run-%d", i),
			Status: instance.Running, StartedAt: at, LastActiveAt: at, Indexed: true})
		require.NoError(t, err)
	}
	page, next, err := x.List(ctx, store, "acme", "Echo", instance.ListOptions{Limit: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{"acme:Echo:Supervisor Workflow:a5", "acme:Echo:Supervisor Workflow:a4",
		"acme:Echo:Supervisor Workflow:a2"}, workflows(page))
	assert.Equal(t, instance.Cursor{Seq: 2, Runs: 3}, next, "the next page starts inside the entry")
	assert.Equal(t, "2.3", next.String())
	parsed, err := instance.ParseCursor(next.String())
	require.NoError(t, err)
	page, next, err = x.List(ctx, store, "acme", "Echo", instance.ListOptions{Limit: 3, Before: parsed})
	require.NoError(t, err)
	assert.Equal(t, []string{"acme:Echo:Supervisor Workflow:a1", "acme:Echo:Supervisor Workflow:a0"}, workflows(page))
	assert.Zero(t, next)

	// A page that ends with an entry's oldest run goes on after the whole entry.
	page, next, err = x.List(ctx, store, "acme", "Echo", instance.ListOptions{Limit: 4})
	require.NoError(t, err)
	assert.Len(t, page, 4)
	assert.Equal(t, instance.Cursor{Seq: 2}, next)
	assert.Equal(t, "2", next.String())

	// Cursors that name no place in this list are refused.
	for _, c := range []instance.Cursor{{Seq: 2, Runs: 4}, {Seq: 1, Runs: 1}} {
		_, _, err = x.List(ctx, store, "acme", "Echo", instance.ListOptions{Before: c})
		assert.ErrorIs(t, err, instance.ErrBadCursor, "cursor %v", c)
	}
	for _, text := range []string{"", "0", "x", "2.", "2.0", "2.x", "2.-1", "2.+1", "-2", "2.3.1", fmt.Sprintf("2.%d", instance.MaxBatch)} {
		_, err := instance.ParseCursor(text)
		assert.ErrorIs(t, err, instance.ErrBadCursor, "cursor %q", text)
	}
}

// TestIndexEntryHoldsAtMostMaxBatchRuns: more runs queued than one entry holds go as several.
func TestIndexEntryHoldsAtMostMaxBatchRuns(t *testing.T) {
	ctx, res, _, x := indexSetup(t)
	subj := subject.Runs("acme", "Echo")
	release := x.Hold(subj)
	n := instance.MaxBatch + 1
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			wf := fmt.Sprintf("acme:Echo:Supervisor Workflow:b%03d", i)
			errs[i] = x.Add(ctx, "acme", "Echo", instance.Entry{WorkflowID: wf, RunID: "run-" + wf, StartedAt: time.Now()})
		})
	}
	require.Eventually(t, func() bool { return x.Queued(subj) == n }, 10*time.Second, time.Millisecond, "runs queued")
	release()
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	info, err := res.Runs.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, info.State.Msgs, "entries")
	first, err := res.Runs.GetMsg(ctx, 1)
	require.NoError(t, err)
	var runs []instance.Entry
	require.NoError(t, json.Unmarshal(first.Data, &runs))
	assert.Len(t, runs, instance.MaxBatch)
}

// TestIndexSkipsRunsThatNeverStarted: an entry whose record was never written (its host lost the
// race, or failed between the two writes) is not listed, and neither is an instance that never
// ran.
func TestIndexSkipsRunsThatNeverStarted(t *testing.T) {
	ctx, _, store, x := indexSetup(t)
	now := time.Now()
	startRun(t, ctx, store, x, "acme", "Echo", "a", "run-a", now)
	require.NoError(t, x.Add(ctx, "acme", "Echo", instance.Entry{WorkflowID: "acme:Echo:Supervisor Workflow:a", RunID: "lost", StartedAt: now}))
	require.NoError(t, x.Add(ctx, "acme", "Echo", instance.Entry{WorkflowID: "acme:Echo:Supervisor Workflow:never", RunID: "x", StartedAt: now}))
	items, _, err := x.List(ctx, store, "acme", "Echo", instance.ListOptions{})
	require.NoError(t, err)
	require.Len(t, items, 1)
	assert.Equal(t, "run-a", items[0].Record.RunID)
}

// TestBackfillIndexesOldRecordsOnce: records written before the index existed are indexed by a
// backfill, oldest run first, and a second backfill adds nothing.
func TestBackfillIndexesOldRecordsOnce(t *testing.T) {
	ctx, res, store, x := indexSetup(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, a := range []string{"old-2", "old-1", "old-3"} {
		at := base.Add(time.Duration([]int{2, 1, 3}[i]) * time.Hour)
		_, err := store.Put(ctx, instance.Record{Tenant: "acme", WorkflowID: "acme:Echo:Supervisor Workflow:" + a,
			RunID: "r-" + a, Status: instance.Running, StartedAt: at, LastActiveAt: at})
		require.NoError(t, err)
	}
	startRun(t, ctx, store, x, "acme", "Echo", "new", "r-new", base.Add(24*time.Hour))

	got, err := x.Backfill(ctx, res.Instances, store, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, instance.BackfillResult{Scanned: 4, Indexed: 3}, got)
	items, _, err := x.List(ctx, store, "acme", "Echo", instance.ListOptions{})
	require.NoError(t, err)
	var acts []string
	for _, it := range items {
		acts = append(acts, activation(it.Entry.WorkflowID))
	}
	assert.Equal(t, []string{"old-3", "old-2", "old-1", "new"}, acts, "backfilled entries come after the index's own, oldest run first")

	got, err = x.Backfill(ctx, res.Instances, store, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, instance.BackfillResult{Scanned: 4}, got)
	info, err := res.Runs.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 4, info.State.Msgs)
}

// deletedOnUpdate is an instances bucket whose first compare-and-set update loses to a delete
// of the record, as when an operator removes an instance while a backfill marks it.
type deletedOnUpdate struct {
	jetstream.KeyValue
	done bool
}

func (d *deletedOnUpdate) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if !d.done {
		d.done = true
		if err := d.KeyValue.Delete(ctx, key); err != nil {
			return 0, err
		}
		return 0, jetstream.ErrKeyExists
	}
	return d.KeyValue.Update(ctx, key, value, last)
}

// TestBackfillOfARecordDeletedMeanwhile: a record deleted while the backfill marks it is left
// alone, and the backfill goes on without an error.
func TestBackfillOfARecordDeletedMeanwhile(t *testing.T) {
	ctx, res, store, x := indexSetup(t)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, a := range []string{"gone", "kept"} {
		_, err := store.Put(ctx, instance.Record{Tenant: "acme", WorkflowID: "acme:Echo:Supervisor Workflow:" + a,
			RunID: "r-" + a, Status: instance.Running, StartedAt: at, LastActiveAt: at})
		require.NoError(t, err)
		at = at.Add(time.Hour)
	}
	got, err := x.Backfill(ctx, res.Instances, instance.NewStore(&deletedOnUpdate{KeyValue: res.Instances}), time.Time{})
	require.NoError(t, err)
	assert.Equal(t, instance.BackfillResult{Scanned: 2, Indexed: 1}, got)
	_, err = store.Get(ctx, "acme", "acme:Echo:Supervisor Workflow:gone")
	require.ErrorIs(t, err, instance.ErrNotFound)
	kept, err := store.Get(ctx, "acme", "acme:Echo:Supervisor Workflow:kept")
	require.NoError(t, err)
	assert.True(t, kept.Indexed)
}
