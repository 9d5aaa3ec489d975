package bus_test

import (
	"bytes"
	"context"
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

// TestRecordBytesAreTheStreamsBytes: RecordBytes of every message stored, with headers and
// without, adds up to the bytes the stream reports.
func TestRecordBytesAreTheStreamsBytes(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t, natstest.Server(t, "")))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)

	var want int64
	for i, h := range []nats.Header{
		nil,
		{"A": {"1"}},
		{subject.HeaderPrev: {"12,11,10"}, jetstream.ExpectedLastSubjSeqHeader: {"0"}, subject.HeaderOrigin: {"7 1700000000000000000"}},
		{"Multi": {"a", "bb"}},
	} {
		m := &nats.Msg{Subject: "t.thread." + string(rune('a'+i)), Data: bytes.Repeat([]byte("x"), 100*i), Header: h}
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
		want += bus.RecordBytes(m.Subject, bus.HeaderBytes(m.Header), len(m.Data))
	}
	info, err := s.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(want), info.State.Bytes)
}

// TestObjectBytesAreTheObjectStoresBytes: ObjectBytes of every object Put stored (empty, one
// chunk, several) adds up to the bytes of the object store's stream.
func TestObjectBytesAreTheObjectStoresBytes(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t, natstest.Server(t, "")))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "O", Storage: jetstream.FileStorage})
	require.NoError(t, err)

	var want int64
	for i, size := range []int{0, 1, 128 << 10, 300_000} {
		meta := jetstream.ObjectMeta{Name: "acme/" + string(rune('a'+i)), Description: "report.pdf",
			Headers: nats.Header{"Content-Type": {"application/pdf"}}}
		info, err := store.Put(ctx, meta, bytes.NewReader(make([]byte, size)))
		require.NoError(t, err)
		want += bus.ObjectBytes(info)
	}
	status, err := store.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(want), status.Size())
}

// claimCounts is a bus.ClaimMeter that keeps what it is told.
type claimCounts struct {
	mu     sync.Mutex
	tenant map[string]int64
}

func (c *claimCounts) CountClaim(tenant string, bytes int64, _ time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tenant[tenant] += bytes
}

// TestBlobsCountTheirClaims: a metered Blobs counts a claim it stores for the tenant its name
// starts with, and takes it off when it deletes it; deleting it again counts nothing.
func TestBlobsCountTheirClaims(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts := &claimCounts{tenant: map[string]int64{}}
	blobs := bus.NewBlobs(res.Claims, 1<<20)
	blobs.Meter(counts)

	ref, err := blobs.Put(ctx, subject.ClaimName("acme", "r1", "request-x"), make([]byte, 200_000))
	require.NoError(t, err)
	status, err := res.Claims.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"acme": int64(status.Size())}, counts.tenant, "the claim as its store counts it")

	require.NoError(t, blobs.Delete(ctx, ref))
	assert.Equal(t, map[string]int64{"acme": 0}, counts.tenant)
	require.NoError(t, blobs.Delete(ctx, ref))
	assert.Equal(t, map[string]int64{"acme": 0}, counts.tenant, "a claim gone is not taken off twice")
}
