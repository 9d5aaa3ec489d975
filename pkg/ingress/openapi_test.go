package ingress_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subscription"
)

// loadOpenAPI is the embedded OpenAPI document, loaded and validated once for the tests, which
// only read it.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := sharedDocument()
	require.NoError(t, err)
	return doc
}

var sharedDocument = sync.OnceValues(loadDocument)

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
	t.Parallel()
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

// TestOpenAPIDocumentCopyInDocs: docs/openapi.json, for readers of the repository, is the
// embedded document, which is the source.
func TestOpenAPIDocumentCopyInDocs(t *testing.T) {
	t.Parallel()
	const refresh = "refresh it from the module root with\n\tcp pkg/ingress/openapi.json docs/openapi.json"
	copyInDocs, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
	require.NoError(t, err, refresh)
	assert.True(t, bytes.Equal(ingress.OpenAPIDocument(), copyInDocs),
		"docs/openapi.json differs from pkg/ingress/openapi.json, its source; "+refresh)
}

// contractTransport checks every request that goes through it against the OpenAPI document: a
// request the document refuses must be refused by the server (4xx). It hands the request to
// traffic, which checks the answer as it checks every test's, and reports what traffic finds
// through the test, besides. It notes which operations it saw.
type contractTransport struct {
	t      *testing.T
	router routers.Router

	mu   sync.Mutex
	seen map[string]bool
}

func newContractTransport(t *testing.T, doc *openapi3.T) *contractTransport {
	t.Helper()
	router, err := pathRouter(doc)
	require.NoError(t, err)
	return &contractTransport{t: t, router: router, seen: map[string]bool{}}
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
	resp, violation, err := traffic.roundTrip(req)
	if err != nil {
		return nil, err
	}
	what := req.Method + " " + redactedURL(req)
	assert.NoError(c.t, violation, "%s: the answer %d does not fit the document", what, resp.StatusCode)

	route, pathParams, routeErr := c.router.FindRoute(req)
	if routeErr != nil {
		return resp, nil
	}
	c.mu.Lock()
	c.seen[req.Method+" "+route.Path] = true
	c.mu.Unlock()

	// The request is validated on a copy with the body as sent.
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	opts := &openapi3filter.Options{AuthenticationFunc: requireCredential, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: pathParams, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil && resp.StatusCode < 400 {
		assert.Failf(c.t, "the document refuses a request the server accepted", "%s: %v; the server answered %d", what, err, resp.StatusCode)
	}
	return resp, nil
}

// contractClient sends requests to a stack through a contractTransport.
type contractClient struct {
	t    *testing.T
	base string
	http *http.Client
	// key and other are tenant-admin keys of tenants "default" and "other".
	key, other string
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
// every route was seen. Its steps run in order, each on what the ones before left.
func TestOpenAPIContract(t *testing.T) {
	t.Parallel()
	// A small file limit makes a send's 413 file-too-large cheap.
	// Subscriptions: a quick retry period gives an undelivered event soon, and a small limit a
	// 409.
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, MaxFileBytes: 1024, Agents: []*agent.Agent{echo.New(), contractFailing()},
		Subscriptions: subscription.Config{RetryFor: time.Second, MaxBackoff: 100 * time.Millisecond, MaxPerTenant: 2}})
	tr := newContractTransport(t, loadOpenAPI(t))
	client := &http.Client{Transport: tr}
	for _, step := range []struct {
		name string
		run  func(*contractClient)
	}{
		{"operations", contractOperations}, {"playground", contractPlayground}, {"console", contractConsole}, {"agents", contractAgents},
		{"webhook", contractWebhook}, {"mcp", contractMCP}, {"converse", contractConverse}, {"send", contractSend},
		{"history", contractHistory}, {"tenants", contractTenants}, {"keys", contractKeys},
		{"dead letters", contractDeadLetters}, {"timers", contractTimers}, {"instances", contractInstances}, {"subscriptions", contractSubscriptions},
		{"remote agents", contractRemoteAgents}, {"hosts", contractHosts}, {"stats", contractStats}, {"usage", contractUsage}, {"limits", contractLimits},
		{"readiness", contractReadiness},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.run(&contractClient{t: t, base: s.URL, http: client, key: s.Key, other: s.OtherKey})
		})
	}

	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, rt := range routeTable() {
		assert.True(t, tr.seen[rt], "no traffic for %s", rt)
	}
}

// contractFailing is the agent Failing: its webhook "fail" fails every attempt, and "odd" answers
// a status outside 200-599, which no client can be given: 502 invalid-handler-status.
func contractFailing() *agent.Agent {
	failing := agent.New("Failing")
	failing.WebhookFunc("fail", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Retry(errors.New("always down"))
	})
	failing.WebhookFunc("odd", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Status(99)
	})
	return failing
}

// contractOperations: the probes, the document itself, and what the router refuses.
func contractOperations(c *contractClient) {
	t := c.t
	c.want(http.StatusOK, http.MethodGet, "/healthz", "", nil)
	c.want(http.StatusOK, http.MethodGet, "/metrics", "", nil)
	_, h, b := c.do(http.MethodGet, "/openapi.json", "", nil)
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	assert.Equal(t, ingress.OpenAPIDocument(), b)
	c.want(http.StatusNotFound, http.MethodGet, "/nope", "", nil)
	c.want(http.StatusMethodNotAllowed, http.MethodPost, "/healthz", "", nil)
	c.want(http.StatusMethodNotAllowed, http.MethodDelete, "/openapi.json", "", nil)
	c.want(http.StatusRequestHeaderFieldsTooLarge, http.MethodGet, "/healthz", "", nil, "X-Big", strings.Repeat("a", 70<<10))
}

// contractPlayground: the playground page and its files, with their ETags.
func contractPlayground(c *contractClient) {
	t := c.t
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
	_, h, _ = c.do(http.MethodGet, "/ui", "", nil)
	c.want(http.StatusNotModified, http.MethodGet, "/ui", "", nil, "If-None-Match", h.Get("ETag"))
	c.want(http.StatusNotFound, http.MethodGet, "/ui/nope.js", "", nil)
	c.want(http.StatusNotFound, http.MethodGet, "/ui/index.html", "", nil)
	c.want(http.StatusMethodNotAllowed, http.MethodPost, "/ui", "", nil)
}

// contractConsole: the operator console and its files, with their ETags.
func contractConsole(c *contractClient) {
	t := c.t
	// The client follows the redirect of /console/; the transport checks both answers.
	for _, p := range []string{"/console", "/console/"} {
		status, h, b := c.do(http.MethodGet, p, "", nil)
		assert.Equal(t, http.StatusOK, status, p)
		assert.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"), p)
		assert.Contains(t, string(b), "agentbus console", p)
	}
	for _, f := range []string{"app.js", "style.css", "favicon.svg"} {
		c.want(http.StatusOK, http.MethodGet, "/console/"+f, "", nil)
	}
	_, h, _ := c.do(http.MethodGet, "/console/app.js", "", nil)
	c.want(http.StatusNotModified, http.MethodGet, "/console/app.js", "", nil, "If-None-Match", h.Get("ETag"))
	_, h, _ = c.do(http.MethodGet, "/console", "", nil)
	c.want(http.StatusNotModified, http.MethodGet, "/console", "", nil, "If-None-Match", h.Get("ETag"))
	c.want(http.StatusNotFound, http.MethodGet, "/console/nope.js", "", nil)
	c.want(http.StatusNotFound, http.MethodGet, "/console/index.html", "", nil)
	c.want(http.StatusMethodNotAllowed, http.MethodPost, "/console", "", nil)
}

// contractAgents: the agent list, by a tenant's key and by the system key.
func contractAgents(c *contractClient) {
	t := c.t
	key := c.key
	m := c.want(http.StatusOK, http.MethodGet, "/api/user/agents", key, nil)
	assert.Equal(t, "default", m["tenant"])
	assert.Len(t, m["agents"], 2)
	m = c.want(http.StatusOK, http.MethodGet, "/api/user/agents?apikey="+url.QueryEscape(systemKey), "", nil)
	assert.NotContains(t, m, "tenant")
	c.want(http.StatusUnauthorized, http.MethodGet, "/api/user/agents", "", nil)
	c.want(http.StatusUnauthorized, http.MethodGet, "/api/user/agents?apikey=wrong", key, nil)
	c.want(http.StatusBadRequest, http.MethodGet, "/api/user/agents?a=%zz", key, nil)
	c.want(http.StatusMethodNotAllowed, http.MethodPost, "/api/user/agents", key, nil)
}

// contractWebhook: webhook calls and their refusals. Failing's fail method leaves the dead letter
// of contractDeadLetters.
func contractWebhook(c *contractClient) {
	key := c.key
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
	// A handler that fails every attempt leaves a dead letter, for contractDeadLetters.
	c.want(http.StatusInternalServerError, http.MethodPost, "/api/user/webhooks/Failing/fail?apikey="+key, "", nil)
	c.want(http.StatusBadGateway, http.MethodPost, "/api/user/webhooks/Failing/odd?apikey="+key, "", nil)
}

// contractMCP: the MCP endpoint's JSON-RPC answers and its transport's refusals.
func contractMCP(c *contractClient) {
	t := c.t
	key := c.key
	hdr := []string{"Accept", "application/json, text/event-stream", "MCP-Protocol-Version", "2025-06-18"}
	m := c.want(http.StatusOK, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"contract","version":"1"}}}`, hdr...)
	assert.Contains(t, m, "result")
	c.want(http.StatusAccepted, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr...)
	m = c.want(http.StatusOK, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Echo.sum","arguments":{"values":[1,2]}}}`, hdr...)
	assert.Contains(t, m, "result")
	m = c.want(http.StatusOK, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Echo.nope"}}`, hdr...)
	assert.Contains(t, m, "error")
	c.want(http.StatusUnauthorized, http.MethodPost, "/mcp", "", `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`, hdr...)
	c.want(http.StatusMethodNotAllowed, http.MethodGet, "/mcp", key, nil)
	list := `{"jsonrpc":"2.0","id":6,"method":"tools/list"}`
	c.want(http.StatusForbidden, http.MethodPost, "/mcp", key, list, append(hdr, "X-Tenant-Id", "other")...)
	c.want(http.StatusNotFound, http.MethodPost, "/mcp", systemKey, list, append(hdr, "X-Tenant-Id", "nobody")...)
	c.want(http.StatusRequestEntityTooLarge, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"pad":"`+strings.Repeat("x", 1<<20)+`"}}`, hdr...)
	c.want(http.StatusUnsupportedMediaType, http.MethodPost, "/mcp", key, list, append(hdr, "Content-Type", "text/plain")...)
	// From protocol version 2026-07-28 on, an unknown method is a JSON-RPC error in a 404.
	m = c.want(http.StatusNotFound, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":8,"method":"nope","params":{}}`,
		"Accept", "application/json, text/event-stream", "MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "nope")
	assert.Contains(t, m, "error")
	// Before it, that error is the request's answer; a body that is not JSON has no id to
	// answer, and is refused with the parse error.
	m = c.want(http.StatusOK, http.MethodPost, "/mcp", key, `{"jsonrpc":"2.0","id":4,"method":"nope"}`, hdr...)
	assert.Contains(t, m, "error")
	m = c.want(http.StatusBadRequest, http.MethodPost, "/mcp", key, `not json`, hdr...)
	assert.Contains(t, m, "error")
}

// contractConverse: converse Chat, Data and streamed calls, and their refusals.
func contractConverse(c *contractClient) {
	t := c.t
	key := c.key
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
}

// contractSend: sends by path and by X-Tenant-Id, waiting and not; they leave the thread of
// contractHistory.
func contractSend(c *contractClient) {
	t := c.t
	key := c.key
	const p = "/api/v1/admin/tenants/default/messaging/send"
	chat := msg("activationName", "support", "participantId", "ada", "type", "Chat", "text", "hi", "topic", "billing")
	m := c.want(http.StatusOK, http.MethodPost, p+"?wait=true&timeoutSeconds=30", key, chat)
	assert.Equal(t, "You said: hi", m["response"].(map[string]any)["text"])
	c.want(http.StatusAccepted, http.MethodPost, p, key, chat)
	c.want(http.StatusAccepted, http.MethodPost, "/api/v1/admin/messaging/send", key, chat, "X-Tenant-Id", "default")
	file := map[string]any{"agentName": "Echo", "activationName": "support", "participantId": "ada", "type": "File", "text": "a.txt",
		"data": map[string]any{"content": "aGVsbG8=", "fileName": "a.txt", "contentType": "text/plain"}}
	c.want(http.StatusOK, http.MethodPost, p+"?wait=true", key, file)
	c.want(http.StatusBadRequest, http.MethodPost, p, key, "not json")
	c.want(http.StatusBadRequest, http.MethodPost, p, key, map[string]any{"agentName": "Echo"})
	// Data the document refuses for its message type (TestOpenAPISendRequestData).
	for _, bad := range []map[string]any{
		withFields(chat, "type", "Data", "text", "sum", "data", []int{2, 3}),
		withFields(chat, "type", "File", "text", "a.txt", "data", 42),
		withFields(chat, "type", "File", "text", "a.txt", "data", map[string]any{"content": 42}),
	} {
		c.want(http.StatusBadRequest, http.MethodPost, p, key, bad)
	}
	c.want(http.StatusBadRequest, http.MethodPost, p+"?wait=maybe", key, chat)
	c.want(http.StatusBadRequest, http.MethodPost, "/api/v1/admin/messaging/send", key, chat)
	c.want(http.StatusBadRequest, http.MethodPost, p, key, chat, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodPost, p, "", chat)
	c.want(http.StatusForbidden, http.MethodPost, "/api/v1/admin/tenants/other/messaging/send", key, chat)
	c.want(http.StatusNotFound, http.MethodPost, "/api/v1/admin/tenants/nobody/messaging/send", systemKey, chat)

	// Signals: Echo's ask waits for the signal "answer".
	const sp = "/api/v1/admin/tenants/default/messaging/signal"
	signal := msg("activationName", "signals", "participantId", "ada", "name", "answer", "data", map[string]any{"ok": true})
	for _, path := range []string{sp, "/api/v1/admin/messaging/signal"} {
		want := func(status int, key string, body map[string]any) map[string]any {
			t.Helper()
			return c.want(status, http.MethodPost, path, key, body, "X-Tenant-Id", "default")
		}
		want(http.StatusConflict, key, signal)
		c.want(http.StatusAccepted, http.MethodPost, p+"?wait=true", key, withFields(chat, "activationName", "signals", "type", "Data", "text", "ask",
			"data", map[string]any{"question": "ok?"}))
		m := want(http.StatusOK, key, signal)
		assert.Equal(t, "signal", m["response"].(map[string]any)["data"].(map[string]any)["type"], "%v", m)
		want(http.StatusBadRequest, key, withFields(signal, "name", ""))
		want(http.StatusBadRequest, key, withFields(signal, "data", []int{1}))
		want(http.StatusNotFound, key, withFields(signal, "agentName", "Nobody"))
		want(http.StatusUnauthorized, "", signal)
		want(http.StatusForbidden, c.other, signal)
		want(http.StatusRequestEntityTooLarge, key, withFields(signal, "data", map[string]any{"x": strings.Repeat("x", 300<<10)}))
	}

	// Both sends, the tenant in the path and in X-Tenant-Id, answer the same.
	for _, path := range []string{p, "/api/v1/admin/messaging/send"} {
		send := func(status int, query string, body map[string]any) {
			t.Helper()
			c.want(status, http.MethodPost, path+query, key, body, "X-Tenant-Id", "default")
		}
		send(http.StatusOK, "?wait=true", chat)
		send(http.StatusNotFound, "", withFields(chat, "agentName", "Nobody"))
		send(http.StatusRequestEntityTooLarge, "", withFields(chat, "type", "File", "text", "big.txt", "data", base64.StdEncoding.EncodeToString(make([]byte, 2048))))
		// A requestId used again for another request.
		id := "reused-" + path[len(path)-6:]
		send(http.StatusOK, "?wait=true", withFields(chat, "requestId", id))
		send(http.StatusUnprocessableEntity, "?wait=true", withFields(chat, "requestId", id, "type", "Data", "text", "sum", "data", map[string]any{"values": []int{1}}))
		// Echo's fail method fails with the status it is given: the handler's problem.
		for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusTeapot} {
			send(status, "?wait=true", withFields(chat, "type", "Data", "text", "fail", "data", map[string]any{"status": status}))
		}
	}
}

// contractHistory: history, topics and listen by path and by X-Tenant-Id.
func contractHistory(c *contractClient) {
	t := c.t
	key, other := c.key, c.other
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
		// A system key names a tenant that does not exist.
		nobody := strings.Replace(prefix, "/default/", "/nobody/", 1)
		for _, op := range []string{"history", "topics", "listen"} {
			c.want(http.StatusNotFound, http.MethodGet, nobody+op+"?"+thread.Encode(), systemKey, nil, "X-Tenant-Id", "nobody")
		}
	}
}

// contractTenants: tenant management; it leaves tenant acme for contractKeys.
func contractTenants(c *contractClient) {
	t := c.t
	key := c.key
	const p = "/api/v1/admin/tenants"
	c.want(http.StatusCreated, http.MethodPost, p, systemKey, map[string]string{"id": "acme"})
	c.want(http.StatusConflict, http.MethodPost, p, systemKey, map[string]string{"id": "acme"})
	c.want(http.StatusBadRequest, http.MethodPost, p, systemKey, map[string]string{"id": "no spaces"})
	c.want(http.StatusBadRequest, http.MethodPost, p, systemKey, map[string]string{"id": "x", "extra": "y"})
	c.want(http.StatusRequestEntityTooLarge, http.MethodPost, p, systemKey, map[string]string{"id": strings.Repeat("x", 64<<10)})
	m := c.want(http.StatusOK, http.MethodGet, p, systemKey, nil)
	assert.Len(t, m["tenants"], 3)
	c.want(http.StatusForbidden, http.MethodGet, p, key, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, p, "", nil)
	c.want(http.StatusOK, http.MethodGet, p+"/default", key, nil)
	c.want(http.StatusForbidden, http.MethodGet, p+"/other", key, nil)
	c.want(http.StatusNotFound, http.MethodGet, p+"/nobody", systemKey, nil)
	c.want(http.StatusMethodNotAllowed, http.MethodPut, p+"/acme", systemKey, nil)
}

// contractKeys: the keys of tenant acme and the system keys; it deletes acme at the end.
func contractKeys(c *contractClient) {
	t := c.t
	key := c.key
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
		// X-Tenant-Id names another tenant than the path's, or any on the system keys' path.
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			c.want(http.StatusBadRequest, method, p+"/"+id, systemKey, nil, "X-Tenant-Id", "other")
		}
		c.want(http.StatusBadRequest, http.MethodPost, p+"/"+id+"/rotate", systemKey, nil, "X-Tenant-Id", "other")
		c.want(http.StatusNotFound, http.MethodPost, p+"/no-such-key/rotate", systemKey, nil)
		c.want(http.StatusRequestEntityTooLarge, http.MethodPost, p, systemKey, map[string]string{"name": strings.Repeat("x", 64<<10), "role": role})
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
}

// contractDeadLetters: the dead letter contractWebhook left, read, replayed and discarded.
func contractDeadLetters(c *contractClient) {
	t := c.t
	key := c.key
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
	c.want(http.StatusUnauthorized, http.MethodGet, p+"/"+id, "", nil)
	// The replayed request fails again and comes back as a new dead letter, discarded here.
	require.Eventually(t, func() bool {
		_, _, b := c.do(http.MethodGet, p+"?agent=Failing", key, nil)
		return strings.Contains(string(b), `"id"`)
	}, 10*time.Second, 20*time.Millisecond)
	m = c.want(http.StatusOK, http.MethodGet, p, key, nil)
	id = fmt.Sprint(m["deadLetters"].([]any)[0].(map[string]any)["id"])
	c.want(http.StatusNoContent, http.MethodDelete, p+"/"+id, key, nil)
}

// contractTimers: the timers of an instance, listed and cancelled.
func contractTimers(c *contractClient) {
	key := c.key
	const p = "/api/v1/admin/tenants/default/schedules"
	const instance = "?agentName=Echo&activationName=contract-clock"
	c.want(http.StatusOK, http.MethodPost, "/api/v1/admin/tenants/default/messaging/send?wait=true", key,
		map[string]any{"agentName": "Echo", "activationName": "contract-clock", "participantId": "ada", "type": "Data", "text": "tick", "data": map[string]any{"seconds": 60}})
	c.want(http.StatusOK, http.MethodGet, p+instance, key, nil)
	c.want(http.StatusNoContent, http.MethodDelete, p+"/tick"+instance, key, nil)
	c.want(http.StatusNotFound, http.MethodDelete, p+"/tick"+instance, key, nil)
	c.want(http.StatusBadRequest, http.MethodGet, p+"?agentName=Echo", key, nil)
	c.want(http.StatusBadRequest, http.MethodDelete, p+"/tick?activationName=x", key, nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/schedules"+instance, key, nil)
	c.want(http.StatusForbidden, http.MethodDelete, "/api/v1/admin/tenants/other/schedules/tick"+instance, key, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, p+instance, "", nil)
	c.want(http.StatusUnauthorized, http.MethodDelete, p+"/tick"+instance, "", nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nosuch/schedules"+instance, systemKey, nil)
}

// contractReadiness: /readyz of a stack whose host lives.
func contractReadiness(c *contractClient) {

	c.want(http.StatusOK, http.MethodGet, "/readyz", "", nil)
}
