package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
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

// A notice of an instance makes its copy read the record again; a tenant's notice (its data
// erased) makes every copy of the tenant's instances read their records and threads again, and
// leaves the other tenants' alone.
func TestForgetTenant(t *testing.T) {
	copyOf := func(tenant, wf string) *liveInstance {
		return &liveInstance{key: liveKey{tenant, wf}, loaded: true, cursors: map[string]*history.Cursor{"ada": {LastSeq: 7}}}
	}
	s := &liveSet{m: map[liveKey]*liveInstance{}}
	for _, l := range []*liveInstance{copyOf("acme", "a"), copyOf("acme", "b"), copyOf("acme-2", "a")} {
		s.m[l.key] = l
	}
	s.forget("acme", "a")
	assert.False(t, s.m[liveKey{"acme", "a"}].loaded, "the instance's copy")
	assert.NotNil(t, s.m[liveKey{"acme", "a"}].cursors, "an instance's notice keeps its cursors")
	assert.True(t, s.m[liveKey{"acme", "b"}].loaded, "another instance's copy")

	s.forget("acme", "")
	for _, wf := range []string{"a", "b"} {
		l := s.m[liveKey{"acme", wf}]
		assert.False(t, l.loaded, "copy of %s", wf)
		assert.Nil(t, l.cursors, "cursors of %s", wf)
	}
	other := s.m[liveKey{"acme-2", "a"}]
	assert.True(t, other.loaded, "another tenant's copy")
	assert.NotNil(t, other.cursors, "another tenant's cursors")
}

// A tenant's erasure drops its requests stored before it, not those stored after nor another
// tenant's; the host forgets an erasure once no request stored before it can be waiting.
func TestErasedBefore(t *testing.T) {
	h := &Host{}
	at := time.Now()
	assert.False(t, h.erasedBefore("acme", at.UnixNano()), "no tenant erased")
	h.noteErased("acme", at)
	assert.True(t, h.erasedBefore("acme", at.Add(-time.Millisecond).UnixNano()), "stored before")
	assert.False(t, h.erasedBefore("acme", at.Add(time.Millisecond).UnixNano()), "stored after")
	assert.False(t, h.erasedBefore("acme-2", at.Add(-time.Millisecond).UnixNano()), "another tenant")
	later := at.Add(erasedKeep + time.Hour)
	h.noteErased("beta", later)
	assert.False(t, h.erasedBefore("acme", at.Add(-time.Millisecond).UnixNano()), "an erasure older than any request waiting")
	assert.True(t, h.erasedBefore("beta", later.Add(-time.Millisecond).UnixNano()))
}
