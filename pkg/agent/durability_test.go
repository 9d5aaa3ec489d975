package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// A request accepted into the inbox survives a full restart of NATS and the host, and is handled
// afterwards, even though consumer state is kept in memory.
func TestQueuedRequestSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := stacktest.Start(t, stacktest.Options{Dir: dir})
	require.NoError(t, s.StopHost())
	wf := "default:Echo:Supervisor Workflow:durable"
	req := &agentbusv1.Request{
		RequestId: "queued-1", TenantId: "default", WorkflowId: wf, AgentName: "Echo",
		WorkflowType: "Supervisor Workflow", ActivationName: "durable", ParticipantId: "webhook",
		Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "count",
	}
	nc, err := s.NATS.Connect("test")
	require.NoError(t, err)
	js, _ := jetstream.New(nc)
	enqueue(t, js, req, nil)
	nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))

	s = stacktest.Start(t, stacktest.Options{Dir: dir})
	// The state call queues behind the restored count in the same conversation.
	_, _, b := post(t, s, wf, "state", "")
	assert.Contains(t, string(b), `"count":1`, "state after restart")
}

// A request with a caller-chosen requestId that the inbox stored twice (as a NATS cluster can
// when its stream leader fails while the first copy is being accepted) runs once: the second
// copy is answered with the first one's kept result.
func TestRequestStoredTwiceRunsOnce(t *testing.T) {
	s, wf, req, nc := keptCount(t, "twice")
	js, _ := jetstream.New(nc)
	for _, id := range []string{"copy-1", "copy-2"} {
		// Two stored copies, as if the dedupe missed.
		enqueue(t, js, req, nats.Header{subject.HeaderMsgID: {id}})
	}
	// The state call queues behind both copies in the same conversation.
	_, _, b := post(t, s, wf, "state", "")
	assert.Contains(t, string(b), `"count":1`, "state after a request stored twice")
}

// A second copy of a request with a caller-chosen id, stored after a later request of its
// conversation, runs no more when the first one's kept result cannot be read (here: it is
// purged): the host that finished the first remembers it.
func TestRequestStoredTwiceRunsOnceWithoutItsResult(t *testing.T) {
	s, wf, req, nc := keptCount(t, "twice-lost")
	js, _ := jetstream.New(nc)
	enqueue(t, js, req, nats.Header{subject.HeaderMsgID: {"copy-1"}})
	_, _, b := post(t, s, wf, "count", "")
	require.Contains(t, string(b), `"count":2`, "a count after the first copy")
	require.NoError(t, s.Res.Results.Purge(t.Context(), subject.ResultKey(req.TenantId, req.RequestId)))

	replies, err := nc.SubscribeSync("test.twice.reply")
	require.NoError(t, err)
	req.ReplyTo = "test.twice.reply"
	enqueue(t, js, req, nats.Header{subject.HeaderMsgID: {"copy-2"}})
	_, _, b = post(t, s, wf, "state", "")
	assert.Contains(t, string(b), `"count":2`, "state after the second copy")
	assert.Equal(t, problem.ReplyUnavailable.Slug, nextReply(t, replies).GetError(), "the second copy's answer")
}

// keptCount starts a stack and returns it with the count request of Echo's instance activation
// with a caller-chosen id (activation-1), its workflow and a NATS connection to publish it with.
func keptCount(t *testing.T, activation string) (*stacktest.Stack, string, *agentbusv1.Request, *nats.Conn) {
	t.Helper()
	s := stacktest.Start(t, stacktest.Options{})
	wf := "default:Echo:Supervisor Workflow:" + activation
	req := &agentbusv1.Request{
		RequestId: activation + "-1", TenantId: "default", WorkflowId: wf, AgentName: "Echo",
		WorkflowType: "Supervisor Workflow", ActivationName: activation, ParticipantId: "webhook",
		Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "count", KeepResult: true, Fingerprint: "f",
	}
	return s, wf, req, natstest.Conn(t, s.NATS)
}
