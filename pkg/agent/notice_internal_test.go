package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Every host that follows a shared Notices gets each notice once, until it stops following.
func TestNoticesReachEveryFollowerOnce(t *testing.T) {
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	n, err := FollowNotices(nc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	require.NoError(t, nc.Flush()) // the server has the subscription before pub publishes
	type notice struct{ tenant, workflowID string }
	a, b := make(chan notice, 4), make(chan notice, 4)
	stopA := n.follow(func(tenant, workflowID string) { a <- notice{tenant, workflowID} })
	stopB := n.follow(func(tenant, workflowID string) { b <- notice{tenant, workflowID} })
	defer stopB()
	pub := natstest.Conn(t, srv)
	wf := "acme:Echo:Supervisor Workflow:x"
	require.NoError(t, pub.Publish(subject.InstanceNotice("acme", wf), nil))
	for name, ch := range map[string]chan notice{"a": a, "b": b} {
		select {
		case got := <-ch:
			assert.Equal(t, notice{"acme", wf}, got, name)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "a follower missed the notice", name)
		}
	}
	stopA()
	require.NoError(t, pub.Publish(subject.InstanceNotice("acme", wf), nil))
	select {
	case <-b:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the follower that goes on missed the second notice")
	}
	n.mu.Lock() // the second notice is handed out in full: hand holds the lock meanwhile
	n.mu.Unlock()
	assert.Empty(t, a, "a follower that stopped got a notice")
	assert.Empty(t, b, "a notice came twice")
}
