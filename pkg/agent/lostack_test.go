package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// An acknowledgement that never reaches the bus (in flight to a consumer leader that died)
// leaves its finished request in the inbox until the ack wait ends. The tenure that begins under
// a new pin finds it there, not held by the host: the host, which finished it, acknowledges it
// again, and the conversation's next request runs at once instead of after the ack wait, and
// the finished one does not run twice.
func TestLostAcknowledgementDoesNotHoldTheConversation(t *testing.T) {
	t.Parallel()
	const ackWait = 10 * time.Second
	s, sa, _ := stepWithLostAck(t, ackWait, step)

	// A new pin begins a new tenure, as a consumer leader's election does.
	require.NoError(t, inboxOf(t, s, "Seq").UnpinConsumer(t.Context(), subject.PartitionConsumer("Seq", 0), "hosts"))
	sent := time.Now()
	step(t, s, "x", "2", "")
	waitFor(t, ackWait/2, "step 2 ran before step 1's ack wait ended", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) >= 2
	})
	t.Logf("step 2 ran %v after it was sent", time.Since(sent).Round(time.Millisecond))
	ns, _ := sa.starts("x")
	assert.Equal(t, []string{"1", "2"}, ns, "steps started, in order, each once")
	waitFor(t, 5*time.Second, "the inbox holds no unacknowledged request", func() bool {
		info := seqConsumer(t, s)
		return info != nil && info.NumAckPending == 0
	})
}

// An acknowledgement lost while the host keeps its partition leaves the finished request in the
// inbox until the ack wait ends; the bus then delivers it again, after the conversation's next
// request ran and more than the partition's last 32 acknowledgements later. The host, which
// acknowledged it, acknowledges the copy again: the request does not run twice, nor out of order.
func TestLostAcknowledgementDoesNotRunARequestTwice(t *testing.T) {
	t.Parallel()
	const ackWait = 4 * time.Second
	s, sa, _ := stepWithLostAck(t, ackWait, step)

	step(t, s, "x", "2", "")
	for i := range 40 {
		step(t, s, fmt.Sprint("y", i), "1", "")
	}
	const requests = 2 + 40
	waitRedelivered(t, s, requests, 3*ackWait)
	ns, _ := sa.starts("x")
	assert.Equal(t, []string{"1", "2"}, ns, "steps started, in order, each once")
}

// An acknowledgement lost shortly before its host hands the partition over leaves the finished
// request in the inbox; once the ack wait ends the bus delivers it again to the new owner, which
// never saw it, after the conversation's next request ran. The thread's newest record is that
// later request's: the new owner acknowledges the copy without running it.
func TestLostAcknowledgementDoesNotRunARequestTwiceOnAnotherHost(t *testing.T) {
	t.Parallel()
	const ackWait = 4 * time.Second
	s, sa, stop := stepWithLostAck(t, ackWait, step)

	step(t, s, "x", "2", "")
	waitFor(t, 5*time.Second, "step 2 ran", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) == 2
	})
	stop()
	waitRedelivered(t, s, 2, 4*ackWait)
	ns, hosts := sa.starts("x")
	assert.Equal(t, []string{"1", "2"}, ns, "steps started, in order, each once (on %v)", hosts)
}

// A request with a kept result whose acknowledgement was lost comes back to another host after
// the conversation's next request ran and after its result went from the cache (it could not be
// written, or its window passed). Its thread shows it was handled: it is acknowledged without
// running again, and the caller waiting for this copy is told its answer is gone.
func TestLostAcknowledgementOfARequestWhoseResultIsGone(t *testing.T) {
	t.Parallel()
	const ackWait = 4 * time.Second
	var (
		replies *nats.Subscription
		key     string
	)
	kept := func(t *testing.T, s *stacktest.Stack, participant, n, sleep string) {
		t.Helper()
		nc := natstest.Conn(t, s.NATS)
		var err error
		replies, err = nc.SubscribeSync("test.kept.reply")
		require.NoError(t, err)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		req := stepRequest(participant, n, sleep)
		req.KeepResult, req.Fingerprint, req.ReplyTo = true, "f", "test.kept.reply"
		key = subject.ResultKey(req.GetTenantId(), req.GetRequestId())
		enqueue(t, js, req, nil)
	}
	s, sa, stop := stepWithLostAck(t, ackWait, kept)
	first := nextReply(t, replies)
	assert.Empty(t, first.GetError(), "step 1's answer")

	step(t, s, "x", "2", "")
	waitFor(t, 5*time.Second, "step 2 ran", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) == 2
	})
	require.NoError(t, s.Res.Results.Purge(t.Context(), key))
	stop()
	waitRedelivered(t, s, 2, 4*ackWait)
	ns, hosts := sa.starts("x")
	assert.Equal(t, []string{"1", "2"}, ns, "steps started, in order, each once (on %v)", hosts)
	again := nextReply(t, replies)
	assert.Equal(t, problem.ReplyUnavailable.Slug, again.GetError(), "the copy's answer")
}

// A request the inbox stored twice (sent again because its first send went unacknowledged, and
// stored again by a stream leader that had not applied the first copy) whose first copy ran on
// another host and whose kept result cannot be read does not run again: the host that gets the
// second copy, marked as sent again, finds the first copy's messages in the thread behind a
// later request's, and tells a caller waiting for the copy that its answer is gone. The same
// holds for a request without a kept result. A marked copy of a request stored once runs.
func TestRequestStoredTwiceRunsOnceOnAnotherHost(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()},
		Host: agent.HostConfig{ID: "other"}})
	owner, _, stop := startSeqOwner(t, s, sa, "other", agent.HostConfig{})
	nc := natstest.Conn(t, s.NATS)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	replies, err := nc.SubscribeSync("test.twice.reply")
	require.NoError(t, err)
	copyOf := func(n, id string, resent bool) nats.Header {
		h := nats.Header{subject.HeaderMsgID: {"step-" + n + "-" + id}}
		if resent {
			h.Set(subject.HeaderResent, "1")
		}
		return h
	}
	kept := func(n string) *agentbusv1.Request {
		req := stepRequest("x", n, "")
		req.KeepResult, req.Fingerprint, req.ReplyTo = true, "f", "test.twice.reply"
		return req
	}

	first := kept("1")
	enqueue(t, js, first, copyOf("1", "a", false))
	assert.Empty(t, nextReply(t, replies).GetError(), "step 1's answer")
	step(t, s, "x", "2", "")
	waitFor(t, 5*time.Second, "step 2 ran", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) == 2
	})
	stop() // the partition goes to the other host, which never saw step 1
	require.NoError(t, s.Res.Results.Purge(t.Context(), subject.ResultKey(first.GetTenantId(), first.GetRequestId())))
	enqueue(t, js, first, copyOf("1", "b", true))
	assert.Equal(t, problem.ReplyUnavailable.Slug, nextReply(t, replies).GetError(), "the second copy's answer")

	plain := stepRequest("x", "3", "")
	enqueue(t, js, plain, copyOf("3", "a", false))
	enqueue(t, js, plain, copyOf("3", "b", true))
	once := kept("4")
	enqueue(t, js, once, copyOf("4", "b", true))
	assert.Empty(t, nextReply(t, replies).GetError(), "step 4's answer")

	// A claim-checked request's second copy finds its stored copy deleted by the first.
	claimed := kept("5")
	data, err := proto.Marshal(claimed)
	require.NoError(t, err)
	ref, err := bus.NewBlobs(s.Res.Claims, nc.MaxPayload()).Put(t.Context(), subject.ClaimName(claimed.GetTenantId(), claimed.GetRequestId(), "request-1"), data)
	require.NoError(t, err)
	stub := proto.Clone(claimed).(*agentbusv1.Request)
	stub.Params, stub.EnvelopeRef = nil, ref
	enqueue(t, js, stub, copyOf("5", "a", false))
	assert.Empty(t, nextReply(t, replies).GetError(), "step 5's answer")
	waitFor(t, 5*time.Second, "step 5's stored copy deleted", func() bool {
		_, err := s.Res.Claims.GetInfo(t.Context(), ref.GetName())
		return errors.Is(err, jetstream.ErrObjectNotFound)
	})
	require.NoError(t, s.Res.Results.Purge(t.Context(), subject.ResultKey(claimed.GetTenantId(), claimed.GetRequestId())))
	enqueue(t, js, stub, copyOf("5", "b", true))
	assert.Equal(t, problem.ReplyUnavailable.Slug, nextReply(t, replies).GetError(), "step 5's second copy's answer")

	// A request released from behind a waiting one (its kept result is the 202 it got when it
	// was held), whose release was stored twice.
	released := kept("6")
	releasedCopy := func(id string, resent bool) nats.Header {
		h := copyOf("6", id, resent)
		h.Set(subject.HeaderReleased, "wait-1")
		return h
	}
	enqueue(t, js, released, releasedCopy("a", false))
	assert.Empty(t, nextReply(t, replies).GetError(), "step 6's answer")
	enqueue(t, js, released, releasedCopy("b", true))
	step(t, s, "x", "7", "")
	waitFor(t, 5*time.Second, "step 7 ran", func() bool {
		ns, _ := sa.starts("x")
		return slices.Contains(ns, "7")
	})

	ns, hosts := sa.starts("x")
	assert.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7"}, ns, "steps started, in order, each once (on %v)", hosts)
	assert.Equal(t, []string{owner, owner, "other", "other", "other", "other", "other"}, hosts, "the hosts of the steps")
}

// A request sent as a claim check (a large one, kept in the claims store while it waits) whose
// acknowledgement was lost comes back to another host after its claim was deleted, which a host
// does once it acknowledged the request. Its own record is its thread's newest: it was finished,
// and is acknowledged, not dead-lettered for a missing claim nor run again.
func TestLostAcknowledgementOfAClaimCheckedRequest(t *testing.T) {
	t.Parallel()
	const ackWait = 4 * time.Second
	s, sa, stop := stepWithLostAck(t, ackWait, claimStep)

	stop()
	waitRedelivered(t, s, 1, 4*ackWait)
	ns, hosts := sa.starts("x")
	assert.Equal(t, []string{"1"}, ns, "steps started (on %v)", hosts)
	info, err := s.Res.DeadLetters.Info(t.Context())
	require.NoError(t, err)
	assert.Zero(t, info.State.Msgs, "dead letters")
}

// claimStep publishes a Seq step as a claim check, as an ingress publishes a request too large
// for the inbox: the whole request in the claims store, a stub naming it in the inbox.
func claimStep(t *testing.T, s *stacktest.Stack, participant, n, sleep string) {
	t.Helper()
	nc := natstest.Conn(t, s.NATS)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	req := stepRequest(participant, n, sleep)
	data, err := proto.Marshal(req)
	require.NoError(t, err)
	ref, err := bus.NewBlobs(s.Res.Claims, nc.MaxPayload()).Put(t.Context(),
		subject.ClaimName(req.GetTenantId(), req.GetRequestId(), "request-1"), data)
	require.NoError(t, err)
	stub := proto.Clone(req).(*agentbusv1.Request)
	stub.Params, stub.EnvelopeRef = nil, ref
	enqueue(t, js, stub, nil)
}

// A request whose stored copy is gone can never run: it is kept as a dead letter, and its caller,
// waiting, gets the dead letter's answer.
func TestRequestWithoutItsStoredCopyAnswersAsDeadLetter(t *testing.T) {
	t.Parallel()
	sa := &seqAgent{}
	s := stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()}})
	nc := natstest.Conn(t, s.NATS)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	replyTo := nc.NewRespInbox()
	replies, err := nc.SubscribeSync(replyTo)
	require.NoError(t, err)

	req := stepRequest("x", "1", "")
	data, err := proto.Marshal(req)
	require.NoError(t, err)
	ref, err := bus.NewBlobs(s.Res.Claims, nc.MaxPayload()).Put(t.Context(),
		subject.ClaimName(req.GetTenantId(), req.GetRequestId(), "request-1"), data)
	require.NoError(t, err)
	require.NoError(t, s.Res.Claims.Delete(t.Context(), ref.GetName()))
	stub := proto.Clone(req).(*agentbusv1.Request)
	stub.Params, stub.EnvelopeRef, stub.ReplyTo = nil, ref, replyTo
	enqueue(t, js, stub, nil)

	requireDeadLetterAnswer(t, replies, 10*time.Second, "stored copy is missing")
	ns, _ := sa.starts("x")
	assert.Empty(t, ns, "the request never runs")
}

// stepWithLostAck starts a stack whose one Seq partition is owned by a host whose connection
// loses acknowledgements while told to, and runs step 1 of conversation x there, sent with send,
// with its acknowledgement lost. stop stops that host, which hands the partition to the stack's.
func stepWithLostAck(t *testing.T, ackWait time.Duration, send func(t *testing.T, s *stacktest.Stack, participant, n, sleep string)) (s *stacktest.Stack, sa *seqAgent, stop func()) {
	t.Helper()
	sa = &seqAgent{}
	s = stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()},
		Host: agent.HostConfig{ID: "other", AckWait: ackWait}})
	var losing atomic.Bool
	lossy := &natstest.Proxy{Server: s.NATS.Server, Drop: func(toServer bool, subj []byte) bool {
		return toServer && losing.Load() && bytes.HasPrefix(subj, []byte("$JS.ACK."))
	}}
	_, _, stop = startSeqOwner(t, s, sa, "other", agent.HostConfig{Conn: lossy.Connect(t, "lossy"), AckWait: ackWait})

	losing.Store(true)
	send(t, s, "x", "1", "")
	waitFor(t, 5*time.Second, "step 1 ran and its acknowledgement was lost", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) == 1 && lossy.Dropped.Load() > 0
	})
	losing.Store(false)
	return s, sa, stop
}

// waitRedelivered waits, up to within, until Seq's partition consumer has delivered more than
// sent requests (step 1 again) and none is left unacknowledged, and a moment more for the host
// to have run whatever it was going to run.
func waitRedelivered(t *testing.T, s *stacktest.Stack, sent uint64, within time.Duration) {
	t.Helper()
	waitFor(t, within, "step 1 delivered again, and no request left unacknowledged", func() bool {
		info := seqConsumer(t, s)
		return info != nil && info.Delivered.Consumer > sent && info.NumAckPending == 0
	})
	time.Sleep(200 * time.Millisecond)
}

// seqConsumer reads the info of Seq's partition consumer; nil when it cannot now.
func seqConsumer(t *testing.T, s *stacktest.Stack) *jetstream.ConsumerInfo {
	c, err := inboxOf(t, s, "Seq").Consumer(t.Context(), subject.PartitionConsumer("Seq", 0))
	if err != nil {
		return nil
	}
	info, err := c.Info(t.Context())
	if err != nil {
		return nil
	}
	return info
}
