package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/inspect"
)

// TestCLIHostsAndQueue: the CLI shows the hosts, an instance's queue with a running request and
// one queued behind it, and refuses to retry a request that is not in retry backoff.
func TestCLIHostsAndQueue(t *testing.T) {
	h := newHarness(t)
	key := h.st.Key

	r := h.ok(adminKey, "hosts", "--all")
	assert.Regexp(t, `(?m)^HOST\s+IN FLIGHT\s+HEARTBEAT\s+AGENTS\s+PARTITIONS$`, r.stdout)
	assert.Regexp(t, `(?m)^\S+\s+\d+\s+\S+ ago\s+Echo\s+Echo:0-3$`, r.stdout)
	assert.Regexp(t, `(?m)^Echo\s+3\s+\S+\s+0\s+0\s+0$`, r.stdout, "every partition, with --all")
	r = h.ok(adminKey, "hosts", "-o", "json")
	var view inspect.Hosts
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &view), "hosts -o json printed %q", r.stdout)
	require.Len(t, view.Hosts, 1)
	assert.Equal(t, []string{"Echo"}, view.Hosts[0].Agents)
	h.fails(http.StatusForbidden, key, "hosts")
	r = h.ok(key, "-tenant", "default", "hosts")
	assert.Contains(t, r.stdout, "Echo:0-3")

	const wf = "default:Echo:Supervisor Workflow:cli-queue"
	h.ok(key, "send", "--agent", "Echo", "--activation", "cli-queue", "--participant", "ada", "--type", "Data",
		"--text", "sleep", "--data", `{"ms":2000}`)
	h.ok(key, "send", "--agent", "Echo", "--activation", "cli-queue", "--participant", "ada", "--type", "Data",
		"--text", "sum", "--data", `{"values":[1]}`)
	require.Eventually(t, func() bool {
		r = h.ok(key, "instances", "queue", wf)
		return strings.Contains(r.stdout, "queued behind #") && strings.Contains(r.stdout, "running for")
	}, 10*time.Second, 50*time.Millisecond, "the queue: one running, one behind it")
	assert.Contains(t, r.stdout, wf+": partition ")
	assert.Regexp(t, `(?m)^ada\s+2\s+\S+\s+0$`, r.stdout, "two stored, none undelivered")
	assert.Regexp(t, `(?m)^ada\s+\d+\s+\S+\s+Data/sleep\s+\S+\s+1\s+\S+\s+running for `, r.stdout)
	assert.Regexp(t, `(?m)^ada\s+\d+\s+\S+\s+Data/sum\s+\S+\s+1\s+\S+\s+queued behind #\d+$`, r.stdout)

	r = h.ok(key, "instances", "queue", wf, "-o", "json")
	var q inspect.InstanceQueue
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &q), "instances queue -o json printed %q", r.stdout)
	require.Len(t, q.Conversations, 1)
	require.NotEmpty(t, q.Conversations[0].Requests)
	running := q.Conversations[0].Requests[0].RequestID
	h.fails(http.StatusConflict, key, "instances", "retry", wf, running)
	h.fails(http.StatusNotFound, key, "instances", "retry", wf, "nobody")
	h.fails(http.StatusNotFound, h.st.OtherKey, "-tenant", "other", "instances", "queue", wf)

	require.Eventually(t, func() bool {
		return strings.Contains(h.ok(key, "instances", "queue", wf).stdout, "nothing waits")
	}, 10*time.Second, 100*time.Millisecond, "the queue empties")
}
