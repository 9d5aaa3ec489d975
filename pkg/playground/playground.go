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
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"time"
)

// ContentSecurityPolicy is sent with every file of the playground: everything from the ingress's
// own origin only, no inline script or style, and no framing (against clickjacking a page that
// holds a key).
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// file is one embedded file, ready to serve.
type file struct {
	content     []byte
	contentType string
	etag        string
}

// contentTypes are the types of the files the page is made of; a file of another kind is not
// served, so a file added by mistake cannot go out sniffed.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// files are the embedded files by name; "" is the page.
var files = load()

func load() map[string]file {
	out := map[string]file{}
	entries, err := fs.ReadDir(static, "static")
	if err != nil {
		panic("playground: reading the embedded files: " + err.Error())
	}
	for _, e := range entries {
		ct, ok := contentTypes[path.Ext(e.Name())]
		if e.IsDir() || !ok {
			continue
		}
		b, err := fs.ReadFile(static, "static/"+e.Name())
		if err != nil {
			panic("playground: reading the embedded files: " + err.Error())
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = file{content: b, contentType: ct, etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`}
	}
	out[""] = out["index.html"]
	delete(out, "index.html") // the page has one address, /ui
	return out
}

// Serve answers a GET or HEAD of the playground's file name ("" for the page) with the security
// headers and an ETag, so that a browser revalidates instead of downloading again. It reports
// false, having written nothing, when there is no such file.
func Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	f, ok := files[name]
	if !ok {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.content))
	return true
}
