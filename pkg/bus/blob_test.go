package bus_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// TestBlobsReadBackWhatTheirReferenceNames: a blob of several chunks reads back whole, and a
// reference whose size or digest differs from what is stored is refused as corrupt.
func TestBlobsReadBackWhatTheirReferenceNames(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	blobs := bus.NewBlobs(res.Claims, 1<<20)
	data := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.8 MB, many chunks
	ref, err := blobs.Put(ctx, "b", data)
	require.NoError(t, err)

	got, err := blobs.Get(ctx, ref)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "read back %d bytes of %d", len(got), len(data))

	for name, change := range map[string]func(*agentbusv1.BlobRef){
		"shorter":      func(r *agentbusv1.BlobRef) { r.Size-- },
		"longer":       func(r *agentbusv1.BlobRef) { r.Size++ },
		"negative":     func(r *agentbusv1.BlobRef) { r.Size = -1 },
		"other digest": func(r *agentbusv1.BlobRef) { r.Sha256 = ref.GetSha256()[1:] + "0" },
	} {
		bad := proto.Clone(ref).(*agentbusv1.BlobRef)
		change(bad)
		_, err := blobs.Get(ctx, bad)
		assert.ErrorIs(t, err, bus.ErrBlobCorrupt, name)
	}
	_, err = blobs.Get(ctx, &agentbusv1.BlobRef{Name: "missing", Size: 1, Sha256: ref.GetSha256()})
	assert.Error(t, err, "a missing blob")
	assert.NotErrorIs(t, err, bus.ErrBlobCorrupt, "a missing blob")
}
