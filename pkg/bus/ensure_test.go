package bus_test

import (
	"context"
	"sort"
	"strings"
	"sync"
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

// TestInboxKeepsItsPartitions: the partition count of an agent's inbox is the inbox's. A
// process configured otherwise adopts it, so processes of one deployment agree on it whatever
// their settings; Repartition changes it, and refuses while the inbox holds requests (they would
// stay in partitions the new consumers do not pull). Processes creating the inbox at once, with
// different counts, get one inbox with one count.
func TestInboxKeepsItsPartitions(t *testing.T) {
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	partitions := func(agent string) int {
		t.Helper()
		s, err := js.Stream(ctx, subject.InboxStream(agent))
		require.NoError(t, err)
		n, ok := subject.TransformPartitions(s.CachedInfo().Config.SubjectTransform.Destination)
		require.True(t, ok, "the inbox transform names its partition count")
		assert.Equal(t, n, bus.InboxPartitions(s))
		return n
	}
	// resources are a process's, configured with partitions.
	resources := func(partitions int) *bus.Resources {
		t.Helper()
		res, err := bus.Ensure(ctx, js, bus.Config{Partitions: partitions})
		require.NoError(t, err)
		return res
	}

	first, err := resources(0).InboxOf(ctx, "Echo")
	require.NoError(t, err)
	assert.Equal(t, bus.DefaultPartitions, partitions("Echo"), "a new inbox gets the configured count")

	other := resources(32)
	s, err := other.InboxOf(ctx, "Echo")
	require.NoError(t, err)
	assert.Equal(t, bus.DefaultPartitions, bus.InboxPartitions(s), "a process configured otherwise adopts the inbox's count")
	assert.Equal(t, bus.DefaultPartitions, partitions("Echo"))
	n, err := other.PartitionsOf(ctx, "Echo")
	require.NoError(t, err)
	assert.Equal(t, bus.DefaultPartitions, n)
	n, err = other.PartitionsOf(ctx, "Nobody")
	require.NoError(t, err)
	assert.Equal(t, 32, n, "an agent without an inbox: the count its inbox would get")

	s, err = other.Repartition(ctx, "Echo", 32)
	require.NoError(t, err, "an empty inbox may change its partition count")
	assert.Equal(t, 32, bus.InboxPartitions(s))
	assert.Equal(t, 32, partitions("Echo"))

	_, err = js.Publish(ctx, subject.Inbox("Echo", "default", "wf", "p"), []byte("request"))
	require.NoError(t, err)
	_, err = other.Repartition(ctx, "Echo", 8)
	require.ErrorIs(t, err, bus.ErrRepartition)
	assert.ErrorContains(t, err, "holds 1 requests in 32 partitions")
	assert.Equal(t, 32, partitions("Echo"), "the refused change left the inbox as it was")
	_, err = resources(8).InboxOf(ctx, "Echo")
	require.NoError(t, err, "a process configured otherwise still starts")
	assert.Equal(t, 32, partitions("Echo"))
	_, err = js.Publish(ctx, subject.Inbox("Echo", "default", "wf", "p"), []byte("request"))
	require.NoError(t, err, "the inbox takes requests after the refusal")

	require.NoError(t, first.Purge(ctx))
	_, err = js.Publish(ctx, subject.InboxMarker("Echo"), nil)
	require.NoError(t, err)
	_, err = other.Repartition(ctx, "Echo", 8)
	require.NoError(t, err, "a drained inbox may change, whatever markers it holds")
	assert.Equal(t, 8, partitions("Echo"))

	// Created at once by processes configured with 2, 4, 8 and 16: one count for all.
	var (
		wg     sync.WaitGroup
		counts [4]int
	)
	for i := range counts {
		res := resources(2 << i)
		wg.Go(func() {
			s, err := res.InboxOf(ctx, "Raced")
			if assert.NoError(t, err) {
				counts[i] = bus.InboxPartitions(s)
			}
		})
	}
	wg.Wait()
	for _, c := range counts {
		assert.Equal(t, partitions("Raced"), c, "every process got the count the inbox has")
	}
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
