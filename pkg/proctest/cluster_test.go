package proctest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// On a cluster of three NATS server processes with every stream and bucket replicated three
// times (and fsync on every write), the node leading the inbox stream is killed with SIGKILL
// under a load of idempotent count calls, five times, and started again on its data each time;
// the next kill waits until it has caught up (one node down at a time, as R3 allows) and the
// calls slowed by the election are answered (one failover at a time). The clients see no error:
// the ingress holds each call through the elections, publishing it again while no stream stores
// it, waiting for a host's heartbeat while none arrives, and answering from the result a host
// kept when the reply was lost with the node it passed through. No call is lost or counted
// twice, nothing is dead-lettered, and the extra latency of the calls under way during each
// election is printed.
func TestProcessesSurviveNATSLeaderKills(t *testing.T) {
	// Beside the two tests of this package that need little CPU and time nothing but a stop
	// (TestProcessesStopWithNATSGone, TestProcessesRelaysSurviveCallerHostKills); it times
	// nothing it judges, and waits for the cluster most of its 90 s.
	t.Parallel()
	bins := needProcesses(t)
	cluster := proctest.StartCluster(t, bins, 3, true)
	// Callers wait as long as the ingress's default webhook timeout, 30 s, not the 20 s of the
	// other multi-process tests: an election of each stream, bucket and consumer the dead node
	// led takes 4–9 s, and a call may need several. docs/architecture.md (What survives a
	// crash, and why) describes a call such a chain held for 22.6 s.
	sys := newSystem(t, bins, cluster.URLs(), "AGENTBUS_REPLICAS=3", "AGENTBUS_WEBHOOK_TIMEOUT=30s")
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, time.Minute)
	sys.waitServing(30 * time.Second)

	ctx := proctest.Context(t, 10*time.Minute)
	sys.requireReplicas(ctx, t, 3)

	const instances = 32
	counts := startCountLoad(sys, "leader", instances, 8)
	time.Sleep(2 * time.Second)

	const kills = 5
	var extras []time.Duration
	for round := range kills {
		leader := sys.streamLeader(ctx, t, subject.InboxStream("Echo"))
		node := cluster.Node(leader)
		require.NotNil(t, node, "inbox leader %q is not one of the cluster's nodes", leader)
		before := counts.accepted()
		killed := time.Now()
		node.Kill()
		time.Sleep(3 * time.Second)
		node.Restart(t)
		sys.waitCurrent(ctx, t, subject.InboxStream("Echo"), 3)
		node.WaitCurrent(t, 90*time.Second)
		counts.waitRecovered(t, time.Minute)
		time.Sleep(2 * time.Second)
		n, _ := counts.failedBetween(killed, time.Now())
		lat := counts.latencyAround(killed, time.Now())
		extras = append(extras, lat.extra())
		t.Logf("kill %d: inbox leader %s; %d client attempts failed; %d calls accepted meanwhile; %v",
			round+1, leader, n, counts.accepted()-before, lat)
	}
	counts.finish()

	slices.Sort(extras)
	t.Logf("extra latency of the slowest call under way during an election: median %v, worst %v over %d kills; %d count calls accepted, %d attempts failed",
		extras[len(extras)/2].Round(time.Millisecond), extras[len(extras)-1].Round(time.Millisecond), kills, counts.accepted(), len(counts.failures))
	assert.Empty(t, counts.failures, "callers with an Idempotency-Key saw errors: %s", counts.failureReasons())
	counts.verify(t)
	sys.noDeadLetters(t, 3)
	sys.requireReplicas(ctx, t, 3)
}

// streamLeader returns the server name of a stream's leader, waiting while it has none.
func (s *system) streamLeader(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	for {
		info, err := s.streamInfo(ctx, name)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info.Cluster.Leader
		}
		require.NoError(t, ctx.Err(), "stream %s has no leader", name)
		time.Sleep(100 * time.Millisecond)
	}
}

// streamInfo asks for a stream's info with a short timeout of its own: a request sent while the
// test's connection is moving to another node may never be answered.
func (s *system) streamInfo(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// waitCurrent waits until a stream has a leader and all its replicas are current again.
func (s *system) waitCurrent(ctx context.Context, t *testing.T, name string, replicas int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		info, err := s.streamInfo(ctx, name)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == replicas-1 {
			current := true
			for _, r := range info.Cluster.Replicas {
				current = current && r.Current && !r.Offline
			}
			if current {
				return
			}
		}
		require.NoError(t, ctx.Err(), "stream %s did not catch up", name)
		time.Sleep(200 * time.Millisecond)
	}
}

// requireReplicas checks that every stream, and so every KV bucket and object store, keeps the
// given number of replicas.
func (s *system) requireReplicas(ctx context.Context, t *testing.T, replicas int) {
	t.Helper()
	var infos []*jetstream.StreamInfo
	err := retry(ctx, func() error {
		// A timeout of its own, as streamInfo's: an answer lost in an election costs one try.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		infos = infos[:0]
		lister := s.js.ListStreams(ctx)
		for info := range lister.Info() {
			infos = append(infos, info)
		}
		return lister.Err()
	})
	require.NoError(t, err, "listing streams")
	var names []string
	for _, info := range infos {
		names = append(names, info.Config.Name)
		assert.Equal(t, replicas, info.Config.Replicas, "stream %s", info.Config.Name)
	}
	for _, want := range []string{subject.InboxStream("Echo"), subject.MessagesStream, subject.DeadLettersStream,
		subject.KVStream(subject.InstancesBucket), subject.KVStream(subject.HostsBucket), subject.KVStream(subject.KeysBucket)} {
		assert.Contains(t, names, want)
	}
}

// retry calls f until it succeeds or ctx ends, and returns f's last error.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
