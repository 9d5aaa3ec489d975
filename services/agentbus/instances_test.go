package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/instance"
)

// TestCLIInstances: the CLI lists an agent's instances, shows one and completes its run, in a
// table and as JSON; the system admin backfills the run index.
func TestCLIInstances(t *testing.T) {
	h := newHarness(t)
	key := h.st.Key
	for _, activation := range []string{"first", "second"} {
		h.ok(key, "send", "--agent", "Echo", "--activation", activation, "--participant", "ada", "--type", "Data",
			"--text", "count", "--wait")
	}

	r := h.ok(key, "instances", "list", "Echo")
	assert.Regexp(t, `(?m)^ACTIVATION\s+WORKFLOW TYPE\s+STATUS\s+EVENTS\s+LAST ACTIVE\s+STARTED\s+RUN$`, r.stdout)
	assert.Regexp(t, `(?s)second\s+Supervisor Workflow\s+running.*first\s+Supervisor Workflow\s+running`, r.stdout, "newest first")
	r = h.ok(key, "instances", "list", "Echo", "--limit", "1")
	assert.NotContains(t, r.stdout, "first")
	assert.Contains(t, r.stderr, "more: agentbus instances list Echo --cursor ")
	r = h.ok(key, "instances", "list", "Echo", "--prefix", "fir", "-o", "json")
	var page instance.Page
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Instances, 1)
	assert.Equal(t, "first", page.Instances[0].Activation)

	wf := "default:Echo:Supervisor Workflow:first"
	r = h.ok(key, "instances", "show", wf)
	assert.Regexp(t, `(?m)^workflow:\s+default:Echo:Supervisor Workflow:first$`, r.stdout)
	assert.Regexp(t, `(?m)^status:\s+running$`, r.stdout)
	assert.Regexp(t, `(?m)^partition:\s+\d+$`, r.stdout)
	assert.Regexp(t, `(?m)^host:\s+\S+`, r.stdout)
	assert.Contains(t, r.stdout, "recent requests:")
	assert.Regexp(t, `(?m)^\s+\S+ \S+\s+ada\s+Data/count\s+200\s+\d+\s`, r.stdout)

	// A request that waits is shown with what it waits for.
	h.ok(key, "send", "--agent", "Echo", "--activation", "first", "--participant", "bob", "--type", "Data",
		"--text", "ask", "--data", `{"question":"Which colour?"}`, "--wait")
	r = h.ok(key, "instances", "show", wf)
	assert.Contains(t, r.stdout, "waiting:")
	assert.Regexp(t, `(?m)^\s+PARTICIPANT\s+REQUEST\s+WAIT\s+FOR\s+DEADLINE\s+QUEUED$`, r.stdout)
	assert.Regexp(t, `(?m)^\s+bob\s+\S+\s+answer\s+chat, data answer, signal answer\s+\S+ \S+\s+0$`, r.stdout)

	r = h.ok(key, "instances", "complete", wf)
	assert.Contains(t, r.stdout, "completed; the next message starts a new run")
	h.fails(http.StatusConflict, key, "instances", "complete", wf)
	h.fails(http.StatusNotFound, key, "instances", "show", "default:Echo:Supervisor Workflow:nope")
	r = h.ok(key, "instances", "show", wf, "-json")
	var shown struct{ Status string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown))
	assert.Equal(t, "completed", shown.Status)
	r = h.ok(key, "instances", "list", "Echo", "--status", "completed")
	assert.Contains(t, r.stdout, "first")
	assert.NotContains(t, r.stdout, "second")

	h.fails(http.StatusForbidden, key, "instances", "backfill")
	r = h.ok(adminKey, "instances", "backfill")
	assert.Equal(t, "scanned 2 instance records, indexed 0, 0 remaining\n", r.stdout)
}
