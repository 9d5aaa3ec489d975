// Package pages holds the browser pages the ingress serves, and serves their files:
//
//   - The playground, at /ui: paste an API key, pick a registered agent, send it Chat, Data and
//     Webhook messages, and watch the thread live. It talks only to the public HTTP API of the
//     ingress that serves it (GET /api/user/agents, converse, webhooks, history and listen), with
//     the key in the Authorization header wherever the endpoint takes it there. It is a tool for
//     trying agents out, not an end-user chat client.
//   - The operator console, at /console: the live hosts and partitions, each agent's request
//     rate, errors and latency over the last 15 minutes, an agent's instances and one instance's
//     state and queue, the tenant's dead letters with their actions (retry, complete, replay,
//     discard), and its limits, usage and queues, with the form that sets the limits. It asks
//     for an admin key (tenant-admin or system-admin) and calls the admin API with it in the
//     Authorization header, and shows a tenant admin only what the API shows that key.
//
// Each page is plain HTML, CSS and one script in its own directory, embedded in the binary with
// go:embed; there is no build step and nothing is loaded from elsewhere. A page holds no secret,
// no privilege of its own and takes no key: it asks its user for one and calls the API like any
// client. Every file of a page is served with the same strict security headers and an ETag.
package pages

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"time"
)

// ContentSecurityPolicy is sent with every file of a page: everything from the ingress's own
// origin only, no inline script or style, and no framing (against clickjacking a page that holds
// a key).
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes are the types of the files a page is made of; a file of another kind is not
// served, so a file added by mistake cannot go out sniffed.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// file is one embedded file, ready to serve.
type file struct {
	content     []byte
	contentType string
	etag        string
}

// Files are a page's files by name; "" is the page itself (index.html, which has no other name).
type Files struct {
	files map[string]file
}

//go:embed playground console
var static embed.FS

// Playground is the playground's files, served at /ui.
var Playground = load(static, "playground")

// Console is the operator console's files, served at /console.
var Console = load(static, "console")

// load reads the files of dir in fsys (not its subdirectories, nor files of other types than
// HTML, JavaScript, CSS and SVG). dir must hold index.html. It panics on an error: the files are
// embedded, so an error is a build mistake.
func load(fsys fs.FS, dir string) *Files {
	out := map[string]file{}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic("pages: reading the embedded files: " + err.Error())
	}
	for _, e := range entries {
		ct, ok := contentTypes[path.Ext(e.Name())]
		if e.IsDir() || !ok {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			panic("pages: reading the embedded files: " + err.Error())
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = file{content: b, contentType: ct, etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`}
	}
	page, ok := out["index.html"]
	if !ok {
		panic("pages: " + dir + " has no index.html")
	}
	out[""] = page
	delete(out, "index.html") // the page has one address
	return &Files{files: out}
}

// setSecurityHeaders sets the headers every file of a page is served with.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
}

// Serve answers a GET or HEAD of the file name ("" for the page) with the security headers and
// an ETag, so that a browser revalidates instead of downloading again. It reports false, having
// written nothing, when there is no such file.
func (f *Files) Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	file, ok := f.files[name]
	if !ok {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", file.contentType)
	setSecurityHeaders(h)
	h.Set("ETag", file.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(file.content))
	return true
}
