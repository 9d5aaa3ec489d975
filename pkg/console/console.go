// Package console is the operator console the ingress serves at /console: the live hosts and
// partitions, each agent's request rate, errors and latency over the last 15 minutes, an agent's
// instances and one instance's state and queue, and the tenant's dead letters. It is plain HTML,
// CSS and one script, embedded in the binary like the playground (package playground); there is
// no build step and nothing is loaded from elsewhere.
//
// The page asks for an admin key (tenant-admin or system-admin) and calls the admin API with it
// in the Authorization header, like any client: it holds no privilege of its own, and shows a
// tenant admin only what the API shows that key.
package console

import (
	"embed"
	"net/http"

	"github.com/agentbus/agentbus/pkg/staticpage"
)

// ContentSecurityPolicy is sent with every file of the console; it is the playground's.
const ContentSecurityPolicy = staticpage.ContentSecurityPolicy

//go:embed static
var static embed.FS

// files are the embedded files by name; "" is the page.
var files = staticpage.Load(static, "static")

// Serve answers a GET or HEAD of the console's file name ("" for the page) with the security
// headers and an ETag. It reports false, having written nothing, when there is no such file.
func Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	return files.Serve(w, r, name)
}
