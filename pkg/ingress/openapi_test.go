package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The playground's files are text; the validator needs to be told how to read them.
func init() {
	for _, ct := range []string{"text/html", "text/javascript", "text/css", "image/svg+xml"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
}

// loadOpenAPI loads the embedded OpenAPI document and validates it.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(ingress.OpenAPIDocument())
	require.NoError(t, err, "loading the OpenAPI document")
	require.True(t, doc.IsOpenAPI31OrLater(), "the document is OpenAPI 3.1")
	require.NoError(t, doc.Validate(loader.Context), "validating the OpenAPI document")
	return doc
}

// operations lists the document's operations as "METHOD /path/template".
func operations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// routeTable lists the route table as "METHOD /path/template".
func routeTable() []string {
	var rts []string
	for _, rt := range ingress.RouteTable() {
		rts = append(rts, rt[0]+" "+rt[1])
	}
	slices.Sort(rts)
	return rts
}

// TestOpenAPIDocumentCoversRouteTable checks that every route has an operation in the document,
// and every operation of the document a route, with the same path template.
func TestOpenAPIDocumentCoversRouteTable(t *testing.T) {
	doc := loadOpenAPI(t)
	assert.Equal(t, routeTable(), operations(doc))
	ids := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			assert.NotEmpty(t, op.Summary, "%s %s has no summary", method, path)
			assert.False(t, ids[op.OperationID], "operationId %q twice", op.OperationID)
			ids[op.OperationID] = true
		}
	}
}

// contractTransport checks every request and answer that goes through it against the OpenAPI
// document: the answer must be documented for its operation (status, headers, content type and
// body), and a request the document refuses must be refused by the server (4xx). Requests no
// route takes must get the document's NotFound or MethodNotAllowed answer. It notes which
// operations it saw.
type contractTransport struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	base   http.RoundTripper

	mu   sync.Mutex
	seen map[string]bool
}

func newContractTransport(t *testing.T, doc *openapi3.T) *contractTransport {
	t.Helper()
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &contractTransport{t: t, doc: doc, router: router, base: http.DefaultTransport, seen: map[string]bool{}}
}

// requireCredential is the document's security, checked for presence only: whether a key is
// valid is the server's to say.
func requireCredential(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	switch s := in.SecurityScheme; s.Type {
	case "apiKey":
		if !r.URL.Query().Has(s.Name) {
			return fmt.Errorf("no %s query parameter", s.Name)
		}
	case "http":
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return errors.New("no Bearer key")
		}
	default:
		return fmt.Errorf("unexpected security scheme %q", s.Type)
	}
	return nil
}

func (c *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		var err error
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	what := req.Method + " " + req.URL.RequestURI()

	route, pathParams, routeErr := c.router.FindRoute(req)
	if routeErr != nil {
		b, err := c.readBody(resp)
		if err != nil {
			return nil, err
		}
		c.checkUnrouted(what, routeErr, resp, b)
		return resp, nil
	}
	c.mu.Lock()
	c.seen[req.Method+" "+route.Path] = true
	c.mu.Unlock()

	// The request is validated on a copy with the body as sent.
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	opts := &openapi3filter.Options{AuthenticationFunc: requireCredential, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: pathParams, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil && resp.StatusCode < 400 {
		assert.Failf(c.t, "the document refuses a request the server accepted", "%s: %v; the server answered %d", what, err, resp.StatusCode)
	}

	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		// A stream is checked without its body, which ends only when the client leaves.
		sseOpts := *opts
		sseOpts.ExcludeResponseBody = true
		out.Options = &sseOpts
		r := route.Operation.Responses.Status(resp.StatusCode)
		assert.True(c.t, r != nil && r.Value.Content.Get(mt) != nil, "%s: %d %s is not documented", what, resp.StatusCode, mt)
	} else {
		b, err := c.readBody(resp)
		if err != nil {
			return nil, err
		}
		out.SetBodyBytes(b)
	}
	assert.NoError(c.t, openapi3filter.ValidateResponse(req.Context(), out), "%s: the answer %d does not fit the document", what, resp.StatusCode)
	return resp, nil
}

// readBody reads the whole answer and puts it back for the caller.
func (c *contractTransport) readBody(resp *http.Response) ([]byte, error) {
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return b, err
}

// checkUnrouted checks the answer to a request no operation takes against the document's
// NotFound or MethodNotAllowed answer.
func (c *contractTransport) checkUnrouted(what string, routeErr error, resp *http.Response, body []byte) {
	name, status := "NotFound", http.StatusNotFound
	if errors.Is(routeErr, routers.ErrMethodNotAllowed) {
		name, status = "MethodNotAllowed", http.StatusMethodNotAllowed
	}
	if !assert.Equal(c.t, status, resp.StatusCode, "%s: no operation (%v), but the server answered", what, routeErr) {
		return
	}
	want := c.doc.Components.Responses[name].Value
	for h, ref := range want.Headers {
		if ref.Value.Required {
			assert.NotEmpty(c.t, resp.Header.Get(h), "%s: no %s header", what, h)
		}
	}
	ct := resp.Header.Get("Content-Type")
	mt := want.Content.Get(ct)
	if !assert.NotNil(c.t, mt, "%s: content type %q is not documented for %s", what, ct, name) {
		return
	}
	var v any
	if !assert.NoError(c.t, json.Unmarshal(body, &v), what) {
		return
	}
	assert.NoError(c.t, mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()), "%s: the answer does not fit %s", what, name)
}

// contractClient sends requests to a stack through a contractTransport.
type contractClient struct {
	t    *testing.T
	base string
	http *http.Client
}

// do sends a request with key as a Bearer token (none when empty), body as JSON unless it is a
// string, and hdr as header pairs; it returns the status, headers and body.
func (c *contractClient) do(method, path, key string, body any, hdr ...string) (int, http.Header, []byte) {
	c.t.Helper()
	if body != nil {
		hdr = append([]string{"Content-Type", "application/json"}, hdr...)
	}
	req := newRequest(c.t, context.Background(), method, c.base+path, jsonBody(c.t, body), append(bearerHeader(key), hdr...)...)
	resp, err := c.http.Do(req)
	require.NoError(c.t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, resp.Header, b
}

// want sends a request that must be answered with status, and returns the decoded JSON answer
// (nil when there is none).
func (c *contractClient) want(status int, method, path, key string, body any, hdr ...string) map[string]any {
	c.t.Helper()
	got, _, b := c.do(method, path, key, body, hdr...)
	require.Equal(c.t, status, got, "%s %s: %s", method, path, b)
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	return decode(c.t, b)
}

// openStream opens an event stream and closes it once the status line and headers are in.
func (c *contractClient) openStream(path, key string, hdr ...string) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := newRequest(c.t, ctx, http.MethodGet, c.base+path, nil, append(append(bearerHeader(key), "Accept", "text/event-stream"), hdr...)...)
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode, path)
	require.Equal(c.t, "text/event-stream", resp.Header.Get("Content-Type"), path)
}

// TestOpenAPIContract drives every route of the route table through a whole stack, successes and
// refusals, with every request and answer checked against the OpenAPI document; then checks that
// every route was seen.
func TestOpenAPIContract(t *testing.T) {
	const systemKey = "sys_admin_key_for_openapi_test"
	failing := agent.New("Failing")
	failing.WebhookFunc("fail", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Retry(errors.New("always down"))
	})
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Agents: []*agent.Agent{echo.New(), failing}})
	doc := loadOpenAPI(t)
	tr := newContractTransport(t, doc)
	client := &http.Client{Transport: tr}
	key, other := s.Key, s.OtherKey

	t.Run("operations", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		c.want(http.StatusOK, http.MethodGet, "/healthz", "", nil)
		c.want(http.StatusOK, http.MethodGet, "/metrics", "", nil)
		_, h, b := c.do(http.MethodGet, "/openapi.json", "", nil)
		assert.Equal(t, "application/json", h.Get("Content-Type"))
		assert.Equal(t, ingress.OpenAPIDocument(), b)
		c.want(http.StatusNotFound, http.MethodGet, "/nope", "", nil)
		c.want(http.StatusMethodNotAllowed, http.MethodPost, "/healthz", "", nil)
		c.want(http.StatusMethodNotAllowed, http.MethodDelete, "/openapi.json", "", nil)
	})

	t.Run("playground", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		// The client follows the redirects of / and /ui/; the transport checks both answers.
		for _, p := range []string{"/", "/ui", "/ui/"} {
			status, h, b := c.do(http.MethodGet, p, "", nil)
			assert.Equal(t, http.StatusOK, status, p)
			assert.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"), p)
			assert.Contains(t, string(b), "agentbus playground", p)
		}
		for _, f := range []string{"app.js", "style.css", "favicon.svg"} {
			c.want(http.StatusOK, http.MethodGet, "/ui/"+f, "", nil)
		}
		_, h, _ := c.do(http.MethodGet, "/ui/app.js", "", nil)
		c.want(http.StatusNotModified, http.MethodGet, "/ui/app.js", "", nil, "If-None-Match", h.Get("ETag"))
		c.want(http.StatusNotFound, http.MethodGet, "/ui/nope.js", "", nil)
		c.want(http.StatusNotFound, http.MethodGet, "/ui/index.html", "", nil)
		c.want(http.StatusMethodNotAllowed, http.MethodPost, "/ui", "", nil)
	})

	t.Run("agents", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		m := c.want(http.StatusOK, http.MethodGet, "/api/user/agents", key, nil)
		assert.Equal(t, "default", m["tenant"])
		assert.Len(t, m["agents"], 2)
		m = c.want(http.StatusOK, http.MethodGet, "/api/user/agents?apikey="+url.QueryEscape(systemKey), "", nil)
		assert.NotContains(t, m, "tenant")
		c.want(http.StatusUnauthorized, http.MethodGet, "/api/user/agents", "", nil)
		c.want(http.StatusUnauthorized, http.MethodGet, "/api/user/agents?apikey=wrong", key, nil)
		c.want(http.StatusBadRequest, http.MethodGet, "/api/user/agents?a=%zz", key, nil)
		c.want(http.StatusMethodNotAllowed, http.MethodPost, "/api/user/agents", key, nil)
	})

	t.Run("webhook", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		const p = "/api/user/webhooks/Echo/echo"
		c.want(http.StatusOK, http.MethodPost, p+"?"+q("apikey", key, "participantId", "ada").Encode(), "", map[string]int{"n": 1})
		c.want(http.StatusOK, http.MethodPost, p+"?apikey="+key, "", map[string]int{"n": 2}, "Idempotency-Key", "openapi-1")
		c.want(http.StatusUnauthorized, http.MethodPost, p, key, nil)
		c.want(http.StatusUnauthorized, http.MethodPost, p, "", nil)
		c.want(http.StatusForbidden, http.MethodPost, p+"?"+q("apikey", key, "tenantId", "other").Encode(), "", nil)
		c.want(http.StatusNotFound, http.MethodPost, "/api/user/webhooks/Echo/nope?apikey="+key, "", nil)
		c.want(http.StatusNotFound, http.MethodPost, "/api/user/webhooks/Nobody/echo?apikey="+key, "", nil)
		c.want(http.StatusBadRequest, http.MethodPost, "/api/user/webhooks/a:b:c/echo?apikey="+key, "", nil)
		c.want(http.StatusBadRequest, http.MethodPost, p+"?apikey="+key, "", nil, "Idempotency-Key", strings.Repeat("k", 201))
		c.want(http.StatusMethodNotAllowed, http.MethodGet, p, key, nil)
		c.want(http.StatusNotFound, http.MethodPost, p+"/extra", key, nil)
		// Echo's verify answers its own 400 in text/plain: a handler's answer, not a problem.
		c.want(http.StatusBadRequest, http.MethodPost, "/api/user/webhooks/Echo/verify?apikey="+key, "", nil)
		// A handler that fails every attempt leaves a dead letter, used below.
		c.want(http.StatusInternalServerError, http.MethodPost, "/api/user/webhooks/Failing/fail?apikey="+key, "", nil)
	})

	t.Run("mcp", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		hdr := []string{"Accept", "application/json, text/event-stream", "MCP-Protocol-Version", "2025-06-18"}
		m := c.want(http.StatusOK, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"contract","version":"1"}}}`, hdr...)
		assert.Contains(t, m, "result")
		c.want(http.StatusAccepted, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr...)
		m = c.want(http.StatusOK, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Echo.sum","arguments":{"values":[1,2]}}}`, hdr...)
		assert.Contains(t, m, "result")
		m = c.want(http.StatusOK, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Echo.nope"}}`, hdr...)
		assert.Contains(t, m, "error")
		c.want(http.StatusBadRequest, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":4,"method":"nope"}`, hdr...)
		c.want(http.StatusUnauthorized, http.MethodPost, "/mcp", "", `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`, hdr...)
		c.want(http.StatusMethodNotAllowed, http.MethodGet, "/mcp", key, nil)
	})

	t.Run("converse", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		p := func(kv ...string) string { return "/api/user/rest/converse?" + q(kv...).Encode() }
		m := c.want(http.StatusOK, http.MethodPost, p("workflow", "Echo", "type", "Chat", "text", "hello", "participantId", "ada"), key, nil)
		assert.Equal(t, "You said: hello", m["response"].(map[string]any)["text"])
		// A chat whose model calls a tool stores the call and its result with metadata.
		m = c.want(http.StatusOK, http.MethodPost, p("workflow", "Echo", "type", "Chat", "text", `call sum {"values":[2,3]}`, "participantId", "ada"), key, nil)
		assert.Equal(t, `sum returned {"sum":5}`, m["response"].(map[string]any)["text"])
		page := c.want(http.StatusOK, http.MethodGet, "/api/v1/admin/tenants/default/messaging/history?"+
			q("workflowId", "default:Echo:Supervisor Workflow:default", "participantId", "ada", "pageSize", "3").Encode(), key, nil)
		assert.Contains(t, mustJSON(page["messages"]), `"metadata":{"toolCallId":`)
		c.want(http.StatusOK, http.MethodPost, p("workflow", "Echo", "type", "Data", "text", "sum", "apikey", key), "", map[string]any{"values": []int{1, 2}})
		status, h, b := c.do(http.MethodPost, p("workflow", "Echo", "type", "Chat", "text", "streamed"), key, nil, "Accept", "text/event-stream")
		assert.Equal(t, http.StatusOK, status, "%s", b)
		assert.Equal(t, "text/event-stream", h.Get("Content-Type"))
		assert.Contains(t, string(b), "event: message")
		c.want(http.StatusBadRequest, http.MethodPost, p("workflow", "Echo", "type", "Bogus", "text", "x"), key, nil)
		c.want(http.StatusBadRequest, http.MethodPost, p("type", "Chat", "text", "x"), key, nil)
		c.want(http.StatusBadRequest, http.MethodPost, p("workflow", "Echo", "type", "Data", "text", "sum"), key, "[1]")
		c.want(http.StatusNotFound, http.MethodPost, p("workflow", "Echo", "type", "Data", "text", "nope"), key, nil)
		c.want(http.StatusUnauthorized, http.MethodPost, p("workflow", "Echo", "type", "Chat", "text", "x", "apikey", "wrong"), "", nil)
		c.want(http.StatusForbidden, http.MethodPost, p("workflow", "Echo", "type", "Chat", "text", "x", "tenantId", "other"), key, nil)
	})

	msg := map[string]any{"agentName": "Echo", "activationName": "support", "participantId": "ada", "type": "Chat", "text": "hi", "topic": "billing"}
	t.Run("send", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		const p = "/api/v1/admin/tenants/default/messaging/send"
		m := c.want(http.StatusOK, http.MethodPost, p+"?wait=true&timeoutSeconds=30", key, msg)
		assert.Equal(t, "You said: hi", m["response"].(map[string]any)["text"])
		c.want(http.StatusAccepted, http.MethodPost, p, key, msg)
		c.want(http.StatusAccepted, http.MethodPost, "/api/v1/admin/messaging/send", key, msg, "X-Tenant-Id", "default")
		file := map[string]any{"agentName": "Echo", "activationName": "support", "participantId": "ada", "type": "File", "text": "a.txt",
			"data": map[string]any{"content": "aGVsbG8=", "fileName": "a.txt", "contentType": "text/plain"}}
		c.want(http.StatusOK, http.MethodPost, p+"?wait=true", key, file)
		c.want(http.StatusBadRequest, http.MethodPost, p, key, "not json")
		c.want(http.StatusBadRequest, http.MethodPost, p, key, map[string]any{"agentName": "Echo"})
		c.want(http.StatusBadRequest, http.MethodPost, p+"?wait=maybe", key, msg)
		c.want(http.StatusBadRequest, http.MethodPost, "/api/v1/admin/messaging/send", key, msg)
		c.want(http.StatusBadRequest, http.MethodPost, p, key, msg, "X-Tenant-Id", "other")
		c.want(http.StatusUnauthorized, http.MethodPost, p, "", msg)
		c.want(http.StatusForbidden, http.MethodPost, "/api/v1/admin/tenants/other/messaging/send", key, msg)
		c.want(http.StatusNotFound, http.MethodPost, "/api/v1/admin/tenants/nobody/messaging/send", systemKey, msg)
	})

	t.Run("history", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		thread := q("workflowId", "default:Echo:Supervisor Workflow:support", "participantId", "ada")
		for _, prefix := range []string{"/api/v1/admin/tenants/default/messaging/", "/api/v1/admin/messaging/"} {
			hdr := []string{"X-Tenant-Id", "default"}
			m := c.want(http.StatusOK, http.MethodGet, prefix+"history?"+thread.Encode()+"&pageSize=2", key, nil, hdr...)
			require.NotEmpty(t, m["next"], "a second page")
			c.want(http.StatusOK, http.MethodGet, prefix+"history?"+thread.Encode()+"&pageSize=2&before="+url.QueryEscape(m["next"].(string)), key, nil, hdr...)
			c.want(http.StatusOK, http.MethodGet, prefix+"history?"+q("agentName", "Echo", "activationName", "support", "participantId", "ada", "topic", "billing", "apikey", key).Encode(), "", nil, hdr...)
			m = c.want(http.StatusOK, http.MethodGet, prefix+"topics?"+thread.Encode(), key, nil, hdr...)
			assert.Equal(t, []any{"billing"}, m["topics"])
			c.openStream(prefix+"listen?"+thread.Encode(), key, hdr...)
			c.want(http.StatusBadRequest, http.MethodGet, prefix+"history?"+q("workflowId", "default:Echo:Supervisor Workflow:support").Encode(), key, nil, hdr...)
			c.want(http.StatusBadRequest, http.MethodGet, prefix+"history?"+thread.Encode()+"&pageSize=0", key, nil, hdr...)
			c.want(http.StatusBadRequest, http.MethodGet, prefix+"topics?"+thread.Encode(), key, nil, "X-Tenant-Id", "bad tenant")
			c.want(http.StatusUnauthorized, http.MethodGet, prefix+"listen?"+thread.Encode(), "", nil, hdr...)
			c.want(http.StatusForbidden, http.MethodGet, prefix+"listen?"+thread.Encode(), other, nil, hdr...)
		}
	})

	t.Run("tenants", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		const p = "/api/v1/admin/tenants"
		c.want(http.StatusCreated, http.MethodPost, p, systemKey, map[string]string{"id": "acme"})
		c.want(http.StatusConflict, http.MethodPost, p, systemKey, map[string]string{"id": "acme"})
		c.want(http.StatusBadRequest, http.MethodPost, p, systemKey, map[string]string{"id": "no spaces"})
		c.want(http.StatusBadRequest, http.MethodPost, p, systemKey, map[string]string{"id": "x", "extra": "y"})
		m := c.want(http.StatusOK, http.MethodGet, p, systemKey, nil)
		assert.Len(t, m["tenants"], 3)
		c.want(http.StatusForbidden, http.MethodGet, p, key, nil)
		c.want(http.StatusUnauthorized, http.MethodGet, p, "", nil)
		c.want(http.StatusOK, http.MethodGet, p+"/default", key, nil)
		c.want(http.StatusForbidden, http.MethodGet, p+"/other", key, nil)
		c.want(http.StatusNotFound, http.MethodGet, p+"/nobody", systemKey, nil)
		c.want(http.StatusMethodNotAllowed, http.MethodPut, p+"/acme", systemKey, nil)
	})

	t.Run("keys", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		for _, p := range []string{"/api/v1/admin/tenants/acme/keys", "/api/v1/admin/keys"} {
			role := "user"
			if p == "/api/v1/admin/keys" {
				role = "system-admin"
			}
			created := c.want(http.StatusCreated, http.MethodPost, p, systemKey, map[string]string{"name": "ci", "role": role})
			id := created["id"].(string)
			c.want(http.StatusOK, http.MethodGet, p, systemKey, nil)
			c.want(http.StatusOK, http.MethodGet, p+"/"+id, systemKey, nil)
			rotated := c.want(http.StatusCreated, http.MethodPost, p+"/"+id+"/rotate", systemKey, nil)
			assert.Equal(t, id, rotated["replaces"])
			c.want(http.StatusConflict, http.MethodPost, p+"/"+id+"/rotate", systemKey, nil)
			c.want(http.StatusNoContent, http.MethodDelete, p+"/"+rotated["id"].(string), systemKey, nil)
			c.want(http.StatusNotFound, http.MethodGet, p+"/no-such-key", systemKey, nil)
			c.want(http.StatusNotFound, http.MethodDelete, p+"/no-such-key", systemKey, nil)
			c.want(http.StatusBadRequest, http.MethodPost, p, systemKey, map[string]string{"name": "x", "role": "owner"})
			c.want(http.StatusForbidden, http.MethodGet, p, key, nil)
			c.want(http.StatusUnauthorized, http.MethodGet, p+"?apikey="+systemKey, "", nil)
		}
		c.want(http.StatusBadRequest, http.MethodGet, "/api/v1/admin/tenants/acme/keys", systemKey, nil, "X-Tenant-Id", "other")
		c.want(http.StatusNoContent, http.MethodDelete, "/api/v1/admin/tenants/acme", systemKey, nil)
		c.want(http.StatusNotFound, http.MethodDelete, "/api/v1/admin/tenants/acme", systemKey, nil)
	})

	t.Run("dead letters", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		const p = "/api/v1/admin/tenants/default/deadletters"
		m := c.want(http.StatusOK, http.MethodGet, p+"?agent=Failing&limit=10", key, nil)
		require.Len(t, m["deadLetters"], 1)
		id := fmt.Sprint(m["deadLetters"].([]any)[0].(map[string]any)["id"])
		c.want(http.StatusOK, http.MethodGet, p+"/"+id, key, nil)
		c.want(http.StatusAccepted, http.MethodPost, p+"/"+id+"/replay", key, nil)
		c.want(http.StatusNotFound, http.MethodPost, p+"/"+id+"/replay", key, nil)
		c.want(http.StatusNotFound, http.MethodDelete, p+"/"+id, key, nil)
		c.want(http.StatusBadRequest, http.MethodGet, p+"/abc", key, nil)
		c.want(http.StatusBadRequest, http.MethodGet, p+"?limit=500", key, nil)
		c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/deadletters", key, nil)
		c.want(http.StatusUnauthorized, http.MethodDelete, p+"/"+id, "", nil)
		// The replayed request fails again and comes back as a new dead letter, discarded here.
		require.Eventually(t, func() bool {
			_, _, b := c.do(http.MethodGet, p+"?agent=Failing", key, nil)
			return strings.Contains(string(b), `"id"`)
		}, 10*time.Second, 20*time.Millisecond)
		m = c.want(http.StatusOK, http.MethodGet, p, key, nil)
		id = fmt.Sprint(m["deadLetters"].([]any)[0].(map[string]any)["id"])
		c.want(http.StatusNoContent, http.MethodDelete, p+"/"+id, key, nil)
	})

	t.Run("readiness", func(t *testing.T) {
		c := &contractClient{t: t, base: s.URL, http: client}
		c.want(http.StatusOK, http.MethodGet, "/readyz", "", nil)
	})

	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, rt := range routeTable() {
		assert.True(t, tr.seen[rt], "no traffic for %s", rt)
	}
}
