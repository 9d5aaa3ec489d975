package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/tenantlimits"
)

// TestCLITenantLimits: tenant limits get prints what holds and marks what was set; set changes
// the values given on top of what is set, of the tenant or of an agent, takes a value away with
// "default", starts from nothing with --replace and takes the whole record from a file; only a
// system admin sets, a value out of its range is refused naming the field; hosts prints the
// tenants' queues.
func TestCLITenantLimits(t *testing.T) {
	h := newHarness(t)
	r := h.ok(h.st.Key, "tenant", "limits", "get")
	assert.Regexp(t, `(?m)^tenant:\s+default$`, r.stdout)
	assert.Regexp(t, `(?m)^set:\s+nothing: the deployment's settings$`, r.stdout)
	assert.Regexp(t, `(?m)^weight:\s+1$`, r.stdout)
	assert.Regexp(t, `(?m)^max queued:\s+none$`, r.stdout)

	r = h.ok(adminKey, "tenant", "limits", "set", "default", "--weight", "3", "--max-queued", "100", "--key-rate", "20:40", "--write-rate", "2:10")
	assert.Regexp(t, `(?m)^weight:\s+3 \(set\)$`, r.stdout)
	assert.Regexp(t, `(?m)^write rate:\s+2/s, bursts of 10 \(set\)$`, r.stdout)
	r = h.ok(adminKey, "tenant", "limits", "set", "default", "--listen-rate", "5")
	assert.Regexp(t, `(?m)^listen rate:\s+5/s, bursts of 10 \(set\)$`, r.stdout)
	assert.Regexp(t, `(?m)^write rate:\s+2/s, bursts of 10 \(set\)$`, r.stdout, "set changes only the values given")
	assert.Regexp(t, `(?m)^max queued:\s+100 \(set\)$`, r.stdout)
	assert.Regexp(t, `(?m)^key rate:\s+20/s, bursts of 40 \(set\)$`, r.stdout)
	assert.Regexp(t, `(?m)^set:\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d by admin$`, r.stdout)

	r = h.ok(adminKey, "-tenant", "default", "tenant", "limits", "set", "--agent", "Echo", "--max-concurrent", "2", "--rate", "5")
	assert.Regexp(t, `(?m)^weight:\s+3 \(set\)$`, r.stdout, "the tenant's values stay")
	assert.Regexp(t, `(?m)^Echo\s+3\s+2 \(set\)\s+100\s+5/s, bursts of 10 \(set\)$`, r.stdout, "the agent's row: its own values and the tenant's")

	r = h.ok(h.st.Key, "tenant", "limits", "get", "-o", "json")
	var rec tenantlimits.Record
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec), "-o json printed %q", r.stdout)
	assert.Equal(t, 2, *rec.Limits.Agents["Echo"].MaxConcurrent)
	assert.Equal(t, 100, rec.Effective.MaxQueued)

	r = h.ok(adminKey, "tenant", "limits", "set", "default", "--max-queued", "default", "--agent", "Echo", "--max-concurrent", "default", "--rate", "default")
	assert.Regexp(t, `(?m)^weight:\s+3 \(set\)$`, r.stdout)
	assert.NotContains(t, r.stdout, "AGENT", "the agent has no values left")
	r = h.ok(adminKey, "tenant", "limits", "get", "default")
	assert.Regexp(t, `(?m)^max queued:\s+100 \(set\)$`, r.stdout, "--agent took the agent's values away, not the tenant's")

	r = h.ok(adminKey, "tenant", "limits", "set", "default", "--replace", "--max-bytes", "1048576")
	assert.Regexp(t, `(?m)^weight:\s+1$`, r.stdout, "--replace starts from nothing")
	assert.Regexp(t, `(?m)^max bytes:\s+1048576 bytes \(1.0 MiB\) \(set\)$`, r.stdout)

	r = h.cmdIn(adminKey, `{"weight":2,"agents":{"Echo":{"maxQueued":7}}}`, "tenant", "limits", "set", "-f", "-")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `(?m)^weight:\s+2 \(set\)$`, r.stdout)
	assert.Regexp(t, `(?m)^Echo\s+2\s+none\s+7 \(set\)\s+none$`, r.stdout)

	h.fails(http.StatusForbidden, h.st.Key, "tenant", "limits", "set", "--weight", "2")
	r = h.fails(http.StatusBadRequest, adminKey, "tenant", "limits", "set", "--weight", "0")
	assert.Contains(t, r.stderr, "weight must be a whole number from 1 to 1000")
	r = h.cmd(adminKey, false, "tenant", "limits", "set", "--agent", "Echo", "--key-rate", "5")
	assert.Error(t, r.err)
	assert.Contains(t, r.stderr, "the tenant's, not an agent's")
	h.ok(adminKey, "tenant", "limits", "set", "--replace")

	// A sleep of Echo runs while hosts is asked: the tenants' queues show it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(h.st.URL+"/api/user/webhooks/Echo/sleep?"+url.Values{"apikey": {h.st.Key}, "ms": {"1500"}}.Encode(), "application/json", nil)
		if err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool {
		r = h.ok(adminKey, "hosts")
		return regexp.MustCompile(`(?m)^Echo\s+default\s+0\s+1\s+-\s+none\s+none\s+-$`).MatchString(r.stdout)
	}, 5*time.Second, 100*time.Millisecond, "hosts prints the running sleep: %s", r.stdout)
	assert.Regexp(t, `(?m)^AGENT\s+TENANT\s+QUEUED\s+RUNNING\s+OLDEST\s+MAX QUEUED\s+MAX CONCURRENT\s+CROWDING$`, r.stdout)
	<-done
}
