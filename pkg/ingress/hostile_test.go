package ingress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stack"
)

// Hostile values (docs/identifiers.md#limits): every value a caller gives in a path, query or
// header parameter is bounded at the edge, so that none reaches a NATS subject, key or header
// unchecked. A value that broke this would close the process's NATS connection, the bus of
// every tenant: the tests below check that the bus stays up for the other tenants.

// hostileValue is one value of a parameter that the edge must survive.
type hostileValue struct{ name, v string }

// hostileValues are the values every parameter is given.
var hostileValues = []hostileValue{
	{"10 KB", strings.Repeat("a", 10_000)},
	{"1 MB", strings.Repeat("a", 1<<20)},
	{"empty", ""},
	{"dotted", "a.b.c"},
	{"wildcards", "a.*.>"},
	{"slash", "a/b"},
	{"NUL", "a\x00b"},
	{"invalid UTF-8", "a\xffb"},
}

// TestLongScheduleNameKeepsTheBusUp is the outside check's reproduction: a tenant admin's DELETE
// of a schedule with a 10,000-character name put the name into a NATS subject, and the server
// closed the connection of the whole process. It is refused now, and every tenant's calls go on.
func TestLongScheduleNameKeepsTheBusUp(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Config{}, "default", "other")
	path := "/api/v1/admin/tenants/default/schedules/" + strings.Repeat("a", 10_000) + "?agentName=Echo&activationName=x"
	status, ct, b := doCT(t, http.MethodDelete, s.URL+path, nil, bearerHeader(s.Key)...)
	p := problemOf(t, status, ct, b, http.StatusBadRequest)
	assert.Equal(t, "urn:agentbus:problem:invalid-path", p["type"])
	assert.Contains(t, p["detail"], `"name"`, "the detail names the parameter")
	assert.NotContains(t, string(b), strings.Repeat("a", 300), "the answer does not repeat the value")
	for _, key := range []string{s.Key, s.OtherKey} {
		assert.Equal(t, http.StatusOK, callEcho(t, s.URL, key), "a webhook call after the long DELETE")
	}
	assert.Equal(t, nats.CONNECTED, s.Ingress.NATSStatus())
}

// TestHostileParametersKeepTheBusUp sends every route of the OpenAPI document each hostile value
// in each of its path, query and header parameters, the others holding ordinary values, as a
// tenant admin of "default" (a system admin on the system's routes). No answer may be a 5xx,
// the ingress's NATS connection must stay up after every request, and tenant "other"'s webhook
// calls must keep answering 200.
func TestHostileParametersKeepTheBusUp(t *testing.T) {
	if testing.Short() {
		t.Skip("sends about 1,500 requests")
	}
	t.Parallel()
	s := startStack(t, stack.Config{Ingress: ingress.Config{AdminKey: systemKey}}, "default", "other")
	addr := strings.TrimPrefix(s.URL, "http://")
	doc := loadOpenAPI(t)
	// A tenant for the DELETE of a tenant to remove, and a thread for the history routes.
	adminOK(t, s.Stack, post, tenants, systemKey, map[string]any{"id": "doomed"}, http.StatusCreated, nil)
	require.Equal(t, http.StatusOK, callEcho(t, s.URL, s.Key))

	var routes, params, requests int
	for _, opKey := range operations(doc) {
		method, path, _ := strings.Cut(opKey, " ")
		op := doc.Paths.Find(path).GetOperation(method)
		ps := hostileParams(op)
		if len(ps) == 0 {
			continue
		}
		routes++
		for _, p := range ps {
			params++
			for _, hv := range hostileValues {
				requests++
				req := rawRequest(s.Key, method, path, ps, ordinary, p, hv.v)
				status := sendRaw(t, addr, req)
				what := fmt.Sprintf("%s %s with %s %q = %s", method, path, p.In, p.Name, hv.name)
				assert.True(t, status >= 200 && status < 500, "%s: status %d", what, status)
				require.Equal(t, nats.CONNECTED, s.Ingress.NATSStatus(), "%s: the ingress lost NATS", what)
			}
			require.Equal(t, http.StatusOK, callEcho(t, s.URL, s.OtherKey), "another tenant's call after %s %s's %s %q", method, path, p.In, p.Name)
		}
	}
	t.Logf("%d routes × their %d path, query and header parameters × %d values: %d requests", routes, params, len(hostileValues), requests)
	for _, key := range []string{s.Key, s.OtherKey} {
		assert.Equal(t, http.StatusOK, callEcho(t, s.URL, key))
	}
}

// hostileParams are the path, query and header parameters of an operation, Authorization and
// the apikey query parameter left out (they are credentials, checked before anything else).
func hostileParams(op *openapi3.Operation) []*openapi3.Parameter {
	var out []*openapi3.Parameter
	for _, ref := range op.Parameters {
		p := ref.Value
		if p.Name == "apikey" || p.Name == "Authorization" {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ordinary are the values parameters get when they are not the one under test.
var ordinary = map[string]string{
	"tenantId": "default", "workflow": "Echo", "method": "echo", "keyId": "no-such-key",
	"name": "NoSuchName", "agentName": "Echo", "workflowId": "default:Echo:Supervisor Workflow:probe",
	"id": "1", "subscriptionId": "no-such-subscription", "requestId": "no-such-request", "file": "app.js",
	"participantId": "probe", "activationName": "probe", "type": "Chat", "text": "hi",
	"X-Tenant-Id": "default",
}

// rawRequest is a raw HTTP/1.1 request of a route, with key (the system key on the system's
// routes): the path's variables and required parameters hold their values, the parameter under
// test (nil: none) holds v. The DELETE of a tenant removes tenant "doomed" instead of "default".
func rawRequest(key, method, template string, ps []*openapi3.Parameter, values map[string]string, under *openapi3.Parameter, v string) string {
	path := template
	query := map[string]string{} // escaped, by name
	hdr := http.Header{}
	underWorkflowID := under != nil && under.Name == "workflowId"
	for _, p := range ps {
		val, given := values[p.Name], p == under
		if given {
			val = v
		}
		switch p.In {
		case "path":
			if !given && p.Name == "tenantId" && method == http.MethodDelete && template == tenants+"/{tenantId}" {
				val = "doomed"
			}
			path = strings.Replace(path, "{"+p.Name+"}", escapedOf(val).path, 1)
		case "query":
			// History, topics, listen and schedules name the instance by agentName and
			// activationName unless the case is about workflowId.
			addressing := p.Name == "agentName" || p.Name == "activationName"
			if given || p.Required || (addressing && !underWorkflowID) {
				query[url.QueryEscape(p.Name)] = escapedOf(val).query
			}
		case "header":
			if given || p.Required {
				hdr.Set(p.Name, val)
			}
		}
	}
	body := ordinaryBody(method, template, values["name"])
	if strings.HasPrefix(template, "/api/user/webhooks/") {
		query["apikey"] = url.QueryEscape(key)
	} else {
		hdr.Set("Authorization", "Bearer "+key)
	}
	if isSystemRoute(template) {
		hdr.Set("Authorization", "Bearer "+systemKey)
	}
	// One buffer of the request's size: the values under test are up to 1 MB, copied once.
	size := len(method) + len(path) + len(body) + 200
	for name, q := range query {
		size += len(name) + len(q) + 2
	}
	for name, vs := range hdr {
		size += len(name) + len(vs[0]) + 4
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(method + " " + path + "?")
	for i, name := range slices.Sorted(maps.Keys(query)) {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(query[name])
	}
	b.WriteString(" HTTP/1.1\r\nHost: agentbus\r\nConnection: close\r\n")
	for name, vs := range hdr {
		// Written as they are: NUL and invalid UTF-8 included, which http.Client refuses to send.
		b.WriteString(name + ": ")
		b.WriteString(vs[0])
		b.WriteString("\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// escapedValue is a value escaped for a path segment and for a query.
type escapedValue struct{ path, query string }

// escapes holds the escaped forms of the values rawRequest was given: each hostile value goes
// into hundreds of requests, and escaping 1 MB byte by byte is slow under the race detector.
var escapes sync.Map // of escapedValue by value

func escapedOf(v string) escapedValue {
	if e, ok := escapes.Load(v); ok {
		return e.(escapedValue)
	}
	e := escapedValue{path: escapeAll(v), query: url.QueryEscape(v)}
	escapes.Store(v, e)
	return e
}

// escapeAll percent-encodes every byte of a path segment but the unreserved ones.
func escapeAll(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// isSystemRoute reports whether only system admins may call the route.
func isSystemRoute(template string) bool {
	switch {
	case strings.HasPrefix(template, "/api/v1/admin/tenants/{tenantId}/"):
		return false
	case strings.HasPrefix(template, "/api/v1/admin/messaging/"):
		return false
	default:
		return strings.HasPrefix(template, "/api/v1/admin/")
	}
}

// ordinaryBody is an ordinary body for the routes that take one, so that the parameter under
// test is read rather than a missing body refused first. A remote agent's is named name.
func ordinaryBody(method, template, name string) string {
	switch {
	case strings.HasSuffix(template, "/messaging/send"):
		return `{"agentName":"Echo","activationName":"probe","participantId":"probe","type":"Chat","text":"hi"}`
	case template == "/mcp":
		return `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	case strings.HasSuffix(template, "/keys") && method == http.MethodPost:
		return `{"name":"probe","role":"user"}`
	case strings.HasSuffix(template, "/subscriptions") && method == http.MethodPost:
		return `{"url":"http://127.0.0.1:9/hook","events":["message.incoming"]}`
	case strings.HasSuffix(template, "/agents") && method == http.MethodPost,
		strings.HasSuffix(template, "/agents/{name}") && method == http.MethodPut:
		return `{"name":"` + name + `","url":"http://127.0.0.1:9/agent","methods":[{"name":"m"}]}`
	case template == tenants && method == http.MethodPost:
		return `{"id":"probe-tenant"}`
	case method == http.MethodPost || method == http.MethodPut:
		return `{}`
	}
	return ""
}

// sendRaw writes a raw HTTP/1.1 request to addr and returns the answer's status. A stream that
// opens (200 text/event-stream) is not read further.
func sendRaw(t *testing.T, addr, req string) int {
	t.Helper()
	status, _ := exchangeRaw(t, addr, req, false)
	return status
}

// exchangeRaw writes a raw HTTP/1.1 request to addr and returns the answer's status and, when
// withBody, its headers and body as text; an event stream is read for a moment.
func exchangeRaw(t *testing.T, addr, req string, withBody bool) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	require.NoError(t, conn.SetDeadline(deadline))
	// A request refused early may have its body unread: the server answers and closes.
	_, _ = conn.Write([]byte(req))
	// Closing the connection ends an event stream that opened.
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "reading the answer of %.200q", req)
	if !withBody {
		return resp.StatusCode, ""
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	}
	var b strings.Builder
	_ = resp.Header.Write(&b)
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}
