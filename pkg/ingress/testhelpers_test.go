package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The HTTP helpers of the package's tests: every test talks to a whole stack over HTTP.

// newRequest builds a request with hdr as header name/value pairs.
func newRequest(t *testing.T, ctx context.Context, method, u string, body io.Reader, hdr ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// doRequest sends a request and returns its status, headers and whole body.
func doRequest(t *testing.T, method, u string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(newRequest(t, context.Background(), method, u, body, hdr...))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// doCT is doRequest returning the content type instead of all headers.
func doCT(t *testing.T, method, u string, body io.Reader, hdr ...string) (int, string, []byte) {
	t.Helper()
	status, h, b := doRequest(t, method, u, body, hdr...)
	return status, h.Get("Content-Type"), b
}

// bearerHeader is the header pair that carries key, none when key is empty.
func bearerHeader(key string) []string {
	if key == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + key}
}

// jsonBody is a request body: nil is none, a string or []byte is sent as is, anything else as
// JSON.
func jsonBody(t *testing.T, body any) io.Reader {
	t.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return strings.NewReader(b)
	case []byte:
		return bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		return bytes.NewReader(raw)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// q builds a query of name/value pairs.
func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// decode decodes a JSON object.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "decoding %q", b)
	return m
}

// problemOf checks that an answer is problem+json with the status and returns its body.
func problemOf(t *testing.T, status int, ct string, b []byte, want int) map[string]any {
	t.Helper()
	require.Equal(t, want, status, "status; body %s", b)
	require.Equal(t, "application/problem+json", ct, "content type")
	p := decode(t, b)
	typ, _ := p["type"].(string)
	require.True(t, p["status"] == float64(want) && strings.HasPrefix(typ, "urn:agentbus:problem:") && p["title"] != "",
		"problem body %v", p)
	return p
}

// call POSTs body to a webhook and returns status, content type and body.
func call(t *testing.T, base, workflow, method string, query url.Values, body []byte, hdr ...string) (int, string, []byte) {
	t.Helper()
	u := base + "/api/user/webhooks/" + url.PathEscape(workflow) + "/" + url.PathEscape(method) + "?" + query.Encode()
	return doCT(t, http.MethodPost, u, bytes.NewReader(body), hdr...)
}

// converse POSTs body to the converse endpoint, as JSON when there is one.
func converse(t *testing.T, s *stacktest.Stack, query url.Values, body string, hdr ...string) (int, string, []byte) {
	t.Helper()
	if body != "" {
		hdr = append([]string{"Content-Type", "application/json"}, hdr...)
	}
	return doCT(t, http.MethodPost, s.URL+"/api/user/rest/converse?"+query.Encode(), strings.NewReader(body), hdr...)
}

// send POSTs a JSON body to the send endpoint of tenant (path; "" for the tenant-less one) and
// returns status, content type and body. query is appended as is ("wait=true").
func send(t *testing.T, s *stacktest.Stack, tenant, query string, body any, hdr ...string) (int, string, []byte) {
	t.Helper()
	u := s.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/send"
	if tenant == "" {
		u = s.URL + "/api/v1/admin/messaging/send"
	}
	if query != "" {
		u += "?" + query
	}
	hdr = append([]string{"Content-Type", "application/json"}, hdr...)
	return doCT(t, http.MethodPost, u, jsonBody(t, body), hdr...)
}

// get GETs path on the stack with the query and header pairs and returns status, content type
// and body.
func get(t *testing.T, base, path string, query url.Values, hdr ...string) (int, string, []byte) {
	t.Helper()
	return doCT(t, http.MethodGet, base+path+"?"+query.Encode(), nil, hdr...)
}

// adminReq sends an admin API request with key as a Bearer token (none when empty) and body as
// JSON (a string is sent as is; nil sends nothing). hdr are extra header name/value pairs.
func adminReq(t *testing.T, s *stacktest.Stack, method, path, key string, body any, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	return doRequest(t, method, s.URL+path, jsonBody(t, body), append(bearerHeader(key), hdr...)...)
}

// adminOK sends an admin request that must answer want with JSON, and decodes it into out
// (unless nil).
func adminOK(t *testing.T, s *stacktest.Stack, method, path, key string, body any, want int, out any) http.Header {
	t.Helper()
	status, h, b := adminReq(t, s, method, path, key, body)
	require.Equal(t, want, status, "%s %s: %s", method, path, b)
	if out != nil {
		require.Equal(t, "application/json", h.Get("Content-Type"), "%s %s", method, path)
		require.NoError(t, json.Unmarshal(b, out), "%s %s: decoding %s", method, path, b)
	}
	return h
}

// do sends a request with key as a Bearer token (none when empty) and returns its status,
// headers and body.
func do(t *testing.T, method, u, key string, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	return doRequest(t, method, u, body, bearerHeader(key)...)
}

// doPeek sends a request with body as is (none when empty) and returns status, content type and
// body. An event stream is read up to its first event or comment, then dropped, so that every
// route can be called the same way.
func doPeek(t *testing.T, base, method, path, body string, hdr ...string) (int, string, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	resp, err := http.DefaultClient.Do(newRequest(t, ctx, method, base+path, rd, hdr...))
	require.NoError(t, err)
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		var b bytes.Buffer
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "" && b.Len() > 0 {
				break
			}
			b.WriteString(sc.Text() + "\n")
		}
		return resp.StatusCode, ct, b.Bytes()
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, ct, b
}

// sseEvent is one event or comment of an event stream.
type sseEvent struct {
	ID, Event, Data string
	// Comment is the text of a comment line; such an event has no other field.
	Comment string
}

// scanEvents reads an event stream, handing each event or comment to emit until emit returns
// false or the stream ends.
func scanEvents(r io.Reader, emit func(sseEvent) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev != (sseEvent{}) && !emit(ev) {
				return
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"):
			ev.Comment = strings.TrimSpace(line[1:])
		default:
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "id":
				ev.ID = value
			case "event":
				ev.Event = value
			case "data":
				ev.Data += value
			}
		}
	}
}
