package history_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestConcurrentWritersOnReplicatedStream: writers appending to one thread at once, on a stream
// and a topics bucket with three replicas, each reloading its cursor when another appended first:
// every failed append is ErrConflict, whichever code the stream refused it with, each message is
// stored once in one chain, and the thread lists every writer's scope. The rounds (a thread
// each) go on until the stream has used the code of a replicated stream, whose write to the
// subject is still being agreed on, or fail after maxRounds.
func TestConcurrentWritersOnReplicatedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	const writers, maxRounds = 8, 50
	cl, res := natstest.ClusterBus(t, bus.Config{})
	seen := natstest.WatchAPIErrors(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e := env{ctx: ctx, store: history.NewStore(res.Messages, res.Topics, res.JS), res: res}
	var scopes []string
	for i := range writers {
		scopes = append(scopes, fmt.Sprintf("t%d", i))
	}
	for round := 1; seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant) == 0; round++ {
		require.LessOrEqual(t, round, maxRounds, "no write was refused with code %d", jetstream.JSErrCodeStreamWrongLastSequenceConstant)
		participant := fmt.Sprintf("p%d", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				s := e.another()
				<-start
				var old history.Cursor
				for {
					cur, err := s.Cursor(ctx, tenant, wf, participant)
					if !assert.NoError(t, err) {
						return
					}
					cur.Carry(&old)
					err = s.Append(ctx, tenant, wf, participant, &cur, chat(fmt.Sprintf("%s-%d", participant, i), "hi"), &history.Message{
						ID: fmt.Sprintf("%s-%d-scoped", participant, i), Direction: history.Out, MessageType: history.Chat, Scope: scopes[i]})
					if err == nil {
						return
					}
					if !assert.ErrorIs(t, err, history.ErrConflict, "round %d, writer %d", round, i) {
						return
					}
					old = cur
				}
			})
		}
		close(start)
		wg.Wait()
		require.False(t, t.Failed())

		topics := caughtUp(t, e, tenant, wf, participant, writers)
		require.Equal(t, scopes, topics, "round %d: topics", round)
		got := ids(walk(t, e, participant, history.PageOptions{}))
		require.Len(t, got, 2*writers, "round %d: the thread's messages", round)
		slices.Sort(got)
		require.Len(t, slices.Compact(got), 2*writers, "round %d: the thread's messages, once each", round)
	}
	t.Logf("refusals: %d with code %d, %d with code %d",
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequence), jetstream.JSErrCodeStreamWrongLastSequence,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant), jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// TestBusyWritersOnReplicatedStream: many writers appending to one thread over and over, each
// message of a scope of its own, on a stream and a topics bucket with three replicas, each
// writer reloading its cursor when another appended first: every append stores its message once,
// in one chain, and the thread lists every scope.
func TestBusyWritersOnReplicatedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	const writers, appends = 16, 20
	cl, res := natstest.ClusterBus(t, bus.Config{})
	seen := natstest.WatchAPIErrors(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e := env{ctx: ctx, store: history.NewStore(res.Messages, res.Topics, res.JS), res: res}
	const participant = "busy"
	var (
		mu      sync.Mutex
		reloads int
		scopes  []string
	)
	errs := make([]error, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		for i := range appends {
			scopes = append(scopes, fmt.Sprintf("w%02d-%02d", w, i))
		}
		wg.Go(func() {
			s := e.another()
			<-start
			for i := range appends {
				id := fmt.Sprintf("w%02d-%02d", w, i)
				var old history.Cursor
				for {
					cur, err := s.Cursor(ctx, tenant, wf, participant)
					if err != nil {
						errs[w] = fmt.Errorf("append %d: %w", i, err)
						return
					}
					cur.Carry(&old)
					err = s.Append(ctx, tenant, wf, participant, &cur, &history.Message{
						ID: id, Direction: history.Out, MessageType: history.Chat, Scope: id})
					if err == nil {
						break
					}
					if !errors.Is(err, history.ErrConflict) {
						errs[w] = fmt.Errorf("append %d: %w", i, err)
						return
					}
					mu.Lock()
					reloads++
					mu.Unlock()
					old = cur
				}
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	for w, err := range errs {
		assert.NoError(t, err, "writer %d", w)
	}
	t.Logf("%d appends in %v, %d cursor reloads; refusals: %d with code %d, %d with code %d", writers*appends,
		time.Since(began).Round(time.Millisecond), reloads,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequence), jetstream.JSErrCodeStreamWrongLastSequence,
		seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant), jetstream.JSErrCodeStreamWrongLastSequenceConstant)
	require.False(t, t.Failed())

	topics := caughtUp(t, e, tenant, wf, participant, len(scopes))
	slices.Sort(scopes)
	require.Equal(t, scopes, topics, "topics")
	got := ids(walk(t, e, participant, history.PageOptions{}))
	require.Len(t, got, len(scopes), "the thread's messages")
	slices.Sort(got)
	require.Equal(t, scopes, got, "the thread's messages, once each")
}

// caughtUp waits until the replica that answers reads has the thread's last write and n topics,
// and returns the topics: pages and topics are read from any replica.
func caughtUp(t *testing.T, e env, tenant, wf, participant string, n int) []string {
	t.Helper()
	ctx := e.ctx
	last, err := bus.LeaderLast(ctx, e.res.JS.Conn(), subject.MessagesStream, subject.Thread(tenant, wf, participant))
	require.NoError(t, err)
	for {
		page, _, err := e.store.Page(ctx, tenant, wf, participant, history.PageOptions{Size: 1})
		require.NoError(t, err)
		topics, err := e.store.Topics(ctx, tenant, wf, participant)
		require.NoError(t, err)
		if len(page) == 1 && page[0].Pos>>1 == last.Sequence && len(topics) == n {
			return topics
		}
		require.NoError(t, ctx.Err(), "the replicas did not catch up")
		time.Sleep(10 * time.Millisecond)
	}
}
