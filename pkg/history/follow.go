package history

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// followCleanup bounds the deletion of a follow's consumer after its ctx ended.
const followCleanup = 2 * time.Second

// FollowPrefetch is how many records a follow reads ahead of its reader at most, so that its
// memory does not grow with how far the reader is behind: a record holds one or two messages and
// is at most the NATS max payload. (A limit in bytes as well, nats.go's
// PullMaxMessagesWithBytesLimit, makes nats.go drop messages as a slow consumer under load, and
// the follow then starts again; it is not used.)
const FollowPrefetch = 16

// Follow delivers the thread's messages stored after position after (0: from now on), in order,
// until ctx ends; the channel is closed then, or earlier if the follow fails, and a caller that
// wants to go on follows again from the last Pos it received. Messages that cannot be decoded are
// skipped.
//
// A follow is an ordered consumer of the thread's subject, which recovers by itself from lost
// messages and server restarts without gaps.
func (s *Store) Follow(ctx context.Context, tenant, workflowID, participant string, after uint64) (<-chan Message, error) {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.Thread(tenant, workflowID, participant)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	}
	if after > 0 {
		// From the record holding after, whose second message may be still to come.
		start := recordSeq(after) + uint64(after&1)
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := s.js.OrderedConsumer(ctx, s.stream.CachedInfo().Config.Name, cfg)
	if err != nil {
		return nil, fmt.Errorf("following thread: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(FollowPrefetch))
	if err != nil {
		if info := cons.CachedInfo(); info != nil {
			_ = s.js.DeleteConsumer(context.WithoutCancel(ctx), info.Stream, info.Name)
		}
		return nil, fmt.Errorf("following thread: %w", err)
	}
	ch := make(chan Message)
	go func() {
		defer close(ch)
		defer s.stopFollow(ctx, cons, it)
		for {
			msg, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return
			}
			md, err := msg.Metadata()
			if err != nil {
				continue
			}
			msgs, err := decodeRecord(md.Sequence.Stream, msg.Data())
			if err != nil {
				continue
			}
			for _, m := range msgs {
				if after > 0 && m.Pos <= after {
					continue
				}
				select {
				case ch <- m:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, nil
}

// stopFollow stops the iterator and deletes its consumer on the server, which would otherwise
// stay until its inactivity threshold.
func (s *Store) stopFollow(ctx context.Context, cons jetstream.Consumer, it jetstream.MessagesContext) {
	it.Stop()
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), followCleanup)
	defer cancel()
	_ = s.js.DeleteConsumer(ctx, info.Stream, info.Name)
}
