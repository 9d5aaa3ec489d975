package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	storage "github.com/agentbus/agentbus/pkg/usage"
)

// TestCLITenantUsage: tenant usage prints what the current tenant, or the one named, stores by
// kind and its instances, against its quotas (none in the test stack); -o json prints the answer
// as it is; another tenant's admin may not read it.
func TestCLITenantUsage(t *testing.T) {
	h := newHarness(t)
	key := h.st.Key
	h.ok(key, "send", "--agent", "Echo", "--participant", "ada", "--text", "hello", "--wait")

	// What the host and the ingress count comes in each one's next publication of its counts.
	var r result
	require.Eventually(t, func() bool {
		r = h.ok(key, "tenant", "usage")
		return regexp.MustCompile(`(?m)^instances:\s+1 \(no quota\)$`).MatchString(r.stdout) &&
			regexp.MustCompile(`(?m)^history:\s+[1-9][0-9]* bytes`).MatchString(r.stdout) &&
			regexp.MustCompile(`(?m)^state:\s+[1-9][0-9]* bytes`).MatchString(r.stdout)
	}, 5*time.Second, 50*time.Millisecond, "the instance, its history and its state counted: %s", r.stdout)
	assert.Regexp(t, `(?m)^tenant:\s+default$`, r.stdout)
	assert.Regexp(t, `(?m)^files:\s+0 bytes$`, r.stdout)
	assert.Regexp(t, `(?m)^payloads:\s+0 bytes$`, r.stdout)
	assert.Regexp(t, `(?m)^kept:\s+0 bytes$`, r.stdout)
	assert.Regexp(t, `(?m)^timers:\s+0 bytes$`, r.stdout)
	assert.Regexp(t, `(?m)^total:\s+[1-9][0-9]* bytes.* \(no quota\)$`, r.stdout)

	r = h.ok(adminKey, "tenant", "usage", "default", "-o", "json")
	var rep storage.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "tenant usage -o json printed %q", r.stdout)
	assert.Equal(t, "default", rep.Tenant)
	assert.Equal(t, int64(1), rep.Instances)
	assert.Equal(t, rep.Bytes.History+rep.Bytes.State, rep.Bytes.Total)
	h.fails(http.StatusForbidden, h.st.OtherKey, "tenant", "usage", "default")
}

// TestBytesOf: sizes are shown exactly and, from a KiB on, in binary units; a figure against a
// quota with its share.
func TestBytesOf(t *testing.T) {
	for n, want := range map[int64]string{
		0:       "0 bytes",
		1023:    "1023 bytes",
		1536:    "1536 bytes (1.5 KiB)",
		1 << 30: "1073741824 bytes (1.0 GiB)",
	} {
		assert.Equal(t, want, bytesOf(n), "%d", n)
	}
	assert.Equal(t, "1536 bytes (1.5 KiB) of 1073741824 bytes (1.0 GiB) (0.0 %)", ofQuota(bytesOf(1536), 1536, 1<<30, bytesOf))
	assert.Equal(t, "7 (no quota)", ofQuota("7", 7, 0, nil))
}
