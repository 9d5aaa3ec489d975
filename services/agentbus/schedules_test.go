package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCLISchedules: the CLI lists the timer an agent set (Echo's tick) and cancels it.
func TestCLISchedules(t *testing.T) {
	h := newHarness(t)
	key := h.st.Key
	h.ok(key, "send", "--agent", "Echo", "--activation", "clock", "--participant", "ada", "--type", "Data",
		"--text", "tick", "--data", `{"seconds":60}`, "--wait")

	r := h.ok(key, "schedule", "list", "--agent", "Echo", "--activation", "clock")
	assert.Contains(t, r.stdout, "NAME")
	assert.Regexp(t, `(?m)^tick\s+@every 1m0s\s+ada\s+Data/tick\s`, r.stdout)

	r = h.ok(key, "schedule", "cancel", "tick", "--workflow", "default:Echo:Supervisor Workflow:clock")
	assert.Equal(t, "cancelled timer tick\n", r.stdout)
	h.fails(http.StatusNotFound, key, "schedule", "cancel", "tick", "--agent", "Echo", "--activation", "clock")

	r = h.ok(key, "schedule", "list", "--agent", "Echo", "--activation", "clock", "-json")
	assert.JSONEq(t, `{"workflowId":"default:Echo:Supervisor Workflow:clock","schedules":[]}`, r.stdout)
}
