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
// Each new marker replaces the keeper's previous one, which it deletes, and Run deletes the last
// when it returns: a running host keeps one marker in the inbox, a stopped one none, and one that
// died leaves its last until the inbox's maximum age removes it. Markers are on
// subject.InboxMarker, which no partition consumer delivers. Each agent's inbox has a keeper in
// each host of the agent.
type InboxKeeper struct {
	js     jetstream.JetStream
	inbox  jetstream.Stream
	marker string // the subject of the inbox's markers
	acks   atomic.Uint64
	early  chan struct{} // MarkerEvery acknowledgements since the last marker
	placed atomic.Uint64 // markers placed, for tests
	// tick is Run's: it rests while no request is acknowledged, and the next acknowledgement
	// wakes it.
	tick *idle.Ticker
}

// NewInboxKeeper returns a keeper of agent's inbox stream; call Run to start it.
func NewInboxKeeper(js jetstream.JetStream, inbox jetstream.Stream, agent string) *InboxKeeper {
	return &InboxKeeper{js: js, inbox: inbox, marker: subject.InboxMarker(agent),
		early: make(chan struct{}, 1), tick: idle.NewTicker(MarkerInterval)}
}

// Acked notes that a request was acknowledged.
func (k *InboxKeeper) Acked() {
	if k.acks.Add(1)%MarkerEvery == 0 {
		select {
		case k.early <- struct{}{}:
		default:
		}
	}
	k.tick.Wake()
}

// Run places a first marker, then a new one whenever requests were acknowledged (see
// InboxKeeper), until ctx ends; then it deletes its last. While no request is acknowledged its
// ticker rests: an idle agent's keeper does not wake every second. A marker that cannot be
// placed or deleted is tried again later or left to the inbox's maximum age: markers only save
// work, and requests flow without them.
func (k *InboxKeeper) Run(ctx context.Context) {
	var last uint64 // sequence of this keeper's newest marker; 0 for none
	defer func() {
		if last != 0 {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkerInterval)
			defer cancel()
			k.remove(dctx, last)
		}
	}()
	tick := k.tick
	defer tick.Stop()
	at := k.acks.Load() - 1 // a first marker at once
	for {
		if n := k.acks.Load(); n != at {
			pctx, cancel := context.WithTimeout(ctx, MarkerInterval)
			if ack, err := k.js.Publish(pctx, k.marker, nil, jetstream.WithExpectStream(k.inbox.CachedInfo().Config.Name)); err == nil {
				k.placed.Add(1)
				at = n
				if last != 0 {
					k.remove(pctx, last)
				}
				last = ack.Sequence
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// Nothing acknowledged since the last marker: rest until something is.
			tick.Rest(func() bool { return k.acks.Load() == at })
		case <-tick.Woken():
			tick.Resume()
		case <-k.early:
		}
	}
}

// remove deletes the marker at seq; one that cannot be deleted is left to the inbox's maximum age.
func (k *InboxKeeper) remove(ctx context.Context, seq uint64) { _ = k.inbox.DeleteMsg(ctx, seq) }
