package agent

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/gostack"
	"github.com/agentbus/agentbus/pkg/natsembed"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// dozeHost runs a host of one agent, Hits, whose partitions doze after idle.
func dozeHost(t *testing.T, srv *natsembed.Server, idle time.Duration, tune func(*Host)) *Host {
	return dozeHostWith(t, srv, HostConfig{IdleAfter: idle}, tune)
}

// dozeHostWith is dozeHost with more of the host's configuration.
func dozeHostWith(t *testing.T, srv *natsembed.Server, hc HostConfig, tune func(*Host)) *Host {
	t.Helper()
	a := New("Hits")
	a.WebhookFunc("hit", func(ctx context.Context, r *WebhookRequest) Response { return Status(http.StatusOK) })
	hc.Conn, hc.Agents, hc.Bus = natstest.Conn(t, srv), []*Agent{a}, bus.Config{Partitions: 4}
	h, err := NewHost(hc)
	require.NoError(t, err)
	if tune != nil {
		tune(h)
	}
	runHost(t, h)
	return h
}

// hit sends instance i of Hits a webhook request and returns the channel its reply comes to.
func hit(t *testing.T, nc *nats.Conn, i int) <-chan *nats.Msg {
	t.Helper()
	replies := make(chan *nats.Msg, 1)
	reply := fmt.Sprintf("test.doze.%d.%d", i, time.Now().UnixNano())
	sub, err := nc.ChanSubscribe(reply, replies)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	send(t, nc, i, reply)
	return replies
}

// send publishes a webhook request to instance i of Hits whose reply goes to reply.
func send(t *testing.T, nc *nats.Conn, i int, reply string) {
	t.Helper()
	wf := fmt.Sprintf("acme:Hits:Supervisor Workflow:i%d", i)
	req := &agentbusv1.Request{RequestId: fmt.Sprint(i, time.Now().UnixNano()), TenantId: "acme", WorkflowId: wf, AgentName: "Hits",
		WorkflowType: "Supervisor Workflow", ActivationName: fmt.Sprintf("i%d", i), ParticipantId: "webhook",
		Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "hit", CreatedAtMs: time.Now().UnixMilli()}
	data, err := proto.Marshal(req)
	require.NoError(t, err)
	msg := &nats.Msg{Subject: subject.Inbox("Hits", "acme", wf, "webhook"), Data: data, Header: nats.Header{}}
	msg.Header.Set(subject.HeaderReplyTo, reply)
	require.NoError(t, nc.PublishMsg(msg))
}

// pullsWaiting counts the pull requests waiting at each of Hits' partition consumers.
func pullsWaiting(t *testing.T, js jetstream.JetStream, partitions int) []int {
	t.Helper()
	out := make([]int, partitions)
	for p := range partitions {
		cons, err := js.Consumer(t.Context(), subject.InboxStream("Hits"), subject.PartitionConsumer("Hits", p))
		require.NoError(t, err)
		out[p] = cons.CachedInfo().NumWaiting
	}
	return out
}

// An idle partition stops pulling: its consumer has no pull request waiting, and the agent's
// next request wakes it and is answered.
func TestIdlePartitionsDoze(t *testing.T) {
	srv := natstest.Server(t, "")
	h := dozeHost(t, srv, 200*time.Millisecond, nil)
	nc := natstest.Conn(t, srv)
	js := natstest.JetStream(t, srv)

	for i := range 8 { // every partition has delivered once
		select {
		case <-hit(t, nc, i):
		case <-time.After(10 * time.Second):
			require.FailNow(t, "a request was not answered")
		}
	}
	require.Eventually(t, func() bool {
		for _, n := range pullsWaiting(t, js, 4) {
			if n > 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "the idle partitions went on pulling")
	h.mu.Lock()
	dozing := h.inboxes["Hits"].wake.watchers
	h.mu.Unlock()
	assert.Equal(t, 4, dozing)
	assert.Zero(t, pullGoroutines(), "a dozing partition holds a goroutine")

	for round := range 3 { // each wakes the partitions, which doze again
		for i := range 8 {
			select {
			case <-hit(t, nc, i):
			case <-time.After(10 * time.Second):
				require.FailNowf(t, "a request to a dozing partition was not answered", "round %d, instance %d", round, i)
			}
		}
		require.Eventually(t, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.inboxes["Hits"].wake.watchers == 4
		}, 10*time.Second, 50*time.Millisecond)
		assert.Eventually(t, func() bool { return pullGoroutines() == 0 }, 5*time.Second, 20*time.Millisecond,
			"round %d: a dozing partition holds a goroutine", round)
	}
	assert.NoError(t, h.Readiness(), "a host whose partitions doze is ready")
}

// pullGoroutines counts the goroutines that pull a partition, or end a doze: those of every host
// of the process (the caller runs none but its own).
func pullGoroutines() int {
	return len(gostack.Naming("agent.(*Host).pull", "agent.(*Host).nap", "agent.(*Host).doze"))
}

// A request wakes the partition it is for and no other: the agent's other partitions doze on.
func TestRequestWakesItsPartitionOnly(t *testing.T) {
	srv := natstest.Server(t, "")
	h := dozeHost(t, srv, 2*time.Second, nil)
	nc := natstest.Conn(t, srv)
	js := natstest.JetStream(t, srv)
	dozing := func() map[int]bool { // the partitions that doze (not about to)
		h.mu.Lock()
		defer h.mu.Unlock()
		out := map[int]bool{}
		for key, part := range h.parts {
			if part.dozing {
				out[key.n] = true
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(dozing()) == 4 }, 15*time.Second, 50*time.Millisecond, "the partitions did not doze")

	const i = 3
	p := subject.InboxPartition("acme", fmt.Sprintf("acme:Hits:Supervisor Workflow:i%d", i), 4)
	select {
	case <-hit(t, nc, i):
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the request was not answered")
	}
	// Until it dozes again (2 to 4 s after the request): p pulls, the others doze.
	require.Eventually(t, func() bool { return pullsWaiting(t, js, 4)[p] > 0 }, 2*time.Second, 20*time.Millisecond,
		"partition %d, which the request was for, pulls", p)
	others := dozing()
	assert.False(t, others[p])
	assert.Len(t, others, 3, "the other partitions doze on")
	for q, n := range pullsWaiting(t, js, 4) {
		if q != p {
			assert.Zero(t, n, "partition %d pulls", q)
		}
	}
	require.Eventually(t, func() bool { return len(dozing()) == 4 }, 15*time.Second, 50*time.Millisecond, "the woken partition dozes again")
}

// A request whose wake is lost (here: the subscription that wakes the partitions is gone) is
// found by the dozing partition's look at its consumer.
func TestDozingPartitionFindsUnannouncedRequest(t *testing.T) {
	srv := natstest.Server(t, "")
	h := dozeHost(t, srv, 200*time.Millisecond, func(h *Host) { h.dozeCheck = 300 * time.Millisecond })
	nc := natstest.Conn(t, srv)
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.inboxes["Hits"].wake.watchers == 4
	}, 10*time.Second, 50*time.Millisecond, "the partitions did not doze")
	h.mu.Lock()
	require.NoError(t, h.inboxes["Hits"].wake.sub.Unsubscribe())
	h.mu.Unlock()
	require.NoError(t, nc.Flush())
	select {
	case <-hit(t, nc, 1):
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the request was not answered")
	}
}

// The host's metrics read no dozing partition's consumer: it has nothing pending.
func TestDozingPartitionNotReadForMetrics(t *testing.T) {
	srv := natstest.Server(t, "")
	reg := prometheus.NewRegistry()
	h := dozeHostWith(t, srv, HostConfig{IdleAfter: 200 * time.Millisecond, Metrics: reg}, nil)
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.inboxes["Hits"].wake.watchers == 4
	}, 10*time.Second, 50*time.Millisecond, "the partitions did not doze")
	// Past the host's one look for stale pins of the partitions it gained (unpinStale).
	time.Sleep(time.Until(h.started.Add(registry.DeadAfter + time.Second)))
	nc := natstest.Conn(t, srv)
	infos, err := nc.SubscribeSync("$JS.API.CONSUMER.INFO." + subject.InboxStream("Hits") + ".>")
	require.NoError(t, err)
	t.Cleanup(func() { _ = infos.Unsubscribe() })
	time.Sleep(pendingEvery + time.Second)
	n, _, err := infos.Pending()
	require.NoError(t, err)
	assert.Zero(t, n, "consumer info requests while every partition dozes")
	for p := range 4 {
		assert.Zero(t, testutil.ToFloat64(h.metrics.pending.WithLabelValues("Hits", fmt.Sprint(p))), "partition %d", p)
	}
	assert.Equal(t, 4.0, testutil.ToFloat64(h.metrics.dozing["Hits"]), "agentbus_partitions_dozing")
	select { // a request wakes them
	case <-hit(t, nc, 0):
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the request was not answered")
	}
	assert.Less(t, testutil.ToFloat64(h.metrics.dozing["Hits"]), 4.0, "agentbus_partitions_dozing once a request came")
}

// A host whose partitions doze hands some over to a host that joins, and the requests of every
// partition are answered, while the partitions of both doze between them.
func TestDozingPartitionsHandedOver(t *testing.T) {
	srv := natstest.Server(t, "")
	a := dozeHostWith(t, srv, HostConfig{ID: "a", IdleAfter: 200 * time.Millisecond}, nil)
	dozing := func(h *Host) int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for _, part := range h.parts {
			if part.dozing {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return dozing(a) == 4 }, 10*time.Second, 50*time.Millisecond, "the partitions did not doze")
	b := dozeHostWith(t, srv, HostConfig{ID: "b", IdleAfter: 200 * time.Millisecond}, nil)
	owned := func(h *Host) int { return len(h.Partitions()["Hits"]) }
	require.Eventually(t, func() bool { return owned(a) == 2 && owned(b) == 2 }, 10*time.Second, 50*time.Millisecond, "the partitions were not divided")
	nc := natstest.Conn(t, srv)
	for round := range 2 {
		for i := range 8 {
			select {
			case <-hit(t, nc, i):
			case <-time.After(10 * time.Second):
				require.FailNowf(t, "a request was not answered", "round %d, instance %d", round, i)
			}
		}
		require.Eventually(t, func() bool { return dozing(a) == 2 && dozing(b) == 2 }, 10*time.Second, 50*time.Millisecond, "round %d", round)
	}
}

// On a cluster, a request published on another server than the host's wakes its dozing
// partitions: the server learns of the host's subscription through the routes.
func TestDozingPartitionsWokenAcrossACluster(t *testing.T) {
	cl := natstest.NewCluster(t, 3)
	connect := func(i int) *nats.Conn {
		nc, err := nats.Connect(cl.Servers[i].ClientURL(), nats.Name(t.Name()))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	a := New("Hits")
	a.WebhookFunc("hit", func(ctx context.Context, r *WebhookRequest) Response { return Status(http.StatusOK) })
	h, err := NewHost(HostConfig{Conn: connect(1), Agents: []*Agent{a}, Bus: bus.Config{Partitions: 4}, IdleAfter: 200 * time.Millisecond})
	require.NoError(t, err)
	runHost(t, h)
	nc := connect(0)
	replies := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe("test.cluster.>", replies)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	acc, err := cl.Servers[1].LookupAccount(server.DEFAULT_GLOBAL_ACCOUNT)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return acc.SubscriptionInterest("test.cluster.x") }, 10*time.Second, 10*time.Millisecond,
		"the host's server does not know where the replies go")
	for round := range 3 {
		require.Eventually(t, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.inboxes["Hits"].wake.watchers == 4
		}, 20*time.Second, 50*time.Millisecond, "round %d: the partitions did not doze", round)
		for i := range 8 {
			send(t, nc, i, fmt.Sprintf("test.cluster.%d.%d", round, i))
			select {
			case <-replies:
			case <-time.After(10 * time.Second):
				require.FailNowf(t, "a request was not answered", "round %d, instance %d", round, i)
			}
		}
	}
}

// With IdleAfter negative the host pulls every partition all the time.
func TestIdleAfterNegativePullsAlways(t *testing.T) {
	srv := natstest.Server(t, "")
	h := dozeHost(t, srv, -1, nil)
	assert.Zero(t, h.cfg.IdleAfter)
	js := natstest.JetStream(t, srv)
	time.Sleep(500 * time.Millisecond)
	for p, n := range pullsWaiting(t, js, 4) {
		assert.Positive(t, n, "partition %d", p)
	}
}

// A dozing partition pulls again before its consumer's inactive threshold would delete the
// consumer, and dozes again: the consumers stay through several thresholds, and a request after
// them is answered.
func TestDozingPartitionKeepsItsConsumer(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t, "")
	h := dozeHostWith(t, srv, HostConfig{IdleAfter: 200 * time.Millisecond, ConsumerInactiveThreshold: MinConsumerInactiveThreshold}, nil)
	nc := natstest.Conn(t, srv)
	js := natstest.JetStream(t, srv)
	dozing := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.inboxes["Hits"].wake.watchers == 4
	}
	require.Eventually(t, dozing, 10*time.Second, 50*time.Millisecond, "the partitions did not doze")
	pulls, err := nc.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT." + subject.InboxStream("Hits") + ".>")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pulls.Unsubscribe() })

	time.Sleep(2*MinConsumerInactiveThreshold + MinConsumerInactiveThreshold/2)
	n, _, err := pulls.Pending()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 2*4, "pull requests of the dozing partitions (two renewals each)")
	for p := range 4 {
		_, err := js.Consumer(t.Context(), subject.InboxStream("Hits"), subject.PartitionConsumer("Hits", p))
		assert.NoError(t, err, "the consumer of partition %d", p)
	}
	require.Eventually(t, dozing, 10*time.Second, 50*time.Millisecond, "the partitions did not doze again")
	for i := range 8 {
		select {
		case <-hit(t, nc, i):
		case <-time.After(10 * time.Second):
			require.FailNowf(t, "a request was not answered", "instance %d", i)
		}
	}
}
