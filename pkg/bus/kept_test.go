package bus_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestKept: a kept message carries its error and attempts, is stored once per de-duplication
// id, pages under a filter, is found only under its filter, and is removed and purged.
func TestKept(t *testing.T) {
	_, js, ctx := withStream(t, "KEPT", "kept.>")
	stream, err := js.Stream(ctx, "KEPT")
	require.NoError(t, err)
	errNone := errors.New("no such thing")
	k := bus.Kept{Stream: stream, JS: js, Noun: "thing", NotFound: errNone}

	var ids []uint64
	for i, subj := range []string{"kept.a.1", "kept.b.1", "kept.a.2", "kept.a.3"} {
		id, err := k.Add(ctx, &nats.Msg{Subject: subj, Data: []byte("x")}, subj, "failed\nbadly", uint64(i+1))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	again, err := k.Add(ctx, &nats.Msg{Subject: "kept.a.1"}, "kept.a.1", "failed", 9)
	require.NoError(t, err)
	assert.Equal(t, ids[0], again, "a second Add of one id stores nothing new")

	raw, err := k.Get(ctx, ids[2], "kept.a.>")
	require.NoError(t, err)
	assert.Equal(t, 3, bus.Attempts(raw))
	assert.Equal(t, bus.HeaderSafe("failed\nbadly"), raw.Header.Get(subject.HeaderError))
	for _, id := range []uint64{0, ids[1], 99} {
		_, err := k.Get(ctx, id, "kept.a.>")
		assert.ErrorIs(t, err, errNone, "id %d", id)
	}

	page, next, err := k.Page(ctx, "kept.a.>", 0, 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, []uint64{ids[0], ids[2]}, []uint64{page[0].Sequence, page[1].Sequence})
	assert.Equal(t, ids[2], next)
	page, next, err = k.Page(ctx, "kept.a.>", next, 2)
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, ids[3], page[0].Sequence)
	assert.Zero(t, next, "the last page")

	require.NoError(t, k.Remove(ctx, ids[3]))
	_, err = k.Get(ctx, ids[3], "kept.a.>")
	assert.ErrorIs(t, err, errNone, "removed")
	require.NoError(t, k.Purge(ctx, "kept.a.>", "a"))
	page, _, err = k.Page(ctx, "kept.>", 0, 0)
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, ids[1], page[0].Sequence, "only the other filter's is left")
}
