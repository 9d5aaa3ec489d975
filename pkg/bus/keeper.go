package bus

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/idle"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Marker timing of an InboxKeeper: a new marker after MarkerEvery acknowledgements, or after
// MarkerInterval with at least one.
const (
	MarkerEvery    = 256
	MarkerInterval = time.Second
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
// without, and MarkerInterval bounds it in time under light load.
//
// Each new marker replaces the keeper's previous one, which it deletes, and Stop deletes the
// last: a running host keeps one marker in the inbox, a stopped one none, and one that died
// leaves its last until the inbox's maximum age removes it. Markers are on subject.InboxMarker,
// which no partition consumer delivers. Each agent's inbox has a keeper in each host of the
// agent.
type InboxKeeper struct {
	js     jetstream.JetStream
	inbox  jetstream.Stream
	marker string // the subject of the inbox's markers
	acks   atomic.Uint64
	placed atomic.Uint64 // markers placed, for tests
	// loop places the markers (step): it rests while no request is acknowledged, and the next
	// acknowledgement wakes it; MarkerEvery acknowledgements kick it.
	loop *idle.Loop
	// The loop's: the context of Start; the acknowledgements counted at the newest marker, and
	// its sequence (0: none).
	ctx      context.Context
	at, last uint64
}

// NewInboxKeeper returns a keeper of agent's inbox stream; call Start to start it.
func NewInboxKeeper(js jetstream.JetStream, inbox jetstream.Stream, agent string) *InboxKeeper {
	return &InboxKeeper{js: js, inbox: inbox, marker: subject.InboxMarker(agent), loop: idle.NewLoop(MarkerInterval, 0)}
}

// Acked notes that a request was acknowledged.
func (k *InboxKeeper) Acked() {
	if k.acks.Add(1)%MarkerEvery == 0 {
		k.loop.Kick()
		return
	}
	k.loop.Wake()
}

// Start places a first marker at once, then a new one whenever requests were acknowledged (see
// InboxKeeper), with ctx, until Stop. Once a MarkerInterval passes without an acknowledgement it
// rests, and the next acknowledgement has a marker placed at once: an idle agent's keeper
// neither wakes every second nor holds a goroutine. A marker that cannot be placed or deleted is
// tried again later or left to the inbox's maximum age: markers only save work, and requests
// flow without them.
func (k *InboxKeeper) Start(ctx context.Context) {
	k.ctx = ctx
	k.at = k.acks.Load() - 1 // a first marker at once
	k.loop.Start(0, k.step)
}

// step places a marker if requests were acknowledged since the last; it reports whether none
// were.
func (k *InboxKeeper) step() (rest bool) {
	n := k.acks.Load()
	if n == k.at {
		return true
	}
	pctx, cancel := context.WithTimeout(k.ctx, MarkerInterval)
	defer cancel()
	ack, err := k.js.Publish(pctx, k.marker, nil, jetstream.WithExpectStream(k.inbox.CachedInfo().Config.Name))
	if err != nil {
		return false
	}
	k.placed.Add(1)
	k.at = n
	if k.last != 0 {
		k.remove(pctx, k.last)
	}
	k.last = ack.Sequence
	return false
}

// Stop stops placing markers and deletes the last; call it after Start's ctx ended.
func (k *InboxKeeper) Stop() {
	k.loop.Stop()
	if k.last != 0 {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), MarkerInterval)
		defer cancel()
		k.remove(dctx, k.last)
		k.last = 0
	}
}

// remove deletes the marker at seq; one that cannot be deleted is left to the inbox's maximum age.
func (k *InboxKeeper) remove(ctx context.Context, seq uint64) { _ = k.inbox.DeleteMsg(ctx, seq) }
