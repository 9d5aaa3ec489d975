package ingress_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// The reply subject of a waiting call rides in the request envelope while every live host of the
// agent says it reads it there, and in the Agentbus-Reply-To header while a host that does not
// (one of an earlier release) is live. Either way the caller gets its answer.
func TestReplySubjectFollowsTheHostsFeatures(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	published := subscribeInbox(t, s)

	// post calls Echo's webhook in the background; its status arrives on the channel.
	post := func(i int) <-chan int {
		u := s.URL + "/api/user/webhooks/" + url.PathEscape(fmt.Sprintf("default:Echo:Supervisor Workflow:reply-%d", i)) + "/echo?" + q("apikey", s.Key).Encode()
		return postLater(u, "text/plain", []byte("hi"))
	}
	next := func() (*nats.Msg, *agentbusv1.Request) { return nextPublished(t, published) }

	done := post(0)
	m, req := next()
	assert.Empty(t, m.Header.Get(subject.HeaderReplyTo), "a header while every host reads the envelope")
	assert.True(t, strings.HasPrefix(req.GetReplyTo(), "_INBOX."), "reply subject in the envelope: %q", req.GetReplyTo())
	assert.Equal(t, http.StatusOK, <-done)

	// A host of an earlier release joins: its heartbeat names no features.
	ctx, cancel := context.WithCancel(context.Background())
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		for {
			_ = registry.Beat(ctx, s.Res.Hosts, registry.Host{ID: "old-host", Agents: []string{"Echo"}, StartedAt: time.Now()})
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	// Until the ingress sees it, calls still carry the reply subject in the envelope. Requests
	// of the partitions the new host takes wait for it (it never pulls) until it leaves.
	var calls []<-chan int
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; ; i++ {
		require.True(t, time.Now().Before(deadline), "the ingress never put the reply subject in the header")
		calls = append(calls, post(i))
		m, req = next()
		if m.Header.Get(subject.HeaderReplyTo) != "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.True(t, strings.HasPrefix(m.Header.Get(subject.HeaderReplyTo), "_INBOX."), "reply subject in the header: %q", m.Header.Get(subject.HeaderReplyTo))
	assert.Empty(t, req.GetReplyTo(), "a reply subject in the envelope while a host that does not read it is live")

	cancel()
	<-beating
	require.NoError(t, registry.Leave(context.Background(), s.Res.Hosts, "old-host"))
	for i, c := range calls {
		select {
		case status := <-c:
			assert.Equal(t, http.StatusOK, status, "call %d", i+1)
		case <-time.After(20 * time.Second):
			t.Fatalf("call %d was not answered", i+1)
		}
	}
}
