package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// ErrBlobCorrupt means the bytes read back for a claim check do not match its size or hash.
var ErrBlobCorrupt = errors.New("blob does not match its reference")

// envelopeHeadroom is kept free below the NATS max payload for headers and envelope fields.
const envelopeHeadroom = 64 << 10

// Blobs keeps payloads that do not fit in one NATS message in the object store and hands out
// references to them (the claim-check pattern).
type Blobs struct {
	store jetstream.ObjectStore
	// inline is the largest payload sent inside a message.
	inline int
	// meter, when set, counts the bytes of the claims stored and deleted (Meter).
	meter ClaimMeter
}

// ClaimMeter counts, per tenant, the bytes of the claims a Blobs stores and deletes (package
// usage's Meter).
type ClaimMeter interface {
	// CountClaim adds bytes, negative for a claim deleted, to what tenant stored at stored.
	CountClaim(tenant string, bytes int64, stored time.Time)
}

// Meter makes b count the claims it stores and deletes in m, by the tenant their name starts
// with (subject.ClaimName). Deleting a claim then reads its size and time first.
func (b *Blobs) Meter(m ClaimMeter) { b.meter = m }

// NewBlobs returns Blobs that inline payloads up to maxPayload minus room for the envelope.
func NewBlobs(store jetstream.ObjectStore, maxPayload int64) *Blobs {
	inline := int(maxPayload) - envelopeHeadroom
	if inline < 0 {
		inline = 0
	}
	return &Blobs{store: store, inline: inline}
}

// Fits reports whether n bytes can travel inside a message.
func (b *Blobs) Fits(n int) bool { return n <= b.inline }

// Put stores data under name and returns its reference.
func (b *Blobs) Put(ctx context.Context, name string, data []byte) (*agentbusv1.BlobRef, error) {
	sum := sha256.Sum256(data)
	info, err := b.store.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("storing blob %s: %w", name, err)
	}
	if b.meter != nil {
		b.meter.CountClaim(subject.ClaimTenant(name), ObjectBytes(info), info.ModTime)
	}
	return &agentbusv1.BlobRef{Name: name, Size: int64(len(data)), Sha256: hex.EncodeToString(sum[:])}, nil
}

// Get reads the bytes a reference points at and checks them against it.
func (b *Blobs) Get(ctx context.Context, ref *agentbusv1.BlobRef) ([]byte, error) {
	data, err := ReadObject(ctx, b.store, ref.GetName())
	if err != nil {
		return nil, fmt.Errorf("reading blob %s: %w", ref.GetName(), err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != ref.GetSize() || hex.EncodeToString(sum[:]) != ref.GetSha256() {
		return nil, fmt.Errorf("reading blob %s: %w", ref.GetName(), ErrBlobCorrupt)
	}
	return data, nil
}

// ReadObject reads an object of store whole, into a buffer of the size the store records for
// it: one allocation, where nats.go's GetBytes grows a buffer from nothing and copies what it
// read at each step (megabytes, for a large request or file). Reading on to the object's end
// makes the store check its digest.
func ReadObject(ctx context.Context, store jetstream.ObjectStore, name string) ([]byte, error) {
	obj, err := store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil {
		return nil, err
	}
	data := make([]byte, info.Size)
	if _, err := io.ReadFull(obj, data); err != nil {
		return nil, err
	}
	var more [1]byte
	for {
		n, err := obj.Read(more[:])
		switch {
		case n > 0:
			return nil, fmt.Errorf("object %s is longer than its recorded %d bytes", name, info.Size)
		case errors.Is(err, io.EOF):
			return data, nil
		case err != nil:
			return nil, err
		}
	}
}

// Delete removes a blob that is no longer needed. A missing blob is not an error.
func (b *Blobs) Delete(ctx context.Context, ref *agentbusv1.BlobRef) error {
	if ref == nil {
		return nil
	}
	var info *jetstream.ObjectInfo
	if b.meter != nil {
		// What is subtracted is what was counted, on the day it was: a claim deleted after
		// midnight leaves no negative count behind once its day ages out.
		var err error
		if info, err = b.store.GetInfo(ctx, ref.GetName()); errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil
		} else if err != nil {
			return fmt.Errorf("deleting blob %s: %w", ref.GetName(), err)
		}
	}
	err := b.store.Delete(ctx, ref.GetName())
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("deleting blob %s: %w", ref.GetName(), err)
	}
	if info != nil && err == nil {
		b.meter.CountClaim(subject.ClaimTenant(ref.GetName()), -ObjectBytes(info), info.ModTime)
	}
	return nil
}
