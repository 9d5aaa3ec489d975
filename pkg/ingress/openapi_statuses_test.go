package ingress_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The tests of this file produce documented answers that only an ingress configured or broken
// on purpose gives: the coverage check at the end of the run (openapitraffic_test.go) wants
// every (operation, status) pair of the document produced by some test, so that its shape is
// checked against what the code answers.

// operationCall is a request to one operation of the document, with what its parameters need.
type operationCall struct {
	id, method, path string
	// queryKey: the operation takes its key only in the apikey query parameter (a webhook).
	queryKey bool
	// tenantQuery, tenantHeader: the operation takes the tenant in the tenantId query parameter,
	// the X-Tenant-Id header; a system key must name it.
	tenantQuery, tenantHeader bool
}

// The tenant and key the calls name; the key id is well formed, so that it is looked up.
const (
	callTenant = "default"
	callKeyID  = "00000000-0000-4000-8000-000000000000"
)

// pathArguments fill the path parameters of the document's operations.
var pathArguments = strings.NewReplacer("{tenantId}", callTenant, "{keyId}", callKeyID, "{id}", "1",
	"{workflow}", "Echo", "{method}", "echo", "{file}", "app.js", "{name}", "tick",
	"{subscriptionId}", "sub_00000000000000000000", "{agentName}", "Echo", "{workflowId}", "Echo")

// callBodies are valid bodies of the operations that take one, so that a call gets past the
// checks of its body to the key's rate and the stores.
var callBodies = map[string]string{
	"createTenant":              `{"id":"fresh"}`,
	"createTenantKey":           `{"role":"user"}`,
	"createSystemKey":           `{"role":"system-admin"}`,
	"send":                      `{"agentName":"Echo","activationName":"default","participantId":"ada","type":"Chat","text":"hi"}`,
	"sendByHeader":              `{"agentName":"Echo","activationName":"default","participantId":"ada","type":"Chat","text":"hi"}`,
	"signal":                    `{"agentName":"Echo","activationName":"default","participantId":"ada","name":"answer"}`,
	"signalByHeader":            `{"agentName":"Echo","activationName":"default","participantId":"ada","name":"answer"}`,
	"mcp":                       `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
	"callWebhook":               `{}`,
	"createSubscription":        `{"url":"http://127.0.0.1:9/hooks","events":["message.incoming"]}`,
	"registerRemoteAgent":       `{"name":"Remo","url":"http://127.0.0.1:9/agent","chat":true}`,
	"registerTenantRemoteAgent": `{"name":"Remo","url":"http://127.0.0.1:9/agent","chat":true}`,
	"replaceRemoteAgent":        `{"url":"http://127.0.0.1:9/agent","chat":true}`,
	"replaceTenantRemoteAgent":  `{"url":"http://127.0.0.1:9/agent","chat":true}`,
}

// callQueries are the query parameters an operation requires.
var callQueries = map[string][]string{
	"converse":        {"workflow", "Echo", "type", "Chat", "text", "hi"},
	"history":         {"agentName", "Echo", "activationName", "default", "participantId", "ada"},
	"historyByHeader": {"agentName", "Echo", "activationName", "default", "participantId", "ada"},
	"topics":          {"agentName", "Echo", "activationName", "default", "participantId", "ada"},
	"topicsByHeader":  {"agentName", "Echo", "activationName", "default", "participantId", "ada"},
	"listen":          {"agentName", "Echo", "activationName", "default", "participantId", "ada"},
	"listenByHeader":  {"agentName", "Echo", "activationName", "default", "participantId", "ada"},
	"listSchedules":   {"agentName", "Echo", "activationName", "default"},
	"cancelSchedule":  {"agentName", "Echo", "activationName", "default"},
}

// operationsListing is every operation of the document that lists status, sorted by id.
func operationsListing(doc *openapi3.T, status int) []operationCall {
	var calls []operationCall
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Responses.Value(strconv.Itoa(status)) == nil {
				continue
			}
			c := operationCall{id: op.OperationID, method: method, path: pathArguments.Replace(p)}
			if op.Security != nil && len(*op.Security) == 1 {
				_, c.queryKey = (*op.Security)[0]["apikey"]
			}
			for _, param := range op.Parameters {
				c.tenantQuery = c.tenantQuery || (param.Value.In == "query" && param.Value.Name == "tenantId")
				c.tenantHeader = c.tenantHeader || (param.Value.In == "header" && param.Value.Name == "X-Tenant-Id")
			}
			calls = append(calls, c)
		}
	}
	slices.SortFunc(calls, func(a, b operationCall) int { return strings.Compare(a.id, b.id) })
	return calls
}

// callWithKey calls the operation with key and what its parameters and body need. An event
// stream that opens is left at once: its status and headers are the answer.
func (c operationCall) callWithKey(t *testing.T, base, key string) (int, http.Header, []byte) {
	t.Helper()
	query := q(callQueries[c.id]...)
	if c.queryKey {
		query.Set("apikey", key)
	}
	if c.tenantQuery {
		query.Set("tenantId", callTenant)
	}
	u := base + c.path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	hdr := append(bearerHeader(key), "Accept", "application/json, text/event-stream")
	if c.tenantHeader {
		hdr = append(hdr, "X-Tenant-Id", callTenant)
	}
	var body io.Reader
	if b, ok := callBodies[c.id]; ok {
		body = strings.NewReader(b)
		hdr = append(hdr, "Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(newRequest(t, ctx, c.method, u, body, hdr...))
	require.NoError(t, err, "%s %s", c.method, c.path)
	defer resp.Body.Close()
	if streaming(resp) {
		return resp.StatusCode, resp.Header, nil
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "%s %s", c.method, c.path)
	return resp.StatusCode, resp.Header, b
}

// TestEveryOperationOverTheRateLimit: every operation that documents 429 answers it to a key
// whose bucket is empty, with Retry-After.
func TestEveryOperationOverTheRateLimit(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	// One request a key, refilled after 1000 s: the first request spends it.
	in := startIngress(t, s, ingress.Config{AdminKey: systemKey, RateLimit: ingress.Rate{PerSecond: 0.001, Burst: 1}})
	status, _, b := do(t, http.MethodGet, in.URL+"/api/v1/admin/tenants", systemKey, nil)
	require.Equal(t, http.StatusOK, status, "the first request: %s", b)

	calls := operationsListing(loadOpenAPI(t), http.StatusTooManyRequests)
	require.NotEmpty(t, calls)
	for _, c := range calls {
		status, h, b := c.callWithKey(t, in.URL, systemKey)
		if assert.Equal(t, http.StatusTooManyRequests, status, "%s %s: %s", c.method, c.path, b) {
			assert.NotEmpty(t, h.Get("Retry-After"), "%s %s", c.method, c.path)
		}
	}
}

// TestEveryOperationWithoutNATS: an ingress whose NATS connection is gone answers 503 on every
// operation that documents it, /healthz and /readyz included; the dead-letter endpoints, which
// tell only the store's causes a caller can act on, answer 500.
func TestEveryOperationWithoutNATS(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	in := startIngress(t, s, ingress.Config{AdminKey: systemKey})
	// What the handlers need stays: the keys the ingress knows, the agents it saw.
	in.conn.Close()
	doc := loadOpenAPI(t)

	for _, c := range operationsListing(doc, http.StatusServiceUnavailable) {
		status, _, b := c.callWithKey(t, in.URL, systemKey)
		assert.Equal(t, http.StatusServiceUnavailable, status, "%s %s: %s", c.method, c.path, b)
	}
	// A tenant's own key needs no read of its tenant, so the dead-letter store itself fails.
	for _, c := range operationsListing(doc, http.StatusInternalServerError) {
		if strings.Contains(c.path, "/deadletters") {
			status, _, b := c.callWithKey(t, in.URL, s.Key)
			assert.Equal(t, http.StatusInternalServerError, status, "%s %s: %s", c.method, c.path, b)
		}
	}
}

// TestMetricsOfAnotherRegisterer: an ingress whose metrics go to a registerer it cannot gather
// leaves serving them to the registerer's owner, and answers GET /metrics with 404.
func TestMetricsOfAnotherRegisterer(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	in := startIngress(t, s, ingress.Config{Metrics: prometheus.WrapRegistererWithPrefix("owner_", prometheus.NewRegistry())})
	status, ct, b := doCT(t, http.MethodGet, in.URL+"/metrics", nil)
	problemOf(t, status, ct, b, http.StatusNotFound)
}
