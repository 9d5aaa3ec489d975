package subject_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestInboxPartitionMatchesTheServer publishes requests of many instances through a real inbox
// stream and checks that InboxPartition (and RequestPartition, from the subject published) names
// the partition the server's transform stored each under, and that InstanceInbox and IsInstanceInbox take exactly the instance's subjects.
func TestInboxPartitionMatchesTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for _, partitions := range []int{1, 7, 16} {
		// A fresh inbox for each count: a process refuses another count while requests wait.
		if err := js.DeleteStream(ctx, subject.InboxStream("Echo")); err != nil {
			require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
		}
		res, err := bus.Ensure(ctx, js, bus.Config{Partitions: partitions})
		require.NoError(t, err, "partitions %d", partitions)
		inbox, err := res.InboxOf(ctx, "Echo")
		require.NoError(t, err, "partitions %d", partitions)
		seen := map[int]bool{}
		for _, tenant := range []string{"acme", "Other_T-2", "t"} {
			for i := range 40 {
				wf := fmt.Sprintf("%s:Echo:Supervisor Workflow:act-%d", tenant, i)
				if i%5 == 0 {
					wf = fmt.Sprintf("%s:a.b:日本 %d:>*", tenant, i)
				}
				published := subject.Inbox("Echo", tenant, wf, "ada")
				ack, err := js.Publish(ctx, published, nil)
				require.NoError(t, err)
				m, err := inbox.GetMsg(ctx, ack.Sequence)
				require.NoError(t, err)
				got, err := subject.ParseStoredInbox(m.Subject)
				require.NoError(t, err)
				p := subject.InboxPartition(tenant, wf, partitions)
				seen[p] = true
				assert.Equal(t, fmt.Sprint(p), got.Partition, "tenant %q workflow %q, %d partitions", tenant, wf, partitions)
				fromSubject, ok := subject.RequestPartition(published, partitions)
				assert.True(t, ok, "%s", published)
				assert.Equal(t, p, fromSubject, "the partition read from the published subject %s", published)
				assert.True(t, subject.MatchesFilter(m.Subject, subject.InstanceInbox("Echo", p, tenant, wf)), "%s", m.Subject)
				assert.True(t, subject.IsInstanceInbox(m.Subject, tenant, subject.Token(wf)), "%s", m.Subject)
				assert.False(t, subject.IsInstanceInbox(m.Subject, tenant, subject.Token(wf+"x")), "%s", m.Subject)
				assert.False(t, subject.IsInstanceInbox(m.Subject, tenant+"x", subject.Token(wf)), "%s", m.Subject)
			}
		}
		if partitions > 1 {
			assert.Greater(t, len(seen), partitions/2, "%d partitions: the instances landed in %d", partitions, len(seen))
		}
	}
	assert.False(t, subject.IsInstanceInbox(subject.InboxMarker("Echo"), "t", "x"))
	for _, other := range []string{subject.InboxMarker("Echo"), "agentbus.in.a.t.wf", "agentbus.in.a.t.wf.p.q", "agentbus.other.a.t.wf.p", "agentbus.in.a..wf.p"} {
		_, ok := subject.RequestPartition(other, 16)
		assert.False(t, ok, "%s is not a request's subject", other)
	}
	assert.False(t, subject.IsInstanceInbox("agentbus.in.a.1.t.wf", "t", "wf"))
	assert.False(t, subject.IsInstanceInbox("agentbus.in.a.1.t.wf.p.q", "t", "wf"))
}

func TestInspectSubject(t *testing.T) {
	for _, id := range []string{"host-1", "a.b *>", ""} {
		s := subject.Inspect(id)
		assert.True(t, subject.MatchesFilter(s, "agentbus.inspect.*"), "%q: %s", id, s)
	}
}
