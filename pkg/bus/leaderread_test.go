package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestBucketsReadNothingStaleFromACutOffReplica: a replica of a bucket that does not hear from
// the others (a partition, a lagging node) answers direct gets with what it has. The buckets
// whose records an API call reads right after another call wrote them (keys, tenants, agents,
// subscriptions, remote agents) and those that decide whether a request already ran
// (instances, results, tenures) read from the stream's leader: through a server cut off from
// the cluster, a read of a key written meanwhile fails instead of answering the old value. The
// topics bucket, which keeps direct gets, shows what the others would read.
func TestBucketsReadNothingStaleFromACutOffReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	cl, cut := natstest.NewClusterWithCut(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(i int) jetstream.JetStream {
		nc, err := nats.Connect(cl.Servers[i].ClientURL(), nats.Name(t.Name()))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return js
	}
	js := connect(0)
	res, err := bus.Ensure(ctx, js, bus.Config{Replicas: 3, Partitions: 1})
	require.NoError(t, err)

	fromLeader := map[string]jetstream.KeyValue{
		"keys": res.Keys, "tenants": res.Tenants, "registry": res.Registry,
		"subscriptions": res.Subscriptions, "remote agents": res.RemoteAgents,
		"instances": res.Instances, "results": res.Results, "tenures": res.Tenures,
	}
	all := map[string]jetstream.KeyValue{"topics": res.Topics}
	for name, kv := range fromLeader {
		all[name] = kv
	}
	// The same buckets through the server that is cut off later, none of whose streams it leads.
	cutJS := connect(2)
	cutOff := map[string]jetstream.KeyValue{}
	for name, kv := range all {
		stream := subject.KVStream(kv.Bucket())
		leadElsewhere(ctx, t, js, stream, cl.Name(2))
		cutOff[name], err = cutJS.KeyValue(ctx, kv.Bucket())
		require.NoError(t, err)
		_, err = kv.PutString(ctx, "k", "old")
		require.NoError(t, err, name)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			e, err := cutOff[name].Get(ctx, "k")
			if assert.NoError(c, err) {
				assert.Equal(c, "old", string(e.Value()))
			}
		}, 10*time.Second, 20*time.Millisecond, "%s through the server to be cut off", name)
		// That read may have been answered by another replica: the cut-off one must hold the
		// old value itself before the cut, or it has nothing to answer with.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			cluster := streamCluster(ctx, c, js, stream)
			if cluster == nil {
				return
			}
			i := slices.IndexFunc(cluster.Replicas, func(p *jetstream.PeerInfo) bool { return p.Name == cl.Name(2) })
			if assert.NotEqual(c, -1, i, "a replica on %s", cl.Name(2)) {
				assert.True(c, cluster.Replicas[i].Current, "current")
				assert.Zero(c, cluster.Replicas[i].Lag, "lag")
			}
		}, 10*time.Second, 20*time.Millisecond, "%s: the replica to be cut off caught up", name)
	}

	// The cut lasts two to three seconds: a replica that hears nothing from its leader for some
	// seconds more stands for election and stops answering direct gets.
	cut.Cut()
	for name, kv := range all {
		_, err := kv.PutString(ctx, "k", "new")
		require.NoError(t, err, "%s, written with the others", name)
	}
	// A direct get goes to any replica, and only the cut-off one can answer: readCutOff asks
	// again until one answers (or 2 s have passed) and returns the last outcome.
	readCutOff := func(kv jetstream.KeyValue) (jetstream.KeyValueEntry, error) {
		var e jetstream.KeyValueEntry
		var err error
		for range 40 {
			rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			e, err = kv.Get(rctx, "k")
			rcancel()
			if err == nil {
				break
			}
		}
		return e, err
	}
	// The control first: the topics bucket reads the cut-off replica's old value.
	e, err := readCutOff(cutOff["topics"])
	require.NoError(t, err, "topics: no direct get answered by the cut-off replica")
	assert.Equal(t, "old", string(e.Value()), "topics: direct gets read the cut-off replica")
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name := range fromLeader {
		wg.Go(func() {
			e, err := readCutOff(cutOff[name])
			if err == nil {
				err = fmt.Errorf("read %q through a server cut off from its stream's leader", e.Value())
			}
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for name, err := range errs {
		assert.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout),
			"%s: %v", name, err)
	}

	cut.Restore()
	for name, kv := range cutOff {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			e, err := kv.Get(ctx, "k")
			if assert.NoError(c, err) {
				assert.Equal(c, "new", string(e.Value()))

			}
		}, 20*time.Second, 50*time.Millisecond, "%s once the server is back", name)
	}
}

// leadElsewhere makes a server other than avoid lead stream, asking its leader to step down
// until one does.
func leadElsewhere(ctx context.Context, t *testing.T, js jetstream.JetStream, stream, avoid string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// Each look has a second or two: a step-down request that reaches a replica which is
		// not (or no longer) the leader goes unanswered, and must not hold up the next look.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		cluster := streamCluster(pctx, c, js, stream)
		if cluster == nil {
			return
		}
		if cluster.Leader == avoid {
			_, err := js.Conn().RequestWithContext(pctx, subject.StreamStepdownAPI(stream), nil)
			assert.NoError(c, err)
		}
		assert.NotEqual(c, avoid, cluster.Leader)
		assert.NotEmpty(c, cluster.Leader)
	}, 20*time.Second, 100*time.Millisecond, "a leader of %s other than %s", stream, avoid)
}

// streamCluster returns what the stream's info says of its replicas, nil (failing c) when it
// cannot be read or names none.
func streamCluster(ctx context.Context, c *assert.CollectT, js jetstream.JetStream, stream string) *jetstream.ClusterInfo {
	s, err := js.Stream(ctx, stream)
	if !assert.NoError(c, err) {
		return nil
	}
	info, err := s.Info(ctx)
	if !assert.NoError(c, err) || !assert.NotNil(c, info.Cluster) {
		return nil
	}
	return info.Cluster
}
