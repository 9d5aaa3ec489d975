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

	"github.com/agentbus/agentbus/pkg/bus"
)

// TestPublishAgainstServer: a real server's acknowledgements, a new message and a duplicate,
// take the hand-written path and read as nats.go reads them; its errors keep their API codes.
// The cases run in order on one server: each relies on the messages the previous ones stored.
func TestPublishAgainstServer(t *testing.T) {
	nc, js, ctx := withStream(t, "PUBTEST", "pubtest.>")
	t.Run("acknowledgements", func(t *testing.T) { testPublishAcks(t, nc, js, ctx) })
	t.Run("API error", func(t *testing.T) { testPublishAPIError(t, js, ctx) })
	t.Run("no stream", func(t *testing.T) { testPublishNoStream(t, js, ctx) })
	t.Run("stream elected while publishing", func(t *testing.T) { testPublishLateStream(t, js, ctx) })
	t.Run("acknowledgement lost", func(t *testing.T) { testPublishAckLost(t, nc, js, ctx) })
	t.Run("never acknowledged", func(t *testing.T) { testPublishNeverAcked(t, nc) })
}

// pubtestMsg returns a message on pubtest.a with the de-duplication id id.
func pubtestMsg(id string) *nats.Msg {
	m := nats.NewMsg("pubtest.a")
	m.Data = []byte("x")
	m.Header.Set(jetstream.MsgIDHeader, id)
	return m
}

// testPublishAcks checks that the server's acknowledgements of a new message and of a
// duplicate are read by the fast path, and that Publish returns them.
func testPublishAcks(t *testing.T, nc *nats.Conn, js jetstream.JetStream, ctx context.Context) {
	for i, want := range []jetstream.PubAck{{Stream: "PUBTEST", Sequence: 1}, {Stream: "PUBTEST", Sequence: 1, Duplicate: true}} {
		raw, err := nc.RequestMsgWithContext(ctx, pubtestMsg("one"))
		require.NoError(t, err)
		fast, ok := bus.ParsePubAckFast(raw.Data)
		require.True(t, ok, "ack %d %q not read by the fast path", i, raw.Data)
		assert.Equal(t, want, *fast)
	}
	ack, err := bus.Publish(ctx, js, pubtestMsg("two"))
	require.NoError(t, err)
	assert.Equal(t, jetstream.PubAck{Stream: "PUBTEST", Sequence: 2}, *ack)
}

// testPublishAPIError checks that a refusal keeps its JetStream API error code.
func testPublishAPIError(t *testing.T, js jetstream.JetStream, ctx context.Context) {
	m := pubtestMsg("three")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "1")
	_, err := bus.Publish(ctx, js, m)
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
}

// testPublishNoStream checks that, while no stream answers, Publish tries again until ctx's
// deadline, then says so.
func testPublishNoStream(t *testing.T, js jetstream.JetStream, ctx context.Context) {
	nctx, ncancel := context.WithTimeout(ctx, time.Second)
	start := time.Now()
	_, err := bus.Publish(nctx, js, nats.NewMsg("nostream.a"))
	ncancel()
	assert.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "tried again while the deadline allowed")
	assert.Less(t, time.Since(start), 1500*time.Millisecond, "gave up by the deadline")
}

// testPublishLateStream checks that a stream that starts answering while Publish tries again
// (a leader elected) stores the message once.
func testPublishLateStream(t *testing.T, js jetstream.JetStream, ctx context.Context) {
	go func() {
		time.Sleep(700 * time.Millisecond)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
		assert.NoError(t, err)
	}()
	ack, err := bus.Publish(ctx, js, nats.NewMsg("late.a"))
	require.NoError(t, err)
	assert.Equal(t, jetstream.PubAck{Stream: "LATE", Sequence: 1}, *ack)
}

// testPublishAckLost stands in for a server that takes a message and dies before it answers:
// the first copy of each message gets no acknowledgement, the next one does. A message with a
// de-duplication id, or one that expects its subject's last sequence, is sent again; any other
// is not, as it may have been stored. A real stream refuses the second copy of a message that
// expects a last sequence once the first is stored: a conflict, which its writer resolves by
// reading the subject.
func testPublishAckLost(t *testing.T, nc *nats.Conn, js jetstream.JetStream, ctx context.Context) {
	bus.SetResendAfter(t, 200*time.Millisecond)
	seen := lossyServer(t, nc, "lossy.>", "", stored)
	// The copy sent again may reach the stream while it is still storing the first.
	seenInFlight := lossyServer(t, nc, "inflight.>", "", msgIDInFlight, stored)
	// publish publishes a message on subj, with the de-duplication id if one is given, within d.
	publish := func(subj, id string, d time.Duration) (*jetstream.PubAck, error) {
		pctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		m := nats.NewMsg(subj)
		if id != "" {
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		return bus.Publish(pctx, js, m)
	}
	ack, err := publish("lossy.a", "lossy-1", 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), ack.Sequence)
	_, err = publish("lossy.b", "", 600*time.Millisecond)
	assert.Error(t, err)
	expecting := func(subj string) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = []byte("x")
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		return m
	}
	ectx, ecancel := context.WithTimeout(ctx, 2*time.Second)
	defer ecancel()
	ack, err = bus.Publish(ectx, js, expecting("lossy.c"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), ack.Sequence)
	assert.Equal(t, map[string]int{"lossy.a": 2, "lossy.b": 1, "lossy.c": 2}, seen())

	require.NoError(t, nc.PublishMsg(expecting("pubtest.expecting")), "a first copy, stored without an acknowledgement")
	stream, err := js.Stream(ectx, "PUBTEST")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := stream.GetLastMsgForSubject(ectx, "pubtest.expecting")
		return err == nil
	}, time.Second, 10*time.Millisecond)
	_, err = bus.Publish(ectx, js, expecting("pubtest.expecting"))
	assert.True(t, bus.IsConflict(err), "the second copy: %v", err)
	ack, err = publish("inflight.a", "inflight-1", 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), ack.Sequence)
	assert.Equal(t, map[string]int{"inflight.a": 3}, seenInFlight())
}

// testPublishNeverAcked checks that, without a deadline, an acknowledgement that never comes
// ends with js's default timeout, and that a context already done stops Publish before anything
// is sent.
func testPublishNeverAcked(t *testing.T, nc *nats.Conn) {
	blackhole(t, nc)
	short, err := jetstream.New(nc, jetstream.WithDefaultTimeout(200*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	_, err = bus.Publish(context.Background(), short, nats.NewMsg("blackhole.a"))
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.Less(t, time.Since(start), 5*time.Second)

	done, stop := context.WithCancel(context.Background())
	stop()
	_, err = bus.Publish(done, short, nats.NewMsg("blackhole.a"))
	assert.ErrorIs(t, err, context.Canceled)
}
