package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// TestAwaitResultThroughALostReply: a wait for a request's result whose request to begin its
// watch goes unanswered (a NATS cluster electing its leaders may lose it) tries again and gets
// the result, well before the call's deadline.
func TestAwaitResultThroughALostReply(t *testing.T) {
	s := natstest.Server(t, "")
	res, err := bus.Ensure(t.Context(), natstest.JetStream(t, s), bus.Config{Partitions: 1})
	require.NoError(t, err)
	lossy := natstest.LoseFirst(s.Server, "$JS.API.CONSUMER.CREATE."+subject.KVStream(subject.ResultsBucket)+".")
	js, err := jetstream.New(lossy.Connect(t, "awaiting"))
	require.NoError(t, err)
	results, err := js.KeyValue(t.Context(), subject.ResultsBucket)
	require.NoError(t, err)

	rep, err := proto.Marshal(&agentbusv1.Reply{RequestId: "r1", Content: []byte("done")})
	require.NoError(t, err)
	_, err = res.Results.Put(t.Context(), subject.ResultKey("default", "r1"), rep)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	got, err := bus.AwaitResult(ctx, results, "default", "r1")
	require.NoError(t, err)
	assert.EqualValues(t, 1, lossy.Dropped.Load(), "requests to begin the watch lost")
	assert.Equal(t, "done", string(got.GetContent()))
	assert.Less(t, time.Since(start), 15*time.Second, "the wait took the call's deadline")
}
