// Package problem writes RFC 9457 problem details (application/problem+json), the one error
// shape of every agentbus HTTP endpoint.
//
// What the client sees (status, type, title, a safe detail) is chosen by the caller and kept
// apart from the internal cause, which the caller logs and never passes here.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of problem details.
const ContentType = "application/problem+json"

// TypePrefix starts every problem type URI; the slug after it names the problem. The URN form
// needs no resolvable documentation host; docs/errors.md lists the slugs.
const TypePrefix = "urn:agentbus:problem:"

// Problem is one problem detail.
type Problem struct {
	Status int
	// Slug names the problem type, for example "unauthorized".
	Slug  string
	Title string
	// Detail is a human-readable explanation safe to show the client.
	Detail    string
	RequestID string
	// RetryAfter, when positive, is sent as the Retry-After header in seconds.
	RetryAfter int
}

// Body is a problem as its JSON shows it: what Write sends, and what a client decodes an error
// answer (or a stream's error event) into.
type Body struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	RequestID string `json:"requestId,omitempty"`
}

// Write sends p.
func Write(w http.ResponseWriter, p Problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="agentbus"`)
	}
	b, _ := json.Marshal(Body{Type: TypePrefix + p.Slug, Title: p.Title, Status: p.Status, Detail: p.Detail, RequestID: p.RequestID})
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}
