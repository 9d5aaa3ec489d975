package ingress_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// rawExchange writes req as is on a new TCP connection to the stack's ingress and reads one
// answer.
func rawExchange(t *testing.T, s *stacktest.Stack, req string) (*http.Response, []byte) {
	t.Helper()
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "reading the answer to %.60q", req)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// Malformed requests sent over a raw connection: what a handler can see is answered with a
// problem document; what Go's HTTP server refuses before any handler runs gets its plain-text
// answer, exactly as docs/errors.md lists it.
func TestRawMalformedRequests(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	webhook := "/api/user/webhooks/Echo/echo"
	bigHeader := "X-Big: " + strings.Repeat("a", 70<<10) + "\r\n"
	hugeHeader := "X-Big: " + strings.Repeat("a", 300<<10) + "\r\n"
	tooLargeKey := `{"name":"` + strings.Repeat("a", 70<<10) + `","role":"user"}`
	tests := []struct {
		name string
		req  string
		want int
		// slug is the problem type expected; empty means net/http's plain-text answer, whose
		// body starts with plain.
		slug, plain string
	}{
		{name: "malformed request line", req: "GARBAGE\r\n\r\n", want: 400, plain: "400 Bad Request"},
		{name: "request line without version", req: "GET /healthz\r\nHost: a\r\n\r\n", want: 400, plain: "400 Bad Request"},
		{name: "headers over the hard limit", req: "GET /healthz HTTP/1.1\r\nHost: a\r\n" + hugeHeader + "\r\n", want: 431, plain: "431 Request Header Fields Too Large"},
		{name: "invalid escape in the path", req: "POST /api/user/webhooks/Echo%zz/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", want: 400, plain: "400 Bad Request"},
		{name: "no Host header", req: "GET /healthz HTTP/1.1\r\n\r\n", want: 400, plain: "400 Bad Request: missing required Host header"},
		{name: "invalid header name", req: "GET /healthz HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", want: 400, plain: "400 Bad Request"},
		{name: "unknown transfer encoding", req: "POST " + webhook + " HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", want: 501, plain: "Unsupported transfer encoding"},
		{name: "HTTP/2 without upgrade", req: "GET /healthz HTTP/2.0\r\nHost: a\r\n\r\n", want: 505, plain: "505 HTTP Version Not Supported"},

		{name: "headers too large", req: "GET /healthz HTTP/1.1\r\nHost: a\r\n" + bigHeader + "\r\n", want: 431, slug: "headers-too-large"},
		{name: "query too large", req: "POST " + webhook + "?x=" + strings.Repeat("a", 70<<10) + " HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", want: 431, slug: "headers-too-large"},
		{name: "headers just under the limit", req: "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("a", 60<<10) + "\r\n\r\n", want: 200},
		{name: "unknown method", req: "BREW /healthz HTTP/1.1\r\nHost: a\r\n\r\n", want: 405, slug: "method-not-allowed"},
		{name: "trailing slash", req: "GET /healthz/ HTTP/1.1\r\nHost: a\r\n\r\n", want: 404, slug: "not-found"},
		{name: "unknown path", req: "GET /nope HTTP/1.1\r\nHost: a\r\n\r\n", want: 404, slug: "not-found"},
		{name: "invalid escape in the query", req: "POST " + webhook + "?apikey=%zz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", want: 400, slug: "invalid-query"},
		{name: "no key", req: "POST " + webhook + " HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", want: 401, slug: "unauthorized"},
		{name: "text body with a text content type", req: "POST /api/v1/admin/tenants/default/messaging/send HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + s.Key +
			"\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", want: 400, slug: "invalid-json"},
		{name: "body too large", req: "POST /api/v1/admin/tenants/default/keys HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + s.Key +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(tooLargeKey)) + "\r\n\r\n" + tooLargeKey, want: 413, slug: "body-too-large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := rawExchange(t, s, tt.req)
			assert.Equal(t, tt.want, resp.StatusCode, "body %.200s", b)
			if tt.slug == "" && tt.plain == "" { // accepted
				return
			}
			if tt.slug != "" {
				problemOf(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, tt.want)
				assert.Equal(t, "urn:agentbus:problem:"+tt.slug, decode(t, b)["type"])
				return
			}
			assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
			assert.True(t, strings.HasPrefix(string(b), tt.plain), "body %q, want it to start with %q", b, tt.plain)
		})
	}
}
