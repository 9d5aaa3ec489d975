package pages_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

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
