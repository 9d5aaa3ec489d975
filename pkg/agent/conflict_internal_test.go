package agent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// TestConflictsOnReplicatedBus: the host's compare-and-set writes, racing others on one
// three-node cluster whose streams and buckets have three replicas, all succeed (the subtests).
// At the end it logs how many writes the cluster refused as conflicts.
func TestConflictsOnReplicatedBus(t *testing.T) {
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
