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
// stream, no acknowledgement at all, an acknowledgement later than the reply's time, a caller
// that goes away, and waits withdrawn (Replies.Withdraw). The cases run in order on one server.
func TestWaiterAwait(t *testing.T) {
	f := newAwaitFixture(t, "WAITTEST", "waittest.>")
	t.Run("stored and answered", f.testStoredAndAnswered)
	t.Run("duplicate", f.testDuplicate)
	t.Run("refused", f.testRefused)
	t.Run("no stream", f.testNoStream)
	t.Run("no stream within the reply's time", f.testNoStreamWithinReplyTime)
	t.Run("stream elected while waiting", f.testStreamElected)
	t.Run("stored, no reply", f.testStoredNoReply)
	t.Run("never acknowledged", f.testNeverAcknowledged)
	t.Run("acknowledged after the reply's time", f.testAcknowledgedLate)
	t.Run("acknowledgement lost", f.testAcknowledgementLost)
	t.Run("caller gone", f.testCallerGone)
	t.Run("withdrawn", f.testWithdrawn)
}

// TestWaiterLooksUpKeptResult checks that a waiter with LookUpResult answers from the result a
// host keeps when the reply is lost (as with the NATS server it passed through), answers a
// duplicate from the first request's kept result, refuses a duplicate whose kept result is for
// another request, and ignores a kept result of an earlier request with another fingerprint.
func TestWaiterLooksUpKeptResult(t *testing.T) {
	bus.SetResendAfter(t, 200*time.Millisecond)
	bus.SetLookupEvery(t, 100*time.Millisecond)
	f := newAwaitFixture(t, "KEPTTEST", "kepttest.>")
	results, err := f.js.CreateKeyValue(f.ctx, jetstream.KeyValueConfig{Bucket: "KEPT"})
	require.NoError(t, err)
	keep := func(key, fingerprint, content string) {
		t.Helper()
		data, err := proto.Marshal(&agentbusv1.Reply{RequestId: key, StatusCode: 200, Fingerprint: fingerprint, Content: []byte(content)})
		require.NoError(t, err)
		_, err = results.Put(f.ctx, key, data)
		require.NoError(t, err)
	}
	await := func(id, fingerprint string, timeout time.Duration, reply func(*bus.Waiter)) (*agentbusv1.Reply, time.Duration, error) {
		t.Helper()
		w := f.replies.Wait()
		defer w.Done()
		w.LookUpResult(results, id, fingerprint)
		require.NoError(t, w.Send(requestMsg("kepttest."+id, id)))
		if reply != nil {
			reply(w)
		}
		start := time.Now()
		rep, err := w.Await(f.ctx, timeout, timeout)
		return rep, time.Since(start), err
	}

	t.Run("reply lost", func(t *testing.T) {
		// The host keeps the result and sends the reply, which is lost.
		go func() {
			time.Sleep(50 * time.Millisecond)
			keep("lost", "fp", "kept")
		}()
		rep, took, err := await("lost", "fp", 5*time.Second, nil)
		require.NoError(t, err)
		assert.Equal(t, "kept", string(rep.GetContent()))
		assert.GreaterOrEqual(t, took, 200*time.Millisecond, "read once the reply was late")
		assert.Less(t, took, time.Second)
	})
	t.Run("reply in time", func(t *testing.T) {
		keep("fast", "fp", "kept")
		rep, took, err := await("fast", "fp", 5*time.Second, func(w *bus.Waiter) {
			f.answer(t, w, &agentbusv1.Reply{RequestId: "fast", StatusCode: 200, Fingerprint: "fp", Content: []byte("reply")})
		})
		require.NoError(t, err)
		assert.Equal(t, "reply", string(rep.GetContent()), "the reply, the cache unread")
		assert.Less(t, took, 200*time.Millisecond)
	})
	t.Run("no reply, no result", func(t *testing.T) {
		_, took, err := await("never", "fp", 500*time.Millisecond, nil)
		assert.ErrorIs(t, err, bus.ErrReplyTimeout)
		assert.Less(t, took, 1500*time.Millisecond)
	})
	t.Run("duplicate", func(t *testing.T) {
		// "lost" is in the inbox and its result kept: a second call with its id is answered
		// from it at once.
		rep, took, err := await("lost", "fp", 5*time.Second, nil)
		require.NoError(t, err)
		assert.Equal(t, "kept", string(rep.GetContent()))
		assert.Less(t, took, 200*time.Millisecond)
	})
	t.Run("duplicate of a running request", func(t *testing.T) {
		_, _, err := await("running", "fp", 300*time.Millisecond, nil)
		require.ErrorIs(t, err, bus.ErrReplyTimeout)
		go func() {
			time.Sleep(300 * time.Millisecond)
			keep("running", "fp", "finally")
		}()
		rep, took, err := await("running", "fp", 5*time.Second, nil)
		require.NoError(t, err)
		assert.Equal(t, "finally", string(rep.GetContent()))
		assert.Less(t, took, time.Second)
	})
	t.Run("duplicate for another request", func(t *testing.T) {
		_, _, err := await("lost", "other", 5*time.Second, nil)
		assert.ErrorIs(t, err, bus.ErrReused)
	})
	t.Run("earlier request's result", func(t *testing.T) {
		// Kept for a request whose id's de-duplication window ended: this one runs anew.
		keep("reused", "old", "stale")
		rep, _, err := await("reused", "new", 5*time.Second, func(w *bus.Waiter) {
			go func() {
				time.Sleep(500 * time.Millisecond)
				f.answer(t, w, &agentbusv1.Reply{RequestId: "reused", StatusCode: 200, Fingerprint: "new", Content: []byte("fresh")})
			}()
		})
		require.NoError(t, err)
		assert.Equal(t, "fresh", string(rep.GetContent()))
	})
}

// testStoredAndAnswered checks that Await drops a partial reply and returns the final one.
func (f *awaitFixture) testStoredAndAnswered(t *testing.T) {
	rep, _, err := f.await(t, requestMsg("waittest.a", "one"), 5*time.Second, 5*time.Second, func(w *bus.Waiter) {
		f.answer(t, w, &agentbusv1.Reply{RequestId: "one", Partial: true, Content: []byte("part")})
		f.answer(t, w, &agentbusv1.Reply{RequestId: "one", StatusCode: 200, Content: []byte("done")})
	})
	require.NoError(t, err)
	assert.Equal(t, "done", string(rep.GetContent()), "the final reply, after the partial one")
}

// testDuplicate checks that a request whose de-duplication id the inbox holds already is
// reported as a duplicate.
func (f *awaitFixture) testDuplicate(t *testing.T) {
	_, _, err := f.await(t, requestMsg("waittest.a", "one"), 5*time.Second, 5*time.Second, nil)
	assert.ErrorIs(t, err, bus.ErrDuplicate)
}

// testRefused checks that a request the stream refuses is not accepted, and keeps the refusal's
// JetStream API error code.
func (f *awaitFixture) testRefused(t *testing.T) {
	m := requestMsg("waittest.a", "")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "99")
	_, _, err := f.await(t, m, 5*time.Second, 5*time.Second, nil)
	assert.ErrorIs(t, err, bus.ErrNotAccepted)
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
}

// testNoStream checks that, while no stream answers, Await sends the request again until
// accept is up, then says so.
func (f *awaitFixture) testNoStream(t *testing.T) {
	_, took, err := f.await(t, requestMsg("nostream.a", ""), time.Second, 5*time.Second, nil)
	assert.ErrorIs(t, err, bus.ErrNotAccepted)
	assert.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	assert.GreaterOrEqual(t, took, 500*time.Millisecond, "sent again while accept allowed")
	assert.Less(t, took, 1500*time.Millisecond, "gave up when accept was up")
}

// testNoStreamWithinReplyTime checks that, while no stream answers, Await gives up when the
// reply's time is up, before accept is.
func (f *awaitFixture) testNoStreamWithinReplyTime(t *testing.T) {
	_, took, err := f.await(t, requestMsg("nostream.a", ""), 5*time.Second, 600*time.Millisecond, nil)
	assert.ErrorIs(t, err, bus.ErrNotAccepted, "not stored: the caller may try again")
	assert.Less(t, took, 1100*time.Millisecond, "gave up when the reply's time was up")
}

// testStreamElected checks that a stream that starts answering while Await sends again (a
// leader elected) stores the request, which is then answered.
func (f *awaitFixture) testStreamElected(t *testing.T) {
	ctx, js := f.ctx, f.js
	go func() {
		time.Sleep(700 * time.Millisecond)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
		assert.NoError(t, err)
	}()
	rep, took, err := f.await(t, requestMsg("late.a", "late-1"), 5*time.Second, 5*time.Second, func(w *bus.Waiter) {
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
			assert.NoError(t, f.nc.Publish(w.Subject, data))
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
}

// testStoredNoReply checks that a stored request whose reply does not come ends with
// ErrReplyTimeout.
func (f *awaitFixture) testStoredNoReply(t *testing.T) {
	_, took, err := f.await(t, requestMsg("waittest.a", ""), 5*time.Second, 200*time.Millisecond, nil)
	assert.ErrorIs(t, err, bus.ErrReplyTimeout)
	assert.Less(t, took, 2*time.Second)
}

// testNeverAcknowledged checks that a request sent to a server that died after taking it (a
// responder that swallows requests) is not accepted once accept is up.
func (f *awaitFixture) testNeverAcknowledged(t *testing.T) {
	blackhole(t, f.nc)
	_, took, err := f.await(t, requestMsg("blackhole.a", ""), 300*time.Millisecond, 5*time.Second, nil)
	assert.ErrorIs(t, err, bus.ErrNotAccepted)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.Less(t, took, 2*time.Second)
}

// testAcknowledgedLate checks that a request acknowledged after its reply's time (by a slow
// store) was stored, so the caller hears a timeout, not a refusal, as soon as the
// acknowledgement comes, not when the acknowledgement's own time is up.
func (f *awaitFixture) testAcknowledgedLate(t *testing.T) {
	slow, err := f.nc.Subscribe("slow.>", func(m *nats.Msg) {
		time.Sleep(300 * time.Millisecond)
		_ = m.Respond([]byte(`{"stream":"SLOW","seq":1}`))
	})
	require.NoError(t, err)
	defer func() { _ = slow.Unsubscribe() }()
	_, took, err := f.await(t, requestMsg("slow.a", ""), 5*time.Second, 50*time.Millisecond, nil)
	assert.ErrorIs(t, err, bus.ErrReplyTimeout)
	assert.GreaterOrEqual(t, took, 250*time.Millisecond)
	assert.Less(t, took, 2*time.Second)
}

// testAcknowledgementLost stands in for a server that takes a request and dies before it
// answers: the first copy of each request gets no acknowledgement, the next one does.
func (f *awaitFixture) testAcknowledgementLost(t *testing.T) {
	bus.SetResendAfter(t, 200*time.Millisecond)
	seen := lossyServer(t, f.nc, "lossy.>", "", stored)
	// The copy sent again may reach the stream while it is still storing the first.
	seenInFlight := lossyServer(t, f.nc, "inflight.>", "", msgIDInFlight, stored)

	// With a de-duplication id it is sent again, and stored: the caller hears that its
	// reply did not come, not that the request was refused.
	_, took, err := f.await(t, requestMsg("lossy.a", "lossy-1"), 2*time.Second, 500*time.Millisecond, nil)
	assert.ErrorIs(t, err, bus.ErrReplyTimeout)
	assert.Less(t, took, time.Second)
	// Without one it is not: a second copy could be stored twice.
	_, _, err = f.await(t, requestMsg("lossy.b", ""), 600*time.Millisecond, 5*time.Second, nil)
	assert.ErrorIs(t, err, bus.ErrNotAccepted)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.Equal(t, map[string]int{"lossy.a": 2, "lossy.b": 1}, seen())
	_, _, err = f.await(t, requestMsg("inflight.a", "inflight-1"), 2*time.Second, 800*time.Millisecond, nil)
	assert.ErrorIs(t, err, bus.ErrReplyTimeout, "stored in the end")
	assert.Equal(t, map[string]int{"inflight.a": 3}, seenInFlight())
}

// testCallerGone checks that Await returns ctx's error when ctx ends first.
func (f *awaitFixture) testCallerGone(t *testing.T) {
	blackhole(t, f.nc)
	w := f.replies.Wait()
	defer w.Done()
	require.NoError(t, w.Send(requestMsg("blackhole.a", "")))
	gone, stop := context.WithTimeout(f.ctx, 100*time.Millisecond)
	defer stop()
	_, err := w.Await(gone, 5*time.Second, 5*time.Second)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// testWithdrawn checks that Withdraw ends the waits of its owner only, Await's and Receive's
// alike, and that a reply arriving after it is not handed on.
func (f *awaitFixture) testWithdrawn(t *testing.T) {
	revoked := errors.New("revoked")
	owned, other, anyone := f.replies.WaitFor("key-1"), f.replies.WaitFor("key-2"), f.replies.Wait()
	streamed := f.replies.WaitFor("key-1")
	for _, w := range []*bus.Waiter{owned, other, anyone, streamed} {
		defer w.Done()
	}
	require.NoError(t, owned.Send(requestMsg("waittest.w", "")))
	type result struct {
		rep *agentbusv1.Reply
		err error
	}
	awaited, received := make(chan result, 1), make(chan result, 1)
	go func() {
		rep, err := owned.Await(f.ctx, 5*time.Second, time.Minute)
		awaited <- result{rep, err}
	}()
	go func() {
		rep, err := streamed.Receive(f.ctx)
		received <- result{rep, err}
	}()
	assert.Equal(t, 0, f.replies.Withdraw("", revoked), "an owner \"\" has no waits to withdraw")
	assert.Equal(t, 2, f.replies.Withdraw("key-1", revoked))
	for name, ch := range map[string]chan result{"Await": awaited, "Receive": received} {
		select {
		case r := <-ch:
			assert.ErrorIs(t, r.err, revoked, name)
			assert.Nil(t, r.rep, name)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still waits after Withdraw", name)
		}
	}
	f.answer(t, owned, &agentbusv1.Reply{RequestId: "w", StatusCode: 200})
	_, err := owned.Receive(f.ctx)
	assert.ErrorIs(t, err, revoked, "a reply after the withdrawal is not handed on")

	f.answer(t, other, &agentbusv1.Reply{RequestId: "x", StatusCode: 200})
	rep, err := other.Receive(f.ctx)
	require.NoError(t, err, "another owner's wait goes on")
	assert.Equal(t, "x", rep.GetRequestId())
}
