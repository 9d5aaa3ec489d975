package pages_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/pages"
)

// The page works under the strict policy: no inline script, style or handler, nothing from
// another origin; the script renders nothing as HTML and never puts a key in a URL.
func TestPageNeedsNoInlineCodeAndKeepsTheKeyOutOfURLs(t *testing.T) {
	page, refs := servedPage(t, pages.Console, "/console")
	assert.NotRegexp(t, `(?i)(src|href)="(https?:)?//`, page, "a file of another origin")
	assert.Contains(t, page, `href="/ui"`, "the console links to the playground")
	assert.Len(t, refs, 3)

	// Every input has a label.
	for _, m := range regexp.MustCompile(`<(?:input|select)\b[^>]*\sid="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		if regexp.MustCompile(`<label[^>]*>\s*<input[^>]*id="` + m[1] + `"`).MatchString(page) {
			continue // wrapped in its label
		}
		assert.Contains(t, page, `for="`+m[1]+`"`, "#%s has no label", m[1])
	}

	w, ok := serve(t, pages.Console, "app.js")
	require.True(t, ok)
	script := w.Body.String()
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
		"apikey", "localStorage", "https://"} {
		assert.NotContains(t, script, bad)
	}
	// The one http:// address in the script is the SVG namespace, a name that is never loaded.
	assert.Equal(t, []string{"http://www.w3.org/2000/svg"}, regexp.MustCompile(`http://[^'"]*`).FindAllString(script, -1))
	// The key goes into the Authorization header, and into no address.
	assert.Len(t, regexp.MustCompile(`'Bearer ' \+ state\.key`).FindAllString(script, -1), 1)
	for _, line := range strings.Split(script, "\n") {
		if strings.Contains(line, "state.key") {
			for _, url := range []string{"URLSearchParams", "location", "fetch(", "/api/", "?"} {
				assert.NotContains(t, line, url, "the key near an address: %s", strings.TrimSpace(line))
			}
		}
	}
}
