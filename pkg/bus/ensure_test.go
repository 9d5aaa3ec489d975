package bus_test

import (
	"context"
	"sort"
	"strings"
	"sync/atomic"
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

// TestInboxKeepsPartitionsWhileFull: the partition count of an agent's inbox that holds requests
// does not change under a process configured otherwise (the requests would stay where they are
// and hosts counting the old way would leave new ones unpulled); an inbox without requests
// changes.
func TestInboxKeepsPartitionsWhileFull(t *testing.T) {
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	partitions := func() int {
		t.Helper()
		s, err := js.Stream(ctx, subject.InboxStream("Echo"))
		require.NoError(t, err)
		n, ok := subject.TransformPartitions(s.CachedInfo().Config.SubjectTransform.Destination)
		require.True(t, ok, "the inbox transform names its partition count")
		return n
	}

	// inbox declares Echo's inbox as a process configured with cfg does.
	inbox := func(cfg bus.Config) (jetstream.Stream, error) {
		t.Helper()
		res, err := bus.Ensure(ctx, js, cfg)
		require.NoError(t, err)
		return res.InboxOf(ctx, "Echo")
	}

	first, err := inbox(bus.Config{})
	require.NoError(t, err)
	assert.Equal(t, bus.DefaultPartitions, partitions(), "a new inbox gets the default")

	_, err = inbox(bus.Config{Partitions: 32})
	require.NoError(t, err, "an empty inbox may change its partition count")
	assert.Equal(t, 32, partitions())

	_, err = js.Publish(ctx, subject.Inbox("Echo", "default", "wf", "p"), []byte("request"))
	require.NoError(t, err)
	_, err = inbox(bus.Config{Partitions: 8})
	require.ErrorIs(t, err, bus.ErrRepartition)
	assert.ErrorContains(t, err, "AGENTBUS_PARTITIONS=32", "the error names the count to set")
	assert.Equal(t, 32, partitions(), "the refused change left the inbox as it was")
	_, err = inbox(bus.Config{Partitions: 32})
	require.NoError(t, err, "the same count is fine with requests waiting")

	require.NoError(t, first.Purge(ctx))
	_, err = js.Publish(ctx, subject.InboxMarker("Echo"), nil)
	require.NoError(t, err)
	_, err = inbox(bus.Config{Partitions: 8})
	require.NoError(t, err, "a drained inbox may change, whatever markers it holds")
	assert.Equal(t, 8, partitions())
}

// TestEnsureMakesExistingBucketsReadFromTheLeader: buckets declared as nats.go declares them
// (direct gets on, as every bucket but instances, results and tenures was before it read from
// its leader) keep their records when Ensure declares them again without direct gets.
func TestEnsureMakesExistingBucketsReadFromTheLeader(t *testing.T) {
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []jetstream.KeyValueConfig{
		{Bucket: subject.KeysBucket, Description: "API keys by SHA-256 hash", History: 5},
		{Bucket: subject.TenantsBucket, Description: "tenants"},
		{Bucket: subject.RegistryBucket, Description: "registered agents and methods"},
		{Bucket: subject.SubscriptionsBucket, Description: "event subscriptions (outbound webhooks)"},
		{Bucket: subject.RemoteAgentsBucket, Description: "remote agents: HTTP endpoints served as agents"},
	} {
		c.Storage = jetstream.FileStorage
		kv, err := js.CreateOrUpdateKeyValue(ctx, c)
		require.NoError(t, err, c.Bucket)
		_, err = kv.PutString(ctx, "k", "kept")
		require.NoError(t, err, c.Bucket)
	}

	res, err := bus.Ensure(ctx, js, bus.Config{})
	require.NoError(t, err)
	buckets := []jetstream.KeyValue{res.Keys, res.Tenants, res.Registry, res.Subscriptions, res.RemoteAgents}
	for _, kv := range buckets {
		s, err := js.Stream(ctx, subject.KVStream(kv.Bucket()))
		require.NoError(t, err)
		assert.False(t, s.CachedInfo().Config.AllowDirect, "%s still answers direct gets", kv.Bucket())
		e, err := kv.Get(ctx, "k")
		if assert.NoError(t, err, kv.Bucket()) {
			assert.Equal(t, "kept", string(e.Value()), kv.Bucket())
		}
	}
}

// TestEnsureUpdatesOnlyWhatChanged: a second Ensure with the same configuration updates
// nothing (every process calls it when it starts); one with a setting changed updates the
// resources that setting shapes, and only those.
func TestEnsureUpdatesOnlyWhatChanged(t *testing.T) {
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	updated := make(chan string, 64)
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", func(m *nats.Msg) {
		updated <- strings.TrimPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM.UPDATED.")
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Unsubscribe()) }()
	updates := func() []string {
		t.Helper()
		// The advisories of the updates come before the answer to a request sent after them.
		require.NoError(t, nc.Flush())
		_, err := js.AccountInfo(ctx)
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		var names []string
		for {
			select {
			case n := <-updated:
				names = append(names, n)
			case <-time.After(200 * time.Millisecond):
				sort.Strings(names)
				return names
			}
		}
	}

	cfg := bus.Config{Partitions: 2}
	first, err := bus.Ensure(ctx, js, cfg)
	require.NoError(t, err)
	assert.Empty(t, updates(), "creating is not updating")

	again, err := bus.Ensure(ctx, js, cfg)
	require.NoError(t, err)
	assert.Empty(t, updates(), "nothing changed, nothing updated")
	require.NotNil(t, again.Instances)
	_, err = again.Instances.Put(ctx, "k", []byte("v"))
	require.NoError(t, err, "the handles of resources only read work")
	e, err := first.Instances.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "v", string(e.Value()))
	_, err = again.Files.PutBytes(ctx, "f", []byte("file"))
	require.NoError(t, err)

	cfg.HistoryMaxAge = 48 * time.Hour
	changed, err := bus.Ensure(ctx, js, cfg)
	require.NoError(t, err)
	assert.Equal(t, []string{subject.MessagesStream, subject.UsageStream, subject.KVStream(subject.TopicsBucket), subject.ObjectStream(subject.FilesStore)},
		updates(), "the history's age shapes the history, its topics, its files and the usage kept by day")
	info, err := changed.Messages.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, 48*time.Hour, info.Config.MaxAge)
	assert.NotEmpty(t, info.Config.Metadata[bus.DeclaredKey])
}

// TestEnsureAsksAgainWhenAnAnswerIsLost: a JetStream API request whose answer never comes (lost
// while a cluster elects its leaders) is sent again after the JetStream context's timeout, not
// awaited until Ensure's context ends.
func TestEnsureAsksAgainWhenAnAnswerIsLost(t *testing.T) {
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	// A relay between the JetStream API and the JetStream context Ensure is given, which
	// swallows the first request to create a stream.
	var lost atomic.Bool
	relay, err := nc.Subscribe("relayed.API.>", func(m *nats.Msg) {
		api := "$JS.API." + strings.TrimPrefix(m.Subject, "relayed.API.")
		if strings.HasPrefix(api, "$JS.API.STREAM.CREATE.") && lost.CompareAndSwap(false, true) {
			return
		}
		answer, err := nc.RequestMsg(&nats.Msg{Subject: api, Header: m.Header, Data: m.Data}, 5*time.Second)
		if err == nil {
			_ = m.RespondMsg(answer)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = relay.Unsubscribe() })
	js, err := jetstream.NewWithAPIPrefix(natstest.Conn(t, srv), "relayed.API", jetstream.WithDefaultTimeout(500*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = bus.Ensure(ctx, js, bus.Config{})
	require.NoError(t, err)
	assert.True(t, lost.Load(), "the relay swallowed a request")
	assert.NoError(t, ctx.Err(), "Ensure asked again before its context ended")
}
