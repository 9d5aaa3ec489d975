package instance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// The tests on a replicated bus set racers writers going at once, a round at a time, until the
// stream has refused one of them with the code a replicated stream uses while another write to
// the subject is still being agreed on, or fail after maxRaceRounds rounds.
const (
	racers        = 8
	maxRaceRounds = 100
)

// replicatedSetup starts a three-node cluster with agentbus's resources replicated on the three,
// and counts the API errors the cluster answers with.
func replicatedSetup(t *testing.T) (context.Context, *bus.Resources, *natstest.APIErrors) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	cl, res := natstest.ClusterBus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, res, natstest.WatchAPIErrors(t, cl.URLs())
}

// TestPutConflictsOnReplicatedBucket: writers that read one instance record at the same revision
// and update it at once, on a bucket with three replicas: one wins, the others get ErrConflict
// whichever code the stream refused them with, and no update is lost.
func TestPutConflictsOnReplicatedBucket(t *testing.T) {
	ctx, res, seen := replicatedSetup(t)
	s := instance.NewStore(res.Instances)
	const wf = "acme:Echo:Supervisor Workflow:race"
	_, err := s.Put(ctx, newRecord("acme", wf))
	require.NoError(t, err)
	won := 0
	for round := 1; seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant) == 0; round++ {
		require.LessOrEqual(t, round, maxRaceRounds, "no update was refused with code %d", jetstream.JSErrCodeStreamWrongLastSequenceConstant)
		read, err := s.Get(ctx, "acme", wf)
		require.NoError(t, err)
		wins := 0
		for _, err := range natstest.Race(racers, func(i int) error {
			r := read
			r.Events++
			r.State = json.RawMessage(fmt.Sprintf(`{"writer":%d}`, i))
			r.WriteID = fmt.Sprintf("round-%d-writer-%d", round, i)
			_, err := s.Put(ctx, r)
			return err
		}) {
			if err == nil {
				wins++
				continue
			}
			require.ErrorIs(t, err, instance.ErrConflict, "round %d", round)
		}
		require.Equal(t, 1, wins, "round %d: writers that won", round)
		won++
	}
	got, err := s.Get(ctx, "acme", wf)
	require.NoError(t, err)
	assert.EqualValues(t, 1+won, got.Events, "events: one per update that won")
	t.Logf("%d rounds; refusals: %d with code %d, %d with code %d", won,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequence), jetstream.JSErrCodeStreamWrongLastSequence,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant), jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// TestIndexConcurrentWritersOnReplicatedStream: hosts appending runs to one agent's index at
// once, on a stream with three replicas, all succeed, and the subject holds one chain: each
// entry's subject.HeaderPrev lists the entries before it, and each run is stored once.
func TestIndexConcurrentWritersOnReplicatedStream(t *testing.T) {
	ctx, res, seen := replicatedSetup(t)
	xs := make([]*instance.Index, racers)
	for i := range xs {
		xs[i] = instance.NewIndex(res.JS, res.Runs)
	}
	added := 0
	for round := 1; seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant) == 0; round++ {
		require.LessOrEqual(t, round, maxRaceRounds, "no append was refused with code %d", jetstream.JSErrCodeStreamWrongLastSequenceConstant)
		for i, err := range natstest.Race(racers, func(i int) error {
			wf := fmt.Sprintf("acme:Echo:Supervisor Workflow:r%d-w%d", round, i)
			return xs[i].Add(ctx, "acme", "Echo", instance.Entry{WorkflowID: wf, RunID: "run-" + wf, StartedAt: time.Now()})
		}) {
			require.NoError(t, err, "round %d, writer %d", round, i)
		}
		added += racers
	}
	t.Logf("%d entries; refusals: %d with code %d, %d with code %d", added,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequence), jetstream.JSErrCodeStreamWrongLastSequence,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant), jetstream.JSErrCodeStreamWrongLastSequenceConstant)
	requireOneChain(ctx, t, res, added)
}

// TestIndexBusyWritersOnReplicatedStream: many hosts appending runs to one agent's index over and
// over, one at a time each, on a stream with three replicas, so that appends meet others' again
// and again: the subject holds one chain of every run once. An Add that kept losing for
// bus.ConflictPatience is tried again, as a host tries its run start again (pkg/agent's retry);
// no Add fails otherwise. With sixteen writers on a busy machine a writer can lose every race for
// that long: a writer that has just appended needs no read before its next append, and which of
// the others comes next is chance.
func TestIndexBusyWritersOnReplicatedStream(t *testing.T) {
	const writers, appends = 16, 20
	ctx, res, seen := replicatedSetup(t)
	errs := make([]error, writers)
	var again atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			x := instance.NewIndex(res.JS, res.Runs)
			<-start
			for i := range appends {
				wf := fmt.Sprintf("acme:Echo:Supervisor Workflow:w%d-%d", w, i)
				e := instance.Entry{WorkflowID: wf, RunID: "run-" + wf, StartedAt: time.Now()}
				err := x.Add(ctx, "acme", "Echo", e)
				for errors.Is(err, bus.ErrConflictsPersisted) && ctx.Err() == nil {
					again.Add(1)
					time.Sleep(50 * time.Millisecond)
					err = x.Add(ctx, "acme", "Echo", e)
				}
				if err != nil {
					errs[w] = errors.Join(errs[w], fmt.Errorf("append %d: %w", i, err))
				}
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	for w, err := range errs {
		assert.NoError(t, err, "writer %d", w)
	}
	t.Logf("%d appends in %v, %d of them tried again after losing for %v; refusals: %d with code %d, %d with code %d",
		writers*appends, time.Since(began).Round(time.Millisecond), again.Load(), bus.ConflictPatience,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequence), jetstream.JSErrCodeStreamWrongLastSequence,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant), jetstream.JSErrCodeStreamWrongLastSequenceConstant)
	requireOneChain(ctx, t, res, writers*appends)
}

// TestIndexHostsStartingManyRunsAtOnce: three hosts, each starting runs of one agent from eight
// goroutines at once (its partitions), on a stream with three replicas: every Add succeeds (no
// host starves while the others keep appending), and the subject holds one chain of every run
// once.
func TestIndexHostsStartingManyRunsAtOnce(t *testing.T) {
	const hosts, workers, each = 3, 8, 20
	ctx, res, _ := replicatedSetup(t)
	var (
		wg   sync.WaitGroup
		errs [hosts]error
		mu   sync.Mutex
	)
	for h := range hosts {
		x := instance.NewIndex(res.JS, res.Runs)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					wf := fmt.Sprintf("acme:Echo:Supervisor Workflow:h%d-w%d-%02d", h, w, i)
					if err := x.Add(ctx, "acme", "Echo", instance.Entry{WorkflowID: wf, RunID: "run-" + wf, StartedAt: time.Now()}); err != nil {
						mu.Lock()
						errs[h] = errors.Join(errs[h], err)
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for h, err := range errs {
		assert.NoError(t, err, "host %d", h)
	}
	entries := requireOneChain(ctx, t, res, hosts*workers*each)
	t.Logf("%d runs in %d entries", hosts*workers*each, entries)
}

// requireOneChain checks that the index of acme's Echo, read from the stream's leader, is one
// chain of want runs: each entry's subject.HeaderPrev lists the entries before it, and each run
// is stored once.
func requireOneChain(ctx context.Context, t *testing.T, res *bus.Resources, want int) (entries int) {
	t.Helper()
	subj := subject.Runs("acme", "Echo")
	var chain []uint64 // the entries read, newest first
	runs := make(map[string]bool)
	for seq := uint64(1); ; seq++ {
		raw, err := bus.LeaderGet(ctx, res.JS.Conn(), subject.RunsStream, seq, "")
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
			break
		}
		require.Equal(t, subj, raw.Subject)
		prev, err := bus.ParsePrev(raw.Header)
		require.NoError(t, err)
		want := chain[:min(len(chain), bus.PrevDepth)]
		require.Equal(t, append([]uint64{}, want...), append([]uint64{}, prev...), "entry %d: the entries before it", seq)
		for _, e := range entryRuns(t, raw.Data) {
			require.False(t, runs[e.RunID], "run %s stored twice", e.RunID)
			runs[e.RunID] = true
		}
		chain = append([]uint64{seq}, chain...)
	}
	assert.Equal(t, want, len(runs), "runs stored")
	return len(chain)
}

// TestBackfillWhileHostsWrite: a backfill of records whose hosts keep writing them (state,
// counts), on a bucket and a stream with three replicas: each mark that loses to a host's write
// reads the record again, every record ends indexed and marked at the run it had, and no host's
// write undoes a mark.
func TestBackfillWhileHostsWrite(t *testing.T) {
	const records, writersEach = 4, 4
	ctx, res, seen := replicatedSetup(t)
	store := instance.NewStore(res.Instances)
	var firsts []instance.Record
	for i := range records {
		rec := newRecord("acme", fmt.Sprintf("acme:Echo:Supervisor Workflow:old-%d", i))
		rec.RunID = fmt.Sprintf("run-old-%d", i)
		rec, err := store.Put(ctx, rec)
		require.NoError(t, err)
		firsts = append(firsts, rec)
	}

	// Each writer counts events on its record, from the revision it last wrote or read.
	var writes atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	for i := range records * writersEach {
		wg.Go(func() {
			rec := firsts[i%records]
			for !done.Load() {
				rec.Events++
				saved, err := store.Put(ctx, rec)
				if err == nil {
					rec = saved
					writes.Add(1)
					continue
				}
				if !assert.ErrorIs(t, err, instance.ErrConflict, "writer %d", i) {
					return
				}
				if rec, err = store.Get(ctx, "acme", rec.WorkflowID); !assert.NoError(t, err, "writer %d", i) {
					return
				}
			}
		})
	}
	for writes.Load() < records*writersEach && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	before := conflictRefusals(seen)
	got, err := instance.NewIndex(res.JS, res.Runs).Backfill(ctx, res.Instances, store, time.Time{})
	marking := conflictRefusals(seen) - before
	done.Store(true)
	wg.Wait()
	require.NoError(t, err)
	assert.Equal(t, instance.BackfillResult{Scanned: records, Indexed: records}, got)
	for _, first := range firsts {
		rec, err := store.Get(ctx, "acme", first.WorkflowID)
		require.NoError(t, err)
		assert.True(t, rec.Indexed, "%s is marked", rec.WorkflowID)
		assert.Equal(t, first.RunID, rec.RunID, "%s", rec.WorkflowID)
	}
	requireOneChain(ctx, t, res, records)
	t.Logf("%d writes of the hosts; %d refusals during the backfill", writes.Load(), marking)
}

// conflictRefusals is how many writes the cluster has refused as compare-and-set conflicts.
func conflictRefusals(seen *natstest.APIErrors) int {
	return seen.Count(jetstream.JSErrCodeStreamWrongLastSequence) + seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
