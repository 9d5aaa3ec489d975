// Package staticpage serves the ingress's browser pages (the playground at /ui and the operator
// console at /console): a few embedded files, each with the same strict security headers and an
// ETag. A page holds no secret and takes no key; it asks its user for one and calls the API like
// any client.
package staticpage

import (
	"bytes"
	"crypto/sha256"
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

// Load reads the files of dir in fsys (not its subdirectories, nor files of other types than
// HTML, JavaScript, CSS and SVG). dir must hold index.html. It panics on an error: the files are
// embedded, so an error is a build mistake.
func Load(fsys fs.FS, dir string) *Files {
	out := map[string]file{}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic("staticpage: reading the embedded files: " + err.Error())
	}
	for _, e := range entries {
		ct, ok := contentTypes[path.Ext(e.Name())]
		if e.IsDir() || !ok {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			panic("staticpage: reading the embedded files: " + err.Error())
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = file{content: b, contentType: ct, etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`}
	}
	page, ok := out["index.html"]
	if !ok {
		panic("staticpage: " + dir + " has no index.html")
	}
	out[""] = page
	delete(out, "index.html") // the page has one address
	return &Files{files: out}
}

// SetSecurityHeaders sets the headers every file of a page is served with.
func SetSecurityHeaders(h http.Header) {
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
	SetSecurityHeaders(h)
	h.Set("ETag", file.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(file.content))
	return true
}
