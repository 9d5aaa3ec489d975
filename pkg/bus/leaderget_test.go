package bus_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
)

// LeaderGet and LeaderLast read what the stream holds, headers included, as jetstream's
// gets do, and answer jetstream.ErrMsgNotFound for what it does not hold.
func TestLeaderReads(t *testing.T) {
	nc, js, ctx := withStream(t, "LEADERREAD", "lr.>")
	for i, subj := range []string{"lr.a", "lr.b", "lr.a"} {
		m := nats.NewMsg(subj)
		m.Data = []byte{byte('0' + i)}
		m.Header.Set("X-N", string(m.Data))
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}

	m, err := bus.LeaderGet(ctx, nc, "LEADERREAD", 2, "")
	require.NoError(t, err)
	assert.Equal(t, "lr.b", m.Subject, "message 2")
	assert.Equal(t, "1", m.Header.Get("X-N"), "message 2's header")
	m, err = bus.LeaderGet(ctx, nc, "LEADERREAD", 2, "lr.a")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), m.Sequence, "the first lr.a at or after 2")

	m, err = bus.LeaderLast(ctx, nc, "LEADERREAD", "lr.a")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), m.Sequence, "the last lr.a")
	assert.Equal(t, "2", string(m.Data), "the last lr.a's data")
	assert.Equal(t, "2", m.Header.Get("X-N"), "the last lr.a's header")

	_, err = bus.LeaderLast(ctx, nc, "LEADERREAD", "lr.none")
	assert.ErrorIs(t, err, jetstream.ErrMsgNotFound, "a subject without messages")
	_, err = bus.LeaderGet(ctx, nc, "LEADERREAD", 9, "")
	assert.ErrorIs(t, err, jetstream.ErrMsgNotFound, "a sequence past the last")
}
