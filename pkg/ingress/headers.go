package ingress

import (
	"net/http"

	"github.com/agentbus/agentbus/pkg/problem"
)

// Header limits. Go's HTTP server refuses a request line and headers over its MaxHeaderBytes
// with a plain-text 431 before any handler runs, so the server reads up to hardHeaderBytes and
// limitHeaders refuses anything over maxHeaderBytes with a problem document: only a request
// over the hard limit still gets Go's plain text (docs/errors.md).
const (
	maxHeaderBytes  = 64 << 10
	hardHeaderBytes = 256 << 10
)

// limitHeaders answers 431 headers-too-large, closing the connection, to a request whose
// request line and headers are larger than maxHeaderBytes together.
func limitHeaders(tooLarge, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerBytes(r) > maxHeaderBytes {
			tooLarge.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// headerBytes is about what the request line and headers took on the wire: each header line as
// "Name: value\r\n", and the Host header, which net/http takes out of Header.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	if r.Host != "" {
		n += len("Host: \r\n") + len(r.Host)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// headersTooLarge is the answer of limitHeaders.
func headersTooLarge(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Connection", "close")
	problem.HeadersTooLarge.Write(w, "the request line and headers are larger than 64 KiB together")
}
