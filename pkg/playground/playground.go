// Package playground is the browser page the ingress serves at /ui: paste an API key, pick a
// registered agent, send it Chat, Data and Webhook messages, and watch the thread live. It is
// plain HTML, CSS and one script, embedded in the binary; there is no build step.
//
// The page talks only to the public HTTP API of the ingress that serves it (GET /api/user/agents,
// converse, webhooks, history and listen), with the key in the Authorization header wherever the
// endpoint takes it there, so it holds no privilege of its own. It is a tool for trying agents
// out, not an end-user chat client.
package playground

import (
	"embed"
	"net/http"

	"github.com/agentbus/agentbus/pkg/staticpage"
)

// ContentSecurityPolicy is sent with every file of the playground: everything from the ingress's
// own origin only, no inline script or style, and no framing (against clickjacking a page that
// holds a key). The operator console (package console) is served with the same.
const ContentSecurityPolicy = staticpage.ContentSecurityPolicy

//go:embed static
var static embed.FS

// files are the embedded files by name; "" is the page.
var files = staticpage.Load(static, "static")

// Serve answers a GET or HEAD of the playground's file name ("" for the page) with the security
// headers and an ETag, so that a browser revalidates instead of downloading again. It reports
// false, having written nothing, when there is no such file.
func Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	return files.Serve(w, r, name)
}
