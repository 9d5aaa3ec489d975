package pages_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/pages"
)

// serve answers a GET of a page's file name through its Serve.
func serve(t *testing.T, page *pages.Files, name string, hdr ...string) (*httptest.ResponseRecorder, bool) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/page/"+name, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	return w, page.Serve(w, r, name)
}

// A page serves its own files by their names, and nothing else: not index.html (the page has
// one address), not the source, not the other page's files nor the directories they are in.
func TestServeRefusesOtherNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		page *pages.Files
	}{
		{name: "playground", page: pages.Playground},
		{name: "console", page: pages.Console},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range []string{"index.html", "nope.js", "pages.go", "../pages.go", "playground", "playground/app.js",
				"console", "console/app.js", "../console/app.js", "../playground/app.js"} {
				w, ok := serve(t, tc.page, name)
				assert.False(t, ok, name)
				assert.Empty(t, w.Header(), "%s: nothing written", name)
			}
		})
	}
}

// Every file of both pages goes out with the same security headers and its content type, and a
// browser that has it revalidates it with its ETag and gets 304 without a body.
func TestServeSendsSecurityHeaders(t *testing.T) {
	for _, page := range []struct {
		name  string
		files *pages.Files
	}{
		{name: "playground", files: pages.Playground},
		{name: "console", files: pages.Console},
	} {
		for _, tc := range []struct {
			name, file, contentType string
		}{
			{name: "page", file: "", contentType: "text/html; charset=utf-8"},
			{name: "script", file: "app.js", contentType: "text/javascript; charset=utf-8"},
			{name: "style sheet", file: "style.css", contentType: "text/css; charset=utf-8"},
			{name: "icon", file: "favicon.svg", contentType: "image/svg+xml"},
		} {
			t.Run(page.name+" "+tc.name, func(t *testing.T) {
				w, ok := serve(t, page.files, tc.file)
				require.True(t, ok)
				assert.Equal(t, http.StatusOK, w.Code)
				h := w.Header()
				for name, want := range map[string]string{
					"Content-Type":               tc.contentType,
					"Content-Security-Policy":    pages.ContentSecurityPolicy,
					"X-Content-Type-Options":     "nosniff",
					"X-Frame-Options":            "DENY",
					"Referrer-Policy":            "no-referrer",
					"Cross-Origin-Opener-Policy": "same-origin",
					"Cache-Control":              "no-cache",
				} {
					assert.Equal(t, want, h.Get(name), name)
				}
				assert.NotEmpty(t, w.Body.Bytes())

				etag := h.Get("ETag")
				require.NotEmpty(t, etag)
				w, ok = serve(t, page.files, tc.file, "If-None-Match", etag)
				require.True(t, ok)
				assert.Equal(t, http.StatusNotModified, w.Code)
				assert.Empty(t, w.Body.Bytes())
			})
		}
	}
}

// servedPage serves the page of files, whose files are under prefix ("/ui"), checks that the
// policy allows nothing unsafe and that the page works under it (no inline script, style or
// event handler, no javascript: address)
// and that every file it refers to is served, and returns the page and those files' names.
func servedPage(t *testing.T, files *pages.Files, prefix string) (page string, refs []string) {
	t.Helper()
	for _, unsafe := range []string{"unsafe-inline", "unsafe-eval", "*", "data:", "http:"} {
		assert.NotContains(t, pages.ContentSecurityPolicy, unsafe)
	}
	w, ok := serve(t, files, "")
	require.True(t, ok)
	page = w.Body.String()
	for _, tag := range regexp.MustCompile(`(?i)<script\b[^>]*>`).FindAllString(page, -1) {
		assert.Regexp(t, `\ssrc="`+regexp.QuoteMeta(prefix)+`/[a-z]+\.js"`, tag, "a script without src is inline")
	}
	assert.NotRegexp(t, `(?i)<style\b`, page)
	assert.NotRegexp(t, `(?i)\sstyle\s*=`, page)
	assert.NotRegexp(t, `(?i)\son[a-z]+\s*=`, page, "inline event handler")
	assert.NotRegexp(t, `(?i)javascript:`, page)

	// Every file the page refers to is served.
	for _, m := range regexp.MustCompile(`(?:src|href)="`+regexp.QuoteMeta(prefix)+`/([^"]+)"`).FindAllStringSubmatch(page, -1) {
		_, ok := serve(t, files, m[1])
		assert.True(t, ok, "the page refers to %s/%s", prefix, m[1])
		refs = append(refs, m[1])
	}
	return page, refs
}
