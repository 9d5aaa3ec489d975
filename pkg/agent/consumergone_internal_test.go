package agent

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// consumerGone tells a consumer deleted alone, and one deleted with its stream (an inbox deleted
// by an operator, or by the removal of a remote agent), from one that is there: either deletion
// must stop the consumption, which otherwise pulls from nothing.
func TestConsumerGone(t *testing.T) {
	js := natstest.JetStream(t, natstest.Server(t, ""))
	ctx := t.Context()
	create := func(stream string) jetstream.Consumer {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}})
		require.NoError(t, err)
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
		require.NoError(t, err)
		return cons
	}

	there := create("THERE")
	assert.False(t, consumerGone(ctx, there))

	alone := create("ALONE")
	require.NoError(t, js.DeleteConsumer(ctx, "ALONE", "c"))
	assert.True(t, consumerGone(ctx, alone), "the consumer deleted")

	withStream := create("WITHSTREAM")
	require.NoError(t, js.DeleteStream(ctx, "WITHSTREAM"))
	assert.True(t, consumerGone(ctx, withStream), "the consumer deleted with its stream")
}
