package remote_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/remote/remotetest"
)

// cases runs Check and returns its results by case, checking that no case is reported twice.
func cases(t *testing.T, reg remote.Registration) map[string]remote.CheckResult {
	t.Helper()
	out := map[string]remote.CheckResult{}
	for _, r := range remote.Check(t.Context(), reg) {
		require.NotContains(t, out, r.Case, "case %q reported twice", r.Case)
		out[r.Case] = r
	}
	return out
}

// failed is the cases that failed, with their details.
func failed(results map[string]remote.CheckResult) map[string]string {
	out := map[string]string{}
	for name, r := range results {
		if !r.OK {
			out[name] = r.Detail
		}
	}
	return out
}

// TestCheckConformingEndpoint: an endpoint that keeps every rule passes every case, none
// skipped, in the order Check documents.
func TestCheckConformingEndpoint(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	results := remote.Check(t.Context(), ep.Registration("Conformer"))
	var names []string
	for _, r := range results {
		names = append(names, r.Case)
		assert.True(t, r.OK, "%s: %s", r.Case, r.Detail)
		assert.False(t, r.Skipped, "%s: %s", r.Case, r.Detail)
	}
	assert.Equal(t, []string{
		remote.CaseUnsigned, remote.CaseWronglySigned, remote.CaseProtocol, remote.CaseChat, remote.CaseChatStreamed, remote.CaseFile,
		"Data count answered", "Data sum answered", "webhook echo answered", remote.CaseWebhookAnswers,
		remote.CaseState, remote.CaseOrder, remote.CaseStateConflict, remote.CaseRetry, remote.CaseKeepAlive,
	}, names)
	byCase := map[string]string{}
	for _, r := range results {
		byCase[r.Case] = r.Detail
	}
	assert.Equal(t, "3 requests answered; the state changed 3 times", byCase[remote.CaseOrder])
	assert.Equal(t, "answered from the fresher state", byCase[remote.CaseStateConflict])
	assert.Equal(t, "1 responses", byCase[remote.CaseWebhookAnswers])
}

// TestCheckReportsFaults: an endpoint that breaks one rule fails that rule's case, and only it.
func TestCheckReportsFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults remotetest.Faults
		want   map[string]string // failed case: a part of its detail
	}{
		{"answers a requestId from a cache", remotetest.Faults{CacheByRequestID: true},
			map[string]string{remote.CaseStateConflict: "got the state answered to the stale one"}},
		{"refuses retries", remotetest.Faults{RefuseRetries: true},
			map[string]string{remote.CaseRetry: "attempt 2 was refused: 409 this request was answered already"}},
		{"webhook without a content type", remotetest.Faults{WebhookWithoutContentType: true},
			map[string]string{remote.CaseWebhookAnswers: "webhook echo: the response has a body but no contentType"}},
		{"webhook status 101", remotetest.Faults{WebhookStatus: http.StatusSwitchingProtocols},
			map[string]string{remote.CaseWebhookAnswers: "webhook echo: response.status 101 is not from 200 to 599"}},
		{"no signature check", remotetest.Faults{NoSignatureCheck: true},
			map[string]string{remote.CaseUnsigned: "answered 200, want 401", remote.CaseWronglySigned: "answered 200, want 401"}},
		{"any protocol", remotetest.Faults{AnyProtocol: true},
			map[string]string{remote.CaseProtocol: "answered 200, want 400"}},
		{"closes connections", remotetest.Faults{CloseConnections: true},
			map[string]string{remote.CaseKeepAlive: "opened a new connection"}},
		{"complete that is not a boolean", remotetest.Faults{CompleteNotBoolean: true},
			map[string]string{"webhook echo answered": "not a protocol answer: json: cannot unmarshal string into Go struct field Answer.complete of type bool",
				remote.CaseWebhookAnswers: "webhook echo: no protocol answer to check"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := remotetest.New(t, tc.faults)
			got := failed(cases(t, ep.Registration("Faulty")))
			require.Len(t, got, len(tc.want), "failed cases: %v", got)
			for name, detail := range tc.want {
				assert.Contains(t, got[name], detail, "case %q", name)
			}
		})
	}
}

// TestCheckSkipsWhatDoesNotApply: a registration of Data methods only skips the Chat, File and
// webhook cases, with OK true; the state cases use its counter.
func TestCheckSkipsWhatDoesNotApply(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	reg := ep.Registration("DataOnly")
	reg.Chat, reg.File, reg.Webhooks = false, false, nil
	results := cases(t, reg)
	for _, name := range []string{remote.CaseChat, remote.CaseChatStreamed, remote.CaseFile, remote.CaseWebhookAnswers} {
		r, ok := results[name]
		if assert.True(t, ok, "case %q is reported", name) {
			assert.True(t, r.OK && r.Skipped, "case %q: %+v", name, r)
			assert.True(t, strings.HasPrefix(r.Detail, "skipped: "), "case %q: %+v", name, r)
		}
	}
	assert.NotContains(t, results, "webhook echo answered")
	assert.Empty(t, failed(results))
	assert.Equal(t, "3 requests answered; the state changed 3 times", results[remote.CaseOrder].Detail)
}

// TestCheckStatelessAgent: an agent whose answers carry no state passes the state cases, which
// say so.
func TestCheckStatelessAgent(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{CacheByRequestID: true})
	reg := ep.Registration("Stateless")
	reg.Methods = reg.Methods[1:] // sum only: no answer carries a state
	results := cases(t, reg)
	assert.Empty(t, failed(results))
	assert.Equal(t, "3 requests answered; the answers carry no state", results[remote.CaseOrder].Detail)
	assert.Equal(t, "answered; the agent's state does not visibly depend on the state sent", results[remote.CaseStateConflict].Detail)
}
