package pages_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/pages"
)

// The policy allows scripts and styles only from the ingress's origin: nothing inline, no eval,
// no framing. The page must work under it, so it may hold no inline script, style or handler.
func TestPolicyIsStrictAndPageNeedsNoInlineCode(t *testing.T) {
	csp := pages.ContentSecurityPolicy
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
		assert.Contains(t, csp, want)
	}

	servedPage(t, pages.Playground, "/ui")

	// The script never renders received text as HTML, and never puts the key in a URL but the
	// webhook's (where the webhook contract wants it).
	w, ok := serve(t, pages.Playground, "app.js")
	require.True(t, ok)
	script := w.Body.String()
	assert.NotContains(t, script, "innerHTML")
	assert.NotContains(t, script, "insertAdjacentHTML")
	assert.NotContains(t, script, "eval(")
	start := strings.Index(script, "async function sendWebhook(")
	require.GreaterOrEqual(t, start, 0)
	end := start + strings.Index(script[start:], "\n  }\n")
	require.Greater(t, end, start)
	for _, i := range regexp.MustCompile(`apikey`).FindAllStringIndex(script, -1) {
		assert.True(t, i[0] > start && i[0] < end, "apikey outside sendWebhook at byte %d", i[0])
	}
}
