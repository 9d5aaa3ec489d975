package bus_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// withStream starts an embedded server with one stream of the name over subjects and returns a
// connection to it, its JetStream context and a context that ends with the test (at most 20 s).
func withStream(t *testing.T, name string, subjects ...string) (*nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects})
	require.NoError(t, err)
	return nc, js, ctx
}

// withCluster starts a three-node embedded cluster (skipped with -short) and returns a
// connection to it, its JetStream context and a context that ends with the test (at most d).
func withCluster(t *testing.T, d time.Duration) (*nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	cl := natstest.NewCluster(t, 3)
	nc, err := nats.Connect(cl.URLs())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return nc, js, ctx
}

// lossyServer subscribes to subjects as a stream's server would that answers the copies of
// each message it receives in turn with answers (the first copy with the first answer, and so
// on; "" is no answer at all, as from a server that died before it answered; copies after the
// last answer get the last). It returns how many copies of each subject it received.
func lossyServer(t *testing.T, nc *nats.Conn, subjects string, answers ...string) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := make(map[string]int)
	sub, err := nc.Subscribe(subjects, func(m *nats.Msg) {
		mu.Lock()
		seen[m.Subject]++
		n := seen[m.Subject]
		mu.Unlock()
		if a := answers[min(n, len(answers))-1]; a != "" {
			_ = m.Respond([]byte(a))
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// blackhole subscribes to blackhole.> with a responder that swallows requests, standing in for
// a server that died after taking one, until the test ends.
func blackhole(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.Subscribe("blackhole.>", func(*nats.Msg) {})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// awaitFixture is a server with one stream and the Replies of an ingress instance, through
// which tests send requests with Waiter.Send and read what Waiter.Await makes of them.
type awaitFixture struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	ctx     context.Context
	replies *bus.Replies
}

// newAwaitFixture starts a server with one stream of the name over subjects, as withStream
// does, and subscribes to the replies of the ingress instance ing1.
func newAwaitFixture(t *testing.T, name string, subjects ...string) *awaitFixture {
	t.Helper()
	nc, js, ctx := withStream(t, name, subjects...)
	replies, err := bus.NewReplies(nc, "ing1", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = replies.Close() })
	return &awaitFixture{nc: nc, js: js, ctx: ctx, replies: replies}
}

// await sends m with a new waiter, calls reply with the waiter if it is not nil, and returns
// how long Await took and what it makes of it within accept and timeout.
func (f *awaitFixture) await(t *testing.T, m *nats.Msg, accept, timeout time.Duration, reply func(*bus.Waiter)) (*agentbusv1.Reply, time.Duration, error) {
	t.Helper()
	w := f.replies.Wait()
	defer w.Done()
	require.NoError(t, w.Send(m))
	if reply != nil {
		reply(w)
	}
	start := time.Now()
	rep, err := w.Await(f.ctx, accept, timeout)
	return rep, time.Since(start), err
}

// answer publishes rep as a workflow host does, to the reply subject of w.
func (f *awaitFixture) answer(t *testing.T, w *bus.Waiter, rep *agentbusv1.Reply) {
	t.Helper()
	data, err := proto.Marshal(rep)
	require.NoError(t, err)
	require.NoError(t, f.nc.Publish(w.Subject, data))
}

// requestMsg returns a request on subj, with the de-duplication id id if it is not empty.
func requestMsg(subj, id string) *nats.Msg {
	m := nats.NewMsg(subj)
	m.Data = []byte("request")
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	return m
}

// Answers of a stream, for lossyServer.
const (
	stored        = `{"stream":"LOSSY","seq":1}`
	msgIDInFlight = `{"type":"io.nats.jetstream.api.v1.pub_ack_response","error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}`
)
