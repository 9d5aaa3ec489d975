package ingress

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/subject"
)

// TestEveryParameterHasARule: every path, query and header parameter of every route of the
// OpenAPI document is bounded at the edge, and every rule is of a parameter the document names
// (a rule without one would be dead). The credentials (apikey, Authorization) are checked by
// authentication instead.
func TestEveryParameterHasARule(t *testing.T) {
	used := map[paramKey]bool{}
	n := 0
	for _, rt := range (&Server{}).api() {
		ps := paramsOf(rt.method, rt.path)
		for in, names := range map[string][]string{"path": ps.path, "query": ps.query, "header": ps.header} {
			for _, name := range names {
				if name == "apikey" || name == "Authorization" {
					continue
				}
				n++
				key := paramKey{in, name}
				used[key] = true
				assert.Contains(t, paramRules, key, "%s %s: the %s parameter %q has no rule in params.go", rt.method, rt.path, in, name)
			}
		}
		tokens := strings.Count(rt.path, "{")
		assert.Len(t, ps.path, tokens, "%s %s: the document's path parameters", rt.method, rt.path)
	}
	for key := range paramRules {
		assert.True(t, used[key], "the rule of the %s parameter %q is of no route's parameter", key.in, key.name)
	}
	require.Greater(t, n, 150, "the routes' parameters were read")
}

// TestParamRulesBoundEveryValue: whatever a rule passes is at most subject.MaxParamBytes of text
// without control characters, so that the subjects built from it stay within
// subject.MaxSubjectBytes. A message's text and hint travel only in its body: they may be longer
// and hold newlines, but must be UTF-8.
func TestParamRulesBoundEveryValue(t *testing.T) {
	long := strings.Repeat("a", subject.MaxParamBytes+1)
	for key, rule := range paramRules {
		if key.name == "text" || key.name == "hint" {
			assert.Error(t, rule.check(key.name, "a\xffb"), "%v passes invalid UTF-8", key)
			assert.Error(t, rule.check(key.name, strings.Repeat("a", maxTextLen+1)), "%v passes %d bytes", key, maxTextLen+1)
			continue
		}
		assert.Error(t, rule.check("x", long), "%v passes %d bytes", key, len(long))
		for _, bad := range []string{"a\x00b", "a\xffb", "a\x1bb", "a\u0085b"} {
			assert.Error(t, rule.check("x", bad), "%v passes %q", key, bad)
		}
	}
}

// TestRefusalsNameTheParameter: a refused parameter is answered with the rule's problem, naming
// the parameter and never repeating its value.
func TestRefusalsNameTheParameter(t *testing.T) {
	long := strings.Repeat("z", 5000)
	p := checkParam("path", "name", "/x/{name}", long)
	require.NotNil(t, p)
	assert.Equal(t, http.StatusBadRequest, p.Status)
	assert.Equal(t, `the path parameter "name" is longer than 256 bytes`, p.Detail)
	p = checkParam("path", "id", "/api/v1/admin/tenants/{tenantId}/deadletters/{id}", "x")
	require.NotNil(t, p)
	assert.Equal(t, "invalid-dead-letter-id", p.Slug)
	p = checkParam("path", "id", subscriptionsPath+"/{subscriptionId}/undelivered/{id}", "x")
	require.NotNil(t, p)
	assert.Equal(t, "invalid-event-id", p.Slug)
	p = checkParam("header", "X-Tenant-Id", "/x", "a.b")
	require.NotNil(t, p)
	assert.Equal(t, "invalid-tenant", p.Slug)
	assert.Contains(t, p.Detail, "the header X-Tenant-Id")
	assert.Nil(t, checkParam("query", "someWebhookParam", "/x", long), "a parameter the route does not take is the handler's")
}
