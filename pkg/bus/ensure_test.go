package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestEnsureKeepsPartitionsOfAFullInbox: the partition count of an inbox that holds requests
// does not change under a process configured otherwise (the requests would stay where they are
// and hosts counting the old way would leave new ones unpulled); an inbox without requests
// changes.
func TestEnsureKeepsPartitionsOfAFullInbox(t *testing.T) {
	srv := natstest.Server(t, "")
	js, err := jetstream.New(natstest.Conn(t, srv))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	partitions := func() int {
		t.Helper()
		s, err := js.Stream(ctx, subject.InboxStream)
		require.NoError(t, err)
		n, ok := subject.TransformPartitions(s.CachedInfo().Config.SubjectTransform.Destination)
		require.True(t, ok, "the inbox transform names its partition count")
		return n
	}

	res, err := bus.Ensure(ctx, js, bus.Config{})
	require.NoError(t, err)
	assert.Equal(t, bus.DefaultPartitions, res.Config.PartitionCount())
	assert.Equal(t, bus.DefaultPartitions, partitions(), "a new inbox gets the default")

	_, err = bus.Ensure(ctx, js, bus.Config{Partitions: 32})
	require.NoError(t, err, "an empty inbox may change its partition count")
	assert.Equal(t, 32, partitions())

	_, err = js.Publish(ctx, subject.Inbox("Echo", "default", "wf", "p"), []byte("request"))
	require.NoError(t, err)
	_, err = bus.Ensure(ctx, js, bus.Config{Partitions: 8})
	require.ErrorIs(t, err, bus.ErrRepartition)
	assert.ErrorContains(t, err, "AGENTBUS_PARTITIONS=32", "the error names the count to set")
	assert.Equal(t, 32, partitions(), "the refused change left the inbox as it was")
	_, err = bus.Ensure(ctx, js, bus.Config{Partitions: 32})
	require.NoError(t, err, "the same count is fine with requests waiting")

	require.NoError(t, res.Inbox.Purge(ctx))
	_, err = js.Publish(ctx, subject.InboxMarker, nil)
	require.NoError(t, err)
	_, err = bus.Ensure(ctx, js, bus.Config{Partitions: 8})
	require.NoError(t, err, "a drained inbox may change, whatever markers it holds")
	assert.Equal(t, 8, partitions())
}
