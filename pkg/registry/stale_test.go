package registry

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsembed"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// clock is a settable time source safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestStaleHeartbeatIsNotLive feeds real bucket entries to a Directory with a controlled clock:
// a host whose last heartbeat arrived more than DeadAfter ago is taken for dead (its
// heartbeat expires from the bucket without a delete marker, so the Directory must age it out).
func TestStaleHeartbeatIsNotLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, Beat(ctx, res.Hosts, Host{ID: "h1", Agents: []string{"Echo"}}))
	entry, err := res.Hosts.Get(ctx, subject.HostKey("h1"))
	require.NoError(t, err)

	clk := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &Directory{log: slog.New(slog.DiscardHandler), now: clk.Now, agents: map[string]Agent{}, hosts: map[string]seenHost{}, changed: make(chan struct{}, 1)}
	d.applyHost(entry, false)

	tests := []struct {
		name    string
		advance time.Duration
		want    bool
	}{
		{name: "fresh", advance: 0, want: true},
		{name: "one interval old", advance: HeartbeatInterval, want: true},
		{name: "just under DeadAfter", advance: DeadAfter - HeartbeatInterval - time.Millisecond, want: true},
		{name: "past DeadAfter", advance: 2 * time.Millisecond, want: false},
	}
	for _, tt := range tests {
		// Subtests run in order and share the clock.
		t.Run(tt.name, func(t *testing.T) {
			clk.Advance(tt.advance)
			assert.Equal(t, tt.want, d.Live("Echo"), "Live(Echo) %v after the last beat", clk.Now().Sub(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
		})
	}

	// The next beat revives it.
	d.applyHost(entry, false)
	assert.True(t, d.Live("Echo"), "Echo not live after a fresh beat")
}

// TestStalledHeartbeatsAreReadFromTheBucket: when no heartbeat of any host has arrived for
// DeadAfter, the Directory reads the known hosts' heartbeats from the bucket. What the bucket
// holds decides (here heartbeats as old as the silence: the hosts are dead); when the bucket
// cannot be read (its stream electing a leader, here the server gone), the hosts count as they
// stood when the heartbeats stopped: the newest host is live, one already stale then is not.
func TestStalledHeartbeatsAreReadFromTheBucket(t *testing.T) {
	srv, hosts, entry := heartbeatBucket(t)
	old, last := entry("old"), entry("last")

	// directory sees old's heartbeat, then last's DeadAfter+1s later; its clock starts at the
	// bucket's time, so that what it reads back is dated as the bucket stored it.
	directory := func() (*Directory, *clock) {
		clk := &clock{t: time.Now()}
		d := &Directory{log: slog.New(slog.DiscardHandler), now: clk.Now, agents: map[string]Agent{}, hosts: map[string]seenHost{},
			changed: make(chan struct{}, 1), hostsKV: hosts}
		d.applyHost(old, false)
		clk.Advance(DeadAfter + time.Second)
		d.applyHost(last, false)
		return d, clk
	}

	d, clk := directory()
	assert.Equal(t, []string{"last"}, liveEcho(d), "heartbeats arriving")
	clk.Advance(DeadAfter + time.Second)
	assert.Empty(t, liveEcho(d), "no heartbeat for 4s, and the bucket holds none newer: every host is dead")
	assert.False(t, d.AnyLive())

	d, clk = directory()
	srv.Shutdown()
	clk.Advance(DeadAfter + time.Second)
	assert.Equal(t, []string{"last"}, liveEcho(d), "no heartbeat, and the bucket cannot be read: hosts as they stood")
	assert.True(t, d.Live("Echo"))
}

// TestHostsStandWhileTheBucketGetsItsLeaderBack: the heartbeats stop because the bucket's stream
// lost its leader (a NATS node died); while the bucket cannot be read the hosts count as they
// stood. When it has a leader again it still holds only the old heartbeats, since the hosts'
// writes failed meanwhile: for DeadAfter they count as they stood, giving them the time to
// write again, and only then does what the bucket holds decide.
func TestHostsStandWhileTheBucketGetsItsLeaderBack(t *testing.T) {
	down, downKV, _ := heartbeatBucket(t)
	_, hosts, entry := heartbeatBucket(t)
	e := entry("h")
	clk := &clock{t: time.Now()}
	d := &Directory{log: slog.New(slog.DiscardHandler), now: clk.Now, agents: map[string]Agent{}, hosts: map[string]seenHost{},
		changed: make(chan struct{}, 1), hostsKV: downKV}
	d.applyHost(e, false)
	down.Shutdown()

	clk.Advance(DeadAfter + time.Second)
	assert.True(t, d.Live("Echo"), "the bucket cannot be read: as the host stood")

	d.hostsKV = hosts // back, with the old heartbeat only
	clk.Advance(probeEvery)
	assert.True(t, d.Live("Echo"), "the bucket has a leader again since less than DeadAfter: as the host stood")
	clk.Advance(DeadAfter - probeEvery - time.Millisecond)
	assert.True(t, d.Live("Echo"), "still within DeadAfter of the bucket's return")
	clk.Advance(probeEvery) // the bucket is read at most every probeEvery
	assert.False(t, d.Live("Echo"), "DeadAfter after the bucket's return, it holds no newer heartbeat: dead")

	d.applyHost(entry("h"), false)
	assert.True(t, d.Live("Echo"), "a new heartbeat revives it")
}

// TestStalledWatchReadsFreshHeartbeats: heartbeats go on reaching the bucket but not the
// Directory's watch (its consumer was on a NATS node that died). Once no heartbeat has arrived
// for DeadAfter, the Directory reads them from the bucket and the host stays live; a
// Directory that cannot read the bucket takes it for dead.
func TestStalledWatchReadsFreshHeartbeats(t *testing.T) {
	_, hosts, entry := heartbeatBucket(t)
	beat := func() jetstream.KeyValueEntry { return entry("h") }
	newDirectory := func(kv jetstream.KeyValue) *Directory {
		return &Directory{log: slog.New(slog.DiscardHandler), now: time.Now, agents: map[string]Agent{}, hosts: map[string]seenHost{},
			changed: make(chan struct{}, 1), hostsKV: kv}
	}
	reading, blind := newDirectory(hosts), newDirectory(nil)
	e := beat()
	reading.applyHost(e, false)
	blind.applyHost(e, false)
	// The host beats on; neither Directory's watch delivers it.
	deadline := time.Now().Add(DeadAfter + 500*time.Millisecond)
	for time.Now().Before(deadline) {
		beat()
		time.Sleep(HeartbeatInterval / 2)
	}
	assert.True(t, reading.Live("Echo"), "the host beats in the bucket: live")
	assert.False(t, blind.Live("Echo"), "without the bucket: taken for dead")
}

// heartbeatBucket starts a server with agentbus's buckets and returns it, the hosts bucket, and
// a function that writes a heartbeat of host id (running Echo) and returns its entry.
func heartbeatBucket(t *testing.T) (*natsembed.Server, jetstream.KeyValue, func(id string) jetstream.KeyValueEntry) {
	t.Helper()
	ctx := t.Context()
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(t, err)
	return srv, res.Hosts, func(id string) jetstream.KeyValueEntry {
		require.NoError(t, Beat(ctx, res.Hosts, Host{ID: id, Agents: []string{"Echo"}}))
		e, err := res.Hosts.Get(ctx, subject.HostKey(id))
		require.NoError(t, err)
		return e
	}
}

// TestLeaderlessBucketKeepsTheHosts: on a three-node cluster, the hosts bucket's stream loses its
// leader and the quorum to elect another (two nodes die). The remaining replica still answers
// reads of the old heartbeats and the stream's info, without a leader: no heartbeat can be
// written, so the hosts count as they stood.
func TestLeaderlessBucketKeepsTheHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	cl := natstest.NewCluster(t, 3)
	// From here: starting the cluster may take a second attempt of 30 s on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(i int) jetstream.JetStream {
		nc, err := nats.Connect(cl.Servers[i].ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return js
	}
	js := connect(0)
	hosts, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subject.HostsBucket, Replicas: 3, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	require.NoError(t, Beat(ctx, hosts, Host{ID: "h", Agents: []string{"Echo"}}))
	e, err := hosts.Get(ctx, subject.HostKey("h"))
	require.NoError(t, err)

	// Keep a replica that is not the leader, and kill the two others once the leader counts it
	// current: a replica that had not yet joined the stream's group, or lagged behind it, would
	// have nothing to answer with (the stream's assignment reaches each server on its own).
	var leader string
	var keep int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := hosts.Status(ctx)
		if !assert.NoError(c, err) {
			return
		}
		cluster := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster
		if !assert.NotNil(c, cluster) || !assert.NotEmpty(c, cluster.Leader, "a leader") {
			return
		}
		leader = cluster.Leader
		keep = (cl.Index(leader) + 1) % 3
		i := slices.IndexFunc(cluster.Replicas, func(p *jetstream.PeerInfo) bool { return p.Name == cl.Name(keep) })
		if assert.NotEqual(c, -1, i, "a replica on %s", cl.Name(keep)) {
			assert.True(c, cluster.Replicas[i].Current, "current")
			assert.Zero(c, cluster.Replicas[i].Lag, "lag")
		}
	}, 10*time.Second, 20*time.Millisecond, "the replica to be kept caught up")
	kept, err := connect(keep).KeyValue(ctx, subject.HostsBucket)
	require.NoError(t, err)
	// The other follower first: had the leader died first, the two left could elect the kept
	// replica, which would then lead, without a quorum, until it noticed (10 to 20 s).
	cl.Kill((keep + 1) % 3)
	cl.Kill(cl.Index(leader))
	// The kept replica answers the stream's info as leaderless once it has stood for election
	// (some seconds after it last heard its leader) and JetStream has run on its server for
	// 10 s: about 10 s after the cluster started. A failure shows the last answer.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := kept.Status(sctx)
		if assert.NoError(c, err) {
			info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
			assert.False(c, hasLeader(st), "a leader, or no cluster info: %+v", info.Cluster)
		}
	}, 20*time.Second, 100*time.Millisecond, "the kept replica answers the stream's info, without a leader (the leader was %s, %s was kept)", leader, cl.Name(keep))
	_, err = kept.Get(ctx, subject.HostKey("h"))
	require.NoError(t, err, "the kept replica answers reads")

	clk := &clock{t: time.Now()}
	d := &Directory{log: slog.New(slog.DiscardHandler), now: clk.Now, agents: map[string]Agent{}, hosts: map[string]seenHost{},
		changed: make(chan struct{}, 1), hostsKV: kept}
	d.applyHost(e, false)
	clk.Advance(DeadAfter + time.Second)
	assert.True(t, d.Live("Echo"), "the bucket has no leader: as the host stood")
}

// TestHostsStandWhenHeartbeatsResume: after a silence of every host's heartbeats that is the
// hosts bucket's (it could not be read during the silence; or the silence was shorter than
// DeadAfter), the first heartbeat through does not make the others dead: they count as they
// stood when the silence began for DeadAfter, in which they write their next. Without a
// silence, a host whose heartbeats stop while another's go on is dead after DeadAfter.
func TestHostsStandWhenHeartbeatsResume(t *testing.T) {
	down, downKV, _ := heartbeatBucket(t)
	_, _, entry := heartbeatBucket(t)
	h1, h2 := entry("h1"), entry("h2")
	start := func(kv jetstream.KeyValue) (*Directory, *clock) {
		clk := &clock{t: time.Now()}
		d := &Directory{log: slog.New(slog.DiscardHandler), now: clk.Now, agents: map[string]Agent{}, hosts: map[string]seenHost{},
			changed: make(chan struct{}, 1), hostsKV: kv}
		d.applyHost(h1, false)
		d.applyHost(h2, false)
		return d, clk
	}

	// A long silence while the bucket cannot be read.
	d, clk := start(downKV)
	down.Shutdown()
	clk.Advance(4 * time.Second)
	assert.Equal(t, []string{"h1", "h2"}, liveEcho(d), "during the silence the bucket cannot be read: as they stood")
	d.applyHost(h2, false)
	assert.Equal(t, []string{"h1", "h2"}, liveEcho(d), "right after the silence: as they stood")
	for range 2 {
		clk.Advance(HeartbeatInterval)
		d.applyHost(h2, false)
		assert.Equal(t, []string{"h1", "h2"}, liveEcho(d), "within DeadAfter of the silence's end")
	}
	clk.Advance(DeadAfter - 2*HeartbeatInterval - time.Millisecond)
	assert.Equal(t, []string{"h1", "h2"}, liveEcho(d), "just under DeadAfter after the silence")
	clk.Advance(2 * time.Millisecond)
	d.applyHost(h2, false)
	assert.Equal(t, []string{"h2"}, liveEcho(d), "DeadAfter after the silence, h1 wrote nothing: dead")

	// A silence shorter than DeadAfter, whatever the bucket.
	d, clk = start(nil)
	clk.Advance(2 * time.Second)
	d.applyHost(h2, false)
	clk.Advance(DeadAfter - 2*time.Second + HeartbeatInterval) // h1's heartbeat is DeadAfter old
	d.applyHost(h2, false)
	assert.Equal(t, []string{"h1", "h2"}, liveEcho(d), "within DeadAfter of a short silence's end")
	clk.Advance(2*time.Second - HeartbeatInterval)
	d.applyHost(h2, false)
	assert.Equal(t, []string{"h2"}, liveEcho(d), "DeadAfter after a short silence, h1 wrote nothing: dead")

	// No silence: h2 goes on beating.
	d, clk = start(nil)
	for range 4 {
		clk.Advance(HeartbeatInterval)
		d.applyHost(h2, false)
	}
	assert.Equal(t, []string{"h2"}, liveEcho(d), "h2 went on beating, h1 did not for %v: dead", 4*HeartbeatInterval)
}

// liveEcho returns the ids of the live hosts of Echo, in order.
func liveEcho(d *Directory) []string {
	var ids []string
	for _, h := range d.LiveHosts("Echo") {
		ids = append(ids, h.ID)
	}
	return ids
}
