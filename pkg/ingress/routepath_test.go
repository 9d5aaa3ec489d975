package ingress

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/mux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPathTemplateMatchesAsMuxDoes checks pathTemplate against gorilla/mux's own path matching
// of the same templates: for every template and path, both match or neither, with the same
// variables.
func TestPathTemplateMatchesAsMuxDoes(t *testing.T) {
	t.Parallel()
	templates := []string{
		"/",
		"/ui/",
		"/ui/{file}",
		"/healthz",
		"/api/user/webhooks/{workflow}/{method}",
		"/api/v1/admin/tenants/{tenantId}/keys/{keyId}/rotate",
		"/api/v1/admin/tenants/{tenantId}",
	}
	paths := []string{
		"/", "", "//", "/ui", "/ui/", "/ui//", "/ui/app.js", "/ui/app.js/", "/ui/a%2Fb",
		"/healthz", "/healthz/", "/healthzz", "/Healthz",
		"/api/user/webhooks/wf/echo", "/api/user/webhooks/wf/echo/", "/api/user/webhooks/wf",
		"/api/user/webhooks//echo", "/api/user/webhooks/wf/", "/api/user/webhooks/a%2Fb/echo",
		"/api/user/webhooks/default:Echo:Supervisor%20Workflow:bench-1/echo",
		"/api/user/webhooks/wf/echo/x", "/api/user/webhooks/%E2%9C%93/m%25",
		"/api/v1/admin/tenants/acme/keys/k1/rotate", "/api/v1/admin/tenants/acme/keys//rotate",
		"/api/v1/admin/tenants/acme", "/api/v1/admin/tenants/", "/api/v1/admin/tenants",
		"/api/v1/admin/tenants/acme/keys",
	}
	for _, tpl := range templates {
		router := mux.NewRouter()
		router.UseEncodedPath()
		router.SkipClean(true)
		ours := compileTemplate(tpl)
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			theirs := router.Path(tpl).Methods(http.MethodPost)
			for _, p := range paths {
				r := httptest.NewRequest(method, "http://x"+p, nil)
				if p == "" {
					r.URL.Path, r.URL.RawPath = "", ""
				}
				var want, got mux.RouteMatch
				wantOK := theirs.Match(r, &want)
				gotOK := ours.matcher(http.MethodPost)(r, &got)
				if method != http.MethodPost {
					// mux reports the path's match through ErrMethodMismatch.
					assert.Equal(t, want.MatchErr == mux.ErrMethodMismatch, gotOK, "%s %q against %q", method, p, tpl)
					assert.Empty(t, got.Vars, "a route of another method sets no variables")
					continue
				}
				require.Equal(t, wantOK, gotOK, "%s %q against %q", method, p, tpl)
				if wantOK && len(want.Vars) > 0 {
					assert.Equal(t, want.Vars, got.Vars, "%q against %q", p, tpl)
				}
			}
		}
	}
}

func TestCompileTemplateRefusesWhatItCannotMatch(t *testing.T) {
	t.Parallel()
	for _, tpl := range []string{"api", "/a/{id:[0-9]+}", "/a/{}", "/a/{id", "/a/x{id}", "/{a}/{b}/{c}/{d}/{e}"} {
		assert.Panics(t, func() { compileTemplate(tpl) }, tpl)
	}
}
