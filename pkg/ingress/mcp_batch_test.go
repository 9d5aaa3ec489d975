package ingress_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stack"
)

// mcpBatch POSTs a JSON-RPC batch without MCP-Protocol-Version, which the transport then takes
// as protocol 2025-03-26, the last that allows batches.
func mcpBatch(t *testing.T, base, key string, msgs []string) (int, []byte) {
	t.Helper()
	hdr := append(bearerHeader(key), "Content-Type", "application/json", "Accept", "application/json, text/event-stream")
	status, _, b := doRequest(t, http.MethodPost, base+"/mcp", strings.NewReader("["+strings.Join(msgs, ",")+"]"), hdr...)
	return status, b
}

// toolCalls are n tools/call messages of tool with arguments args(i), ids 1 to n.
func toolCalls(n int, tool string, args func(i int) string) []string {
	msgs := make([]string, n)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, i+1, tool, args(i+1))
	}
	return msgs
}

// rpcAnswers decodes a batch's answers by id.
func rpcAnswers(t *testing.T, b []byte) map[int]map[string]any {
	t.Helper()
	var list []map[string]any
	require.NoError(t, json.Unmarshal(b, &list), "%s", b)
	byID := make(map[int]map[string]any, len(list))
	for _, a := range list {
		id, _ := a["id"].(float64)
		byID[int(id)] = a
	}
	return byID
}

// TestMCPBatchCountsEveryCall: a JSON-RPC batch costs what its calls one by one cost. Each call
// takes its own token of the key's rate limit (the ones over it are JSON-RPC errors that say so
// and do not run), each tool call its own place among the tenant's waiting calls, and a batch
// longer than the documented maximum is refused whole, before anything runs.
func TestMCPBatchCountsEveryCall(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Config{Ingress: ingress.Config{TenantRateLimits: map[string]ingress.Rate{"slow": {PerSecond: 2, Burst: 5}}}}, "slow", "any")
	count := func(int) string { return `{"workflow":"slow:Echo:Supervisor Workflow:batch"}` }

	t.Run("the rate limit", func(t *testing.T) { batchRateLimit(t, s, count) })
	t.Run("longer than the maximum", func(t *testing.T) { batchTooLong(t, s, count) })
	t.Run("the waiting cap", func(t *testing.T) { batchWaitingCap(t) })
}

// batchRateLimit: each call of a batch takes its own token of the key's rate limit; the ones
// over it are JSON-RPC errors that say so and do not run.
func batchRateLimit(t *testing.T, s *customStack, count func(int) string) {
	status, b := mcpBatch(t, s.URL, s.keys["slow"], toolCalls(ingress.MaxMCPBatch, "Echo.count", count))
	require.Equal(t, http.StatusOK, status, "%s", b)
	answers := rpcAnswers(t, b)
	require.Len(t, answers, ingress.MaxMCPBatch)
	ran, limited := 0, 0
	for id, a := range answers {
		if e, isErr := a["error"].(map[string]any); isErr {
			assert.EqualValues(t, -32005, e["code"], "call %d: %v", id, e)
			assert.Contains(t, e["message"], "rate limited", "call %d", id)
			assert.EqualValues(t, map[string]any{"retryAfter": 1.0}, e["data"], "call %d", id)
			limited++
			continue
		}
		res, _ := a["result"].(map[string]any)
		require.NotNil(t, res, "call %d: %v", id, a)
		require.NotEqual(t, true, res["isError"], "call %d: %v", id, res)
		ran++
	}
	assert.Equal(t, 5, ran, "the burst runs")
	assert.Equal(t, ingress.MaxMCPBatch-5, limited)
	// The instance counted exactly the calls that ran: the next count is the sixth.
	require.Eventually(t, func() bool {
		status, b := mcpBatch(t, s.URL, s.keys["slow"], toolCalls(1, "Echo.count", count))
		if status != http.StatusOK {
			return false
		}
		res, _ := rpcAnswers(t, b)[1]["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		require.NotNil(t, sc, "%s", b)
		assert.EqualValues(t, 6, sc["count"])
		return true
	}, 5*time.Second, 100*time.Millisecond)
}

// batchTooLong: a batch longer than the documented maximum is refused whole, as one request:
// not even the first call runs.
func batchTooLong(t *testing.T, s *customStack, count func(int) string) {
	status, b := mcpBatch(t, s.URL, s.keys["any"], toolCalls(2000, "Echo.count", count))
	require.Equal(t, http.StatusBadRequest, status, "%s", b)
	var e map[string]any
	require.NoError(t, json.Unmarshal(b, &e), "%s", b)
	require.Nil(t, e["id"])
	rpcErr, _ := e["error"].(map[string]any)
	require.NotNil(t, rpcErr, "%s", b)
	assert.EqualValues(t, -32600, rpcErr["code"])
	assert.Contains(t, rpcErr["message"], fmt.Sprintf("at most %d messages", ingress.MaxMCPBatch))
}

// batchWaitingCap: each tool call of a batch takes its own place among the tenant's waiting
// calls.
func batchWaitingCap(t *testing.T) {
	// Five sleeps in five conversations wait at once; the tenant may have three waiting.
	s := startStack(t, stack.Config{Ingress: ingress.Config{MaxWaitingPerTenant: 3}}, "few")
	sleep := func(i int) string { return fmt.Sprintf(`{"ms":400,"participantId":"p%d"}`, i) }
	status, b := mcpBatch(t, s.URL, s.keys["few"], toolCalls(5, "Echo.sleep", sleep))
	require.Equal(t, http.StatusOK, status, "%s", b)
	ran, refused := 0, 0
	for id, a := range rpcAnswers(t, b) {
		if e, isErr := a["error"].(map[string]any); isErr {
			assert.EqualValues(t, -32003, e["code"], "call %d: %v", id, e)
			assert.Contains(t, e["message"], "waiting", "call %d", id)
			refused++
			continue
		}
		ran++
	}
	assert.Equal(t, 3, ran)
	assert.Equal(t, 2, refused)
}
