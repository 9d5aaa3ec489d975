package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// TestEnsureMovesTheLegacyInbox: the requests of the one inbox every agent shared are moved to
// their agents' inboxes in their order, with their headers and bodies, each once although two
// processes move at the same time; every agent of the registry gets an inbox, and the shared
// one is deleted with its consumers.
func TestEnsureMovesTheLegacyInbox(t *testing.T) {
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const partitions = 4

	// The shared inbox as the version before made it, with a consumer, a marker and requests of
	// two agents interleaved.
	legacy, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     subject.LegacyInboxStream,
		Subjects: []string{subject.AllInboxSubjects},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "agentbus.in.*.*.*.*",
			Destination: fmt.Sprintf("agentbus.in.{{wildcard(1)}}.{{partition(%d,2,3)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}", partitions)},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: time.Minute,
	})
	require.NoError(t, err)
	_, err = legacy.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: subject.PartitionConsumer("Echo", 0),
		FilterSubject: subject.Partition("Echo", 0), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "agentbus.in.marker", nil)
	require.NoError(t, err)
	type sent struct{ agent, wf, body string }
	var all []sent
	for i := range 40 {
		s := sent{[]string{"Echo", "Other"}[i%2], "wf-" + strconv.Itoa(i%5), "request " + strconv.Itoa(i)}
		all = append(all, s)
		msg := &nats.Msg{Subject: subject.Inbox(s.agent, "default", s.wf, "p"), Data: []byte(s.body),
			Header: nats.Header{"Traceparent": {"trace-" + strconv.Itoa(i)}}}
		if i%3 == 0 {
			msg.Header.Set(subject.HeaderMsgID, "default:key-"+strconv.Itoa(i))
		}
		_, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	// A registered agent with nothing queued.
	reg, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subject.RegistryBucket})
	require.NoError(t, err)
	_, err = reg.Put(ctx, subject.AgentKey("Idle"), []byte(`{"name":"Idle"}`))
	require.NoError(t, err)

	// Two processes start at once.
	var wg sync.WaitGroup
	results := make([]*bus.Resources, 2)
	for i := range results {
		wg.Go(func() {
			pjs, err := jetstream.New(natstest.Conn(t, srv))
			if assert.NoError(t, err) {
				results[i], err = bus.Ensure(ctx, pjs, bus.Config{Partitions: partitions})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.NotNil(t, results[0])
	require.NotNil(t, results[1])
	assert.Equal(t, len(all), results[0].MovedRequests+results[1].MovedRequests, "requests moved, counted once")
	_, err = js.Stream(ctx, subject.LegacyInboxStream)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "the legacy inbox is deleted")
	_, err = js.Stream(ctx, subject.InboxStream("Idle"))
	require.NoError(t, err, "a registered agent has an inbox")

	for _, agent := range []string{"Echo", "Other"} {
		inbox, err := results[0].InboxOf(ctx, agent)
		require.NoError(t, err)
		info, err := inbox.Info(ctx)
		require.NoError(t, err)
		var want []sent
		for _, s := range all {
			if s.agent == agent {
				want = append(want, s)
			}
		}
		require.EqualValues(t, len(want), info.State.Msgs, "%s's requests, each once", agent)
		for i, w := range want {
			raw, err := inbox.GetMsg(ctx, info.State.FirstSeq+uint64(i))
			require.NoError(t, err)
			assert.Equal(t, w.body, string(raw.Data), "%s's request %d in its order", agent, i)
			stored, err := subject.ParseStoredInbox(raw.Subject)
			require.NoError(t, err)
			assert.Equal(t, agent, stored.Agent)
			assert.Equal(t, w.wf, stored.WorkflowID)
			assert.Equal(t, strconv.Itoa(subject.InboxPartition("default", w.wf, partitions)), stored.Partition)
			assert.NotEmpty(t, raw.Header.Get("Traceparent"), "headers kept")
		}
	}
}

// TestDeleteInbox: the inbox of an agent no host serves is deleted when it holds only its
// keepers' markers, and kept, still taking requests, when it holds one.
func TestDeleteInbox(t *testing.T) {
	res := natstest.Bus(t, bus.Config{Partitions: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gone := func(agent string) bool {
		_, err := res.JS.Stream(ctx, subject.InboxStream(agent))
		return errors.Is(err, jetstream.ErrStreamNotFound)
	}

	kept, err := res.DeleteInbox(ctx, "Never")
	require.NoError(t, err, "an agent without an inbox")
	assert.Zero(t, kept)

	_, err = res.InboxOf(ctx, "Idle")
	require.NoError(t, err)
	_, err = res.JS.Publish(ctx, subject.InboxMarker("Idle"), nil)
	require.NoError(t, err)
	kept, err = res.DeleteInbox(ctx, "Idle")
	require.NoError(t, err)
	assert.Zero(t, kept)
	assert.True(t, gone("Idle"), "an inbox holding only a marker is deleted")
	has, err := res.HasInbox(ctx, "Idle")
	require.NoError(t, err)
	assert.False(t, has)

	_, err = res.InboxOf(ctx, "Busy")
	require.NoError(t, err)
	_, err = res.JS.Publish(ctx, subject.InboxMarker("Busy"), nil)
	require.NoError(t, err)
	_, err = res.JS.Publish(ctx, subject.Inbox("Busy", "default", "wf", "p"), []byte("queued"))
	require.NoError(t, err)
	kept, err = res.DeleteInbox(ctx, "Busy")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), kept)
	require.False(t, gone("Busy"), "an inbox holding a request stays")
	_, err = res.JS.Publish(ctx, subject.Inbox("Busy", "default", "wf", "p"), []byte("after"))
	require.NoError(t, err, "and takes requests as before")
	s, err := res.JS.Stream(ctx, subject.InboxStream("Busy"))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), s.CachedInfo().State.Msgs, "the marker and both requests")
	requests, err := res.InboxRequests(ctx, "Busy")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), requests, "the requests, not the marker")
	_, err = res.InboxRequests(ctx, "Never")
	assert.ErrorIs(t, err, jetstream.ErrStreamNotFound, "an agent without an inbox")
	has, err = res.HasInbox(ctx, "Busy")
	require.NoError(t, err)
	assert.True(t, has)

	// An inbox parked by a DeleteInbox that stopped half-way (its process died) is declared
	// again by the agent's next registration or host.
	parked, err := bus.ParkInbox(ctx, res.JS, s, "Busy")
	require.NoError(t, err)
	assert.Equal(t, []string{subject.RetiredInbox("Busy")}, parked.CachedInfo().Config.Subjects)
	_, err = res.JS.Publish(ctx, subject.Inbox("Busy", "default", "wf", "p"), []byte("parked"))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "a parked inbox takes no request")
	_, err = res.InboxOf(ctx, "Busy")
	require.NoError(t, err)
	_, err = res.JS.Publish(ctx, subject.Inbox("Busy", "default", "wf", "p"), []byte("declared again"))
	require.NoError(t, err)

	// Made again after its deletion, an inbox is as before.
	_, err = res.InboxOf(ctx, "Idle")
	require.NoError(t, err)
	_, err = res.JS.Publish(ctx, subject.Inbox("Idle", "default", "wf", "p"), []byte("again"))
	require.NoError(t, err)
}
