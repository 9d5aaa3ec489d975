package bus

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// Marker timing of an InboxKeeper: a new marker after MarkerEvery acknowledgements, or after
// MarkerInterval with at least one; a marker stays in the inbox for MarkerTTL.
const (
	MarkerEvery    = 256
	MarkerInterval = time.Second
	MarkerTTL      = 3 * MarkerInterval
)

// InboxKeeper keeps a small marker message in the inbox stream while requests flow through it.
//
// The inbox is a work queue: acknowledging a request deletes it. When the delete empties the
// stream's newest storage block, the NATS file store closes that block and opens a new file,
// writes a tombstone and removes the old file, while it holds the stream's store lock. Under
// light load the inbox empties after nearly every request, so every call paid for a file
// creation and removal (at 2000 requests a second about a sixth of all CPU time, and the
// slowest calls waited on them: docs/performance.md). A marker stored after the newest block's
// other messages keeps that block from ever emptying. Once the block is full (4 MB) the store
// starts another, which has no marker until the next one is placed: placing one every
// MarkerEvery acknowledged requests (about 3 % of a block) bounds how much of the traffic runs
// without, and MarkerInterval bounds it in time under light load. Markers carry a TTL and expire
// by themselves, so a host that dies leaves nothing behind; they are on subject.InboxMarker,
// which no partition consumer delivers. An idle inbox holds none.
type InboxKeeper struct {
	js     jetstream.JetStream
	acks   atomic.Uint64
	wake   chan struct{}
	placed atomic.Uint64 // markers placed, for tests
}

// NewInboxKeeper returns a keeper of the inbox of js; call Run to start it.
func NewInboxKeeper(js jetstream.JetStream) *InboxKeeper {
	return &InboxKeeper{js: js, wake: make(chan struct{}, 1)}
}

// Acked notes that a request was acknowledged.
func (k *InboxKeeper) Acked() {
	if k.acks.Add(1)%MarkerEvery == 0 {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// Run places a first marker, then one whenever requests were acknowledged (see InboxKeeper),
// until ctx ends. A marker that cannot be placed is tried again later: it only saves work, and
// requests flow without it.
func (k *InboxKeeper) Run(ctx context.Context) {
	tick := time.NewTicker(MarkerInterval)
	defer tick.Stop()
	at := k.acks.Load() - 1 // a first marker at once
	for {
		if n := k.acks.Load(); n != at {
			pctx, cancel := context.WithTimeout(ctx, MarkerInterval)
			if _, err := k.js.Publish(pctx, subject.InboxMarker, nil, jetstream.WithMsgTTL(MarkerTTL),
				jetstream.WithExpectStream(subject.InboxStream)); err == nil {
				k.placed.Add(1)
				at = n
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-k.wake:
		}
	}
}
