package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// TestWaiterAwait sends requests with Waiter.Send to a real stream and reads what Await makes of
// the acknowledgement and the reply: a stored request's reply, a duplicate, a refusal, no
// stream, no acknowledgement at all, an acknowledgement later than the reply's time, and a
// caller that goes away.
func TestWaiterAwait(t *testing.T) {
	nc, js, ctx := withStream(t, "WAITTEST", "waittest.>")
	replies, err := bus.NewReplies(nc, "ing1", nil)
	require.NoError(t, err)
	defer func() { _ = replies.Close() }()

	msg := func(subj, id string) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = []byte("request")
		if id != "" {
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		return m
	}
	answer := func(w *bus.Waiter, rep *agentbusv1.Reply) {
		data, err := proto.Marshal(rep)
		require.NoError(t, err)
		require.NoError(t, nc.Publish(w.Subject, data))
	}
	await := func(m *nats.Msg, accept, timeout time.Duration, reply func(*bus.Waiter)) (*agentbusv1.Reply, error, time.Duration) {
		w := replies.Wait()
		defer w.Done()
		require.NoError(t, w.Send(m))
		if reply != nil {
			reply(w)
		}
		start := time.Now()
		rep, err := w.Await(ctx, accept, timeout)
		return rep, err, time.Since(start)
	}

	t.Run("stored and answered", func(t *testing.T) {
		rep, err, _ := await(msg("waittest.a", "one"), 5*time.Second, 5*time.Second, func(w *bus.Waiter) {
			answer(w, &agentbusv1.Reply{RequestId: "one", Partial: true, Content: []byte("part")})
			answer(w, &agentbusv1.Reply{RequestId: "one", StatusCode: 200, Content: []byte("done")})
		})
		require.NoError(t, err)
		assert.Equal(t, "done", string(rep.GetContent()), "the final reply, after the partial one")
	})
	t.Run("duplicate", func(t *testing.T) {
		_, err, _ := await(msg("waittest.a", "one"), 5*time.Second, 5*time.Second, nil)
		assert.ErrorIs(t, err, bus.ErrDuplicate)
	})
	t.Run("refused", func(t *testing.T) {
		m := msg("waittest.a", "")
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "99")
		_, err, _ := await(m, 5*time.Second, 5*time.Second, nil)
		assert.ErrorIs(t, err, bus.ErrNotAccepted)
		var apiErr *jetstream.APIError
		require.True(t, errors.As(err, &apiErr), "%v", err)
		assert.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
	})
	t.Run("no stream", func(t *testing.T) {
		_, err, took := await(msg("nostream.a", ""), time.Second, 5*time.Second, nil)
		assert.ErrorIs(t, err, bus.ErrNotAccepted)
		assert.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
		assert.GreaterOrEqual(t, took, 500*time.Millisecond, "sent again while accept allowed")
		assert.Less(t, took, 1500*time.Millisecond, "gave up when accept was up")
	})
	t.Run("no stream within the reply's time", func(t *testing.T) {
		_, err, took := await(msg("nostream.a", ""), 5*time.Second, 600*time.Millisecond, nil)
		assert.ErrorIs(t, err, bus.ErrNotAccepted, "not stored: the caller may try again")
		assert.Less(t, took, 1100*time.Millisecond, "gave up when the reply's time was up")
	})
	t.Run("stream elected while waiting", func(t *testing.T) {
		// A stream that starts answering while Await sends again (a leader elected) stores the
		// request, which is then answered.
		go func() {
			time.Sleep(700 * time.Millisecond)
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
			assert.NoError(t, err)
		}()
		rep, err, took := await(msg("late.a", "late-1"), 5*time.Second, 5*time.Second, func(w *bus.Waiter) {
			go func() {
				// The host's reply comes once the request is stored.
				for ctx.Err() == nil {
					if st, err := js.Stream(ctx, "LATE"); err == nil {
						if info, err := st.Info(ctx); err == nil && info.State.Msgs == 1 {
							break
						}
					}
					time.Sleep(20 * time.Millisecond)
				}
				data, err := proto.Marshal(&agentbusv1.Reply{RequestId: "late-1", StatusCode: 200, Content: []byte("late")})
				assert.NoError(t, err)
				assert.NoError(t, nc.Publish(w.Subject, data))
			}()
		})
		require.NoError(t, err)
		assert.Equal(t, "late", string(rep.GetContent()))
		assert.GreaterOrEqual(t, took, 700*time.Millisecond)
		st, err := js.Stream(ctx, "LATE")
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), info.State.Msgs, "stored once")
	})
	t.Run("stored, no reply", func(t *testing.T) {
		_, err, took := await(msg("waittest.a", ""), 5*time.Second, 200*time.Millisecond, nil)
		assert.ErrorIs(t, err, bus.ErrReplyTimeout)
		assert.Less(t, took, 2*time.Second)
	})

	// A responder that swallows requests stands in for a server that died after taking one; one
	// that acknowledges late, for a slow store.
	sub, err := nc.Subscribe("blackhole.>", func(*nats.Msg) {})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	slow, err := nc.Subscribe("slow.>", func(m *nats.Msg) {
		time.Sleep(300 * time.Millisecond)
		_ = m.Respond([]byte(`{"stream":"SLOW","seq":1}`))
	})
	require.NoError(t, err)
	defer func() { _ = slow.Unsubscribe() }()

	t.Run("never acknowledged", func(t *testing.T) {
		_, err, took := await(msg("blackhole.a", ""), 300*time.Millisecond, 5*time.Second, nil)
		assert.ErrorIs(t, err, bus.ErrNotAccepted)
		assert.ErrorIs(t, err, nats.ErrTimeout)
		assert.Less(t, took, 2*time.Second)
	})
	t.Run("acknowledged after the reply's time", func(t *testing.T) {
		// The request was stored, so the caller hears a timeout, not a refusal, as soon as
		// the acknowledgement comes, not when the acknowledgement's own time is up.
		_, err, took := await(msg("slow.a", ""), 5*time.Second, 50*time.Millisecond, nil)
		assert.ErrorIs(t, err, bus.ErrReplyTimeout)
		assert.GreaterOrEqual(t, took, 250*time.Millisecond)
		assert.Less(t, took, 2*time.Second)
	})
	t.Run("acknowledgement lost", func(t *testing.T) {
		// A server that takes a request and dies before it answers: the first copy of each
		// request gets no acknowledgement, the next one does.
		bus.SetResendAfter(t, 200*time.Millisecond)
		seen := lossyServer(t, nc, "lossy.>", "", stored)
		// The copy sent again may reach the stream while it is still storing the first.
		seenInFlight := lossyServer(t, nc, "inflight.>", "", msgIDInFlight, stored)

		// With a de-duplication id it is sent again, and stored: the caller hears that its
		// reply did not come, not that the request was refused.
		_, err, took := await(msg("lossy.a", "lossy-1"), 2*time.Second, 500*time.Millisecond, nil)
		assert.ErrorIs(t, err, bus.ErrReplyTimeout)
		assert.Less(t, took, time.Second)
		// Without one it is not: a second copy could be stored twice.
		_, err, _ = await(msg("lossy.b", ""), 600*time.Millisecond, 5*time.Second, nil)
		assert.ErrorIs(t, err, bus.ErrNotAccepted)
		assert.ErrorIs(t, err, nats.ErrTimeout)
		assert.Equal(t, map[string]int{"lossy.a": 2, "lossy.b": 1}, seen())
		_, err, _ = await(msg("inflight.a", "inflight-1"), 2*time.Second, 800*time.Millisecond, nil)
		assert.ErrorIs(t, err, bus.ErrReplyTimeout, "stored in the end")
		assert.Equal(t, map[string]int{"inflight.a": 3}, seenInFlight())
	})
	t.Run("caller gone", func(t *testing.T) {
		w := replies.Wait()
		defer w.Done()
		require.NoError(t, w.Send(msg("blackhole.a", "")))
		gone, stop := context.WithTimeout(ctx, 100*time.Millisecond)
		defer stop()
		_, err := w.Await(gone, 5*time.Second, 5*time.Second)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
}
