package bus_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestKept: a kept message carries its error and attempts, is stored once per de-duplication
// id, pages under a filter, is found only under its filter, and is removed and purged; the
// bytes Add, Remove and Purge count for each tenant, and StoredBytes gives, are what the stream
// holds.
func TestKept(t *testing.T) {
	_, js, ctx := withStream(t, "KEPT", "kept.>")
	// Read by direct gets, as agentbus's kept streams are: their answers carry headers of their own.
	_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept.>"}, AllowDirect: true})
	require.NoError(t, err)
	stream, err := js.Stream(ctx, "KEPT")
	require.NoError(t, err)
	errNone := errors.New("no such thing")
	counted := make(map[string]int64) // by tenant
	var removedAt []time.Time
	k := bus.Kept{Stream: stream, JS: js, Noun: "thing", NotFound: errNone, Count: func(tenant string, n int64, at time.Time) {
		counted[tenant] += n
		if n < 0 {
			removedAt = append(removedAt, at)
		}
	}}
	streamBytes := func() int64 {
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return int64(info.State.Bytes)
	}

	var ids []uint64
	sizes := make(map[uint64]int64)
	for i, subj := range []string{"kept.a.1", "kept.b.1", "kept.a.2", "kept.a.3"} {
		tenant := strings.Split(subj, ".")[1]
		before := counted[tenant]
		id, err := k.Add(ctx, tenant, &nats.Msg{Subject: subj, Data: []byte(strings.Repeat("x", 10*i))}, subj, "failed\nbadly", uint64(i+1))
		require.NoError(t, err)
		ids = append(ids, id)
		sizes[id] = counted[tenant] - before
	}
	assert.Equal(t, streamBytes(), counted["a"]+counted["b"], "what Add counted is what the stream holds")
	before := counted["a"]
	again, err := k.Add(ctx, "a", &nats.Msg{Subject: "kept.a.1"}, "kept.a.1", "failed", 9)
	require.NoError(t, err)
	assert.Equal(t, ids[0], again, "a second Add of one id stores nothing new")
	assert.Equal(t, before, counted["a"], "and counts nothing")

	raw, err := k.Get(ctx, ids[2], "kept.a.>")
	require.NoError(t, err)
	assert.Equal(t, sizes[ids[2]], bus.StoredBytes(raw), "a direct get's own headers are not counted")
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

	raw, err = k.Get(ctx, ids[3], "kept.a.>")
	require.NoError(t, err)
	require.NoError(t, k.Remove(ctx, "a", raw))
	assert.Equal(t, sizes[ids[0]]+sizes[ids[2]], counted["a"], "counted off by Remove")
	_, err = k.Get(ctx, ids[3], "kept.a.>")
	assert.ErrorIs(t, err, errNone, "removed")
	assert.ErrorIs(t, k.Remove(ctx, "a", raw), errNone, "removed again")
	assert.Equal(t, sizes[ids[0]]+sizes[ids[2]], counted["a"], "a removal not found counts nothing")
	require.NoError(t, k.Purge(ctx, "kept.a.>", "a"))
	assert.Zero(t, counted["a"], "counted off by Purge")
	require.Len(t, removedAt, 3)
	for _, at := range removedAt {
		assert.WithinDuration(t, time.Now(), at, time.Minute, "counted off on the day it was kept")
	}
	page, _, err = k.Page(ctx, "kept.>", 0, 0)
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, ids[1], page[0].Sequence, "only the other filter's is left")
	assert.Equal(t, sizes[ids[1]], streamBytes())
	assert.Equal(t, counted["b"], streamBytes(), "the other tenant's count")
	require.NoError(t, k.Purge(ctx, "kept.a.>", "a"))
	assert.Len(t, removedAt, 3, "nothing left to purge")
}
