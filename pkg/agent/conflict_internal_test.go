package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// TestConflictsOnReplicatedBus: the host's compare-and-set writes, racing others on one
// three-node cluster whose streams and buckets have three replicas, all succeed (the subtests).
// At the end it logs how many writes the cluster refused as conflicts.
func TestConflictsOnReplicatedBus(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	cl, res := natstest.ClusterBus(t, bus.Config{})
	seen := natstest.WatchAPIErrors(t, cl.URLs())
	for _, tc := range []struct {
		name string
		run  func(*testing.T, context.Context, *bus.Resources)
	}{
		{"bumpTenure", bumpTenureConcurrently},
		{"startOrLoad", startOrLoadConcurrently},
		{"UpdateState", updateStateConcurrently},
		{"rewind", rewindWhileOthersWrite},
		{"finishRun", finishRunWhileOthersWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			before := conflictRefusals(seen)
			tc.run(t, ctx, res)
			t.Logf("%d writes refused as conflicts", conflictRefusals(seen)-before)
		})
	}
}

// conflictRefusals is how many writes the cluster has refused as compare-and-set conflicts.
func conflictRefusals(seen *natstest.APIErrors) int {
	return seen.Count(jetstream.JSErrCodeStreamWrongLastSequence) + seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// bumpTenureConcurrently: hosts counting takeovers of one partition at once, over and over,
// on a bucket with three replicas, all succeed, each learns a count of its own, and the count
// ends at the number of takeovers.
func bumpTenureConcurrently(t *testing.T, ctx context.Context, res *bus.Resources) {
	const hosts, bumps = 8, 10
	counts := make([][]uint64, hosts)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() {
			h := &Host{res: res}
			part := &partition{key: partKey{agent: "Echo", n: 0}}
			<-start
			for b := range bumps {
				if !assert.NoError(t, h.bumpTenure(ctx, part), "host %d, takeover %d", i, b) {
					return
				}
				counts[i] = append(counts[i], part.tenure)
			}
		})
	}
	close(start)
	wg.Wait()
	require.False(t, t.Failed())
	var all []uint64
	for _, c := range counts {
		all = append(all, c...)
	}
	slices.Sort(all)
	want := make([]uint64, hosts*bumps)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	assert.Equal(t, want, all, "the counts the hosts learnt")
	n, _, err := (&Host{res: res}).tenureOf(ctx, partKey{agent: "Echo", n: 0})
	require.NoError(t, err)
	assert.EqualValues(t, hosts*bumps, n)
}

// hostsLive is the instance of workflow wf as each of n hosts holds it in memory, loaded.
func hostsLive(t *testing.T, ctx context.Context, store *instance.Store, wf string, n int) []*liveInstance {
	t.Helper()
	ls := make([]*liveInstance, n)
	for i := range ls {
		l := &liveInstance{store: store, key: liveKey{tenant: "default", workflowID: wf}, hostID: fmt.Sprintf("host-%d", i),
			mayAct: func(context.Context) error { return nil }}
		l.mu.Lock()
		err := l.reloadLocked(ctx)
		l.mu.Unlock()
		require.NoError(t, err)
		ls[i] = l
	}
	return ls
}

// startOrLoadConcurrently: hosts starting a fresh instance at once, on a bucket with three
// replicas, all succeed: one starts the run, the others load it.
func startOrLoadConcurrently(t *testing.T, ctx context.Context, res *bus.Resources) {
	const hosts, rounds = 8, 5
	store := instance.NewStore(res.Instances)
	h := &Host{runs: instance.NewIndex(res.JS, res.Runs)}
	log := slog.New(slog.DiscardHandler)
	for round := range rounds {
		wf := fmt.Sprintf("default:Echo:Supervisor Workflow:start-%d", round)
		ls := hostsLive(t, ctx, store, wf, hosts)
		runs := make([]string, hosts)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, l := range ls {
			wg.Go(func() {
				<-start
				inst, err := h.startOrLoad(ctx, log, &Agent{}, l)
				if assert.NoError(t, err, "round %d, host %d", round, i) {
					runs[i] = inst.RunID()
				}
			})
		}
		close(start)
		wg.Wait()
		rec, err := store.Get(ctx, "default", wf)
		require.NoError(t, err)
		for i, run := range runs {
			assert.Equal(t, rec.RunID, run, "round %d, host %d: the run stored", round, i)
		}
	}
}

// updateStateConcurrently: hosts changing one instance's state at once, over and over, on a
// bucket with three replicas, all succeed, and no change is lost.
func updateStateConcurrently(t *testing.T, ctx context.Context, res *bus.Resources) {
	const hosts, updates = 8, 10
	store := instance.NewStore(res.Instances)
	const wf = "default:Echo:Supervisor Workflow:state"
	_, err := store.Put(ctx, instance.Record{Tenant: "default", WorkflowID: wf, RunID: "run-1", Status: instance.Running})
	require.NoError(t, err)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range hostsLive(t, ctx, store, wf, hosts) {
		wg.Go(func() {
			<-start
			for u := range updates {
				inst := &Instance{live: l, requestID: fmt.Sprintf("req-%d-%d", i, u)}
				_, err := UpdateState(ctx, inst, func(s *struct{ N int }) error {
					s.N++
					return nil
				})
				if !assert.NoError(t, err, "host %d, update %d", i, u) {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	rec, err := store.Get(ctx, "default", wf)
	require.NoError(t, err)
	assert.JSONEq(t, fmt.Sprintf(`{"N":%d}`, hosts*updates), string(rec.State), "every change counted once")
}

// rewindWhileOthersWrite: undoing an earlier attempt's state change while other writers keep
// counting events on the record, on a bucket with three replicas, succeeds: the state is back to
// what it was before the attempt.
func rewindWhileOthersWrite(t *testing.T, ctx context.Context, res *bus.Resources) {
	const writers, rounds = 8, 5
	store := instance.NewStore(res.Instances)
	for round := range rounds {
		wf := fmt.Sprintf("default:Echo:Supervisor Workflow:rewind-%d", round)
		_, err := store.Put(ctx, instance.Record{Tenant: "default", WorkflowID: wf, RunID: "run-1", Status: instance.Running,
			State: json.RawMessage(`{"N":1}`), Applying: &instance.Applying{RequestID: "req-1", Before: json.RawMessage(`{"N":0}`)}})
		require.NoError(t, err)
		l := hostsLive(t, ctx, store, wf, 1)[0]
		stop := natstest.CountEvents(t, ctx, store, "default", wf, writers)
		err = (&Instance{live: l, requestID: "req-1"}).rewind(ctx)
		stop()
		require.NoError(t, err, "round %d", round)
		rec, err := store.Get(ctx, "default", wf)
		require.NoError(t, err)
		assert.JSONEq(t, `{"N":0}`, string(rec.State), "round %d", round)
		assert.Nil(t, rec.Applying, "round %d", round)
	}
}

// finishRunWhileOthersWrite: completing a run while other writers keep counting events on
// its record, on a bucket with three replicas, succeeds, and the run stays completed.
func finishRunWhileOthersWrite(t *testing.T, ctx context.Context, res *bus.Resources) {
	const writers, rounds = 8, 5
	store := instance.NewStore(res.Instances)
	log := slog.New(slog.DiscardHandler)
	for round := range rounds {
		wf := fmt.Sprintf("default:Echo:Supervisor Workflow:finish-%d", round)
		_, err := store.Put(ctx, instance.Record{Tenant: "default", WorkflowID: wf, RunID: "run-1", Status: instance.Running})
		require.NoError(t, err)
		l := hostsLive(t, ctx, store, wf, 1)[0]
		stop := natstest.CountEvents(t, ctx, store, "default", wf, writers)
		inst := &Instance{live: l, requestID: "req-1"}
		inst.Complete()
		err = (&Host{}).finishRun(ctx, log, inst, "run-1")
		stop()
		require.NoError(t, err, "round %d", round)
		rec, err := store.Get(ctx, "default", wf)
		require.NoError(t, err)
		assert.Equal(t, instance.Completed, rec.Status, "round %d", round)
		assert.Equal(t, "run-1", rec.RunID, "round %d", round)
	}
}
