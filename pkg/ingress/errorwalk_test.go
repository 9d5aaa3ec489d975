package ingress_test

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The error walk (docs/errors.md): every route, given bad input, answers a problem+json with
// the expected status and no internal detail.

// walkLeaks are signs of internals in an answer, compared case-insensitively.
var walkLeaks = []string{"nats:", "jetstream", "agentbus.in.", "AGENTBUS_", "goroutine", ".go:", "panic", "runtime error",
	"ingress.", "keys.", "json:"}

// Values of the error walk's requests: longer than any name may be, longer than any path or
// query the server reads, a well-formed key id no key has, and a file over the stack's limit.
var (
	long      = strings.Repeat("x", 300)
	huge      = strings.Repeat("y", 10000)
	unknownID = "00000000-0000-4000-8000-000000000000"
	bigFile   = base64.StdEncoding.EncodeToString(make([]byte, 2048))
)

// walkKeys are the keys of the error walk: K a tenant-admin key of tenant "default", S the
// system key, and the record of a revoked user key of "default".
type walkKeys struct {
	K, S       string
	revokedRec keys.Key
}

func TestErrorWalk(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, MaxFileBytes: 1024,
		Agents: []*agent.Agent{echo.New(), leakyAgent()}})
	_, revokedRec := revokedKey(t, s, "default", keys.RoleUser, "revoked")
	k := walkKeys{K: s.Key, S: systemKey, revokedRec: revokedRec}
	for _, cases := range [][]routeCase{walkRoutingCases(k), walkWebhookCases(k), walkConverseCases(k),
		walkSendCases(k), walkHistoryCases(k), walkAdminCases(k)} {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { checkWalkAnswer(t, s.URL, tc) })
		}
	}
}

// checkWalkAnswer sends a request of the walk and checks that its answer is a problem with the
// status expected, showing no internals.
func checkWalkAnswer(t *testing.T, base string, tc routeCase) {
	t.Helper()
	status, ct, body := doPeek(t, base, tc.method, tc.path, tc.body, tc.hdr...)
	require.Equal(t, tc.want, status, "status: %.300s", body)
	require.Equal(t, "application/problem+json", ct, "content type: %.300s", body)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	require.NoError(t, json.Unmarshal(body, &p), "problem body %q", body)
	slug, found := strings.CutPrefix(p.Type, "urn:agentbus:problem:")
	assert.True(t, found && slug != "", "problem type %q: %s", p.Type, body)
	assert.NotEmpty(t, p.Title, "problem body %s", body)
	assert.Equal(t, status, p.Status, "problem body %s", body)
	checked := strings.ToLower(string(body))
	for _, leak := range walkLeaks {
		assert.NotContains(t, checked, strings.ToLower(leak), "the answer shows internals: %s", body)
	}
}

// convQ is the converse path and query of a Chat "hi" to Echo, with the name/value pairs set
// over it.
func convQ(kv ...string) string {
	return conv + "?" + with(q("workflow", "Echo", "type", "Chat", "text", "hi"), kv...).Encode()
}

// walkThread is the query of participant p's thread of Echo's default activation, with the
// name/value pairs set over it; an empty value removes the name.
func walkThread(kv ...string) string {
	return "?" + with(q("workflowId", isoWFA, "participantId", "p"), kv...).Encode()
}

// walkRoutingCases are unknown paths and wrong methods.
func walkRoutingCases(k walkKeys) []routeCase {
	auth, sys := bearerHeader(k.K), bearerHeader(k.S)
	return []routeCase{
		{"unknown path", get, "/nope", nil, "", 404},
		{"unknown api path", post, "/api/v1/admin/nope", auth, "", 404},
		{"healthz POST", post, "/healthz", nil, "", 405},
		{"webhook GET", get, wh + "Echo/echo", nil, "", 405},
		{"converse PUT", put, conv, nil, "", 405},
		{"send GET", get, sendPath, nil, "", 405},
		{"bare send GET", get, "/api/v1/admin/messaging/send", nil, "", 405},
		{"history DELETE", del, msgs + "history", nil, "", 405},
		{"topics POST", post, msgs + "topics", nil, "", 405},
		{"listen PUT", put, "/api/v1/admin/messaging/listen", nil, "", 405},
		{"tenants PATCH", patch, tenants, sys, "", 405},
		{"tenant PUT", put, tenants + "/default", sys, "", 405},
		{"keys PUT", put, ownKeys, auth, "", 405},
		{"key POST", post, ownKeys + "/" + unknownID, auth, "", 405},
		{"rotate GET", get, ownKeys + "/" + unknownID + "/rotate", auth, "", 405},
		{"system keys DELETE", del, sysKeys, sys, "", 405},
	}
}

// walkWebhookCases are the webhook's refusals.
func walkWebhookCases(k walkKeys) []routeCase {
	K, S, revokedRec := k.K, k.S, k.revokedRec
	return []routeCase{
		{"webhook no key", post, wh + "Echo/echo", nil, "", 401},
		{"webhook revoked key id as key", post, wh + "Echo/echo" + isoQuery("apikey", revokedRec.ID), nil, "", 401},
		{"webhook bad query encoding", post, wh + "Echo/echo?apikey=" + K + "&x=%zz", nil, "", 400},
		{"webhook unknown agent", post, wh + "Nobody/echo" + isoQuery("apikey", K), nil, "", 404},
		{"webhook unknown workflow type", post, wh + "Echo:Batch/echo" + isoQuery("apikey", K), nil, "", 404},
		{"webhook unknown method", post, wh + "Echo/nope" + isoQuery("apikey", K), nil, "", 404},
		{"webhook three segments", post, wh + "a:b:c/echo" + isoQuery("apikey", K), nil, "", 400},
		{"webhook invalid tenant segment", post, wh + url.PathEscape("bad tenant:Echo:Supervisor Workflow:x") + "/echo" + isoQuery("apikey", K), nil, "", 400},
		{"webhook oversized activation", post, wh + "default:Echo:Supervisor Workflow:" + long + "/echo" + isoQuery("apikey", K), nil, "", 400},
		{"webhook oversized workflow", post, wh + huge + "/echo" + isoQuery("apikey", K), nil, "", 400},
		{"webhook oversized method", post, wh + "Echo/" + huge + isoQuery("apikey", K), nil, "", 400},
		{"webhook oversized participant", post, wh + "Echo/echo" + isoQuery("apikey", K, "participantId", long), nil, "", 400},
		{"webhook control character in participant", post, wh + "Echo/echo" + isoQuery("apikey", K, "participantId", "a\x01b"), nil, "", 400},
		{"webhook oversized Idempotency-Key", post, wh + "Echo/echo" + isoQuery("apikey", K), []string{"Idempotency-Key", long}, "", 400},
		{"webhook system key without tenantId", post, wh + "Echo/echo" + isoQuery("apikey", S), nil, "", 400},
		{"webhook system key, invalid tenantId", post, wh + "Echo/echo" + isoQuery("apikey", S, "tenantId", "bad tenant"), nil, "", 400},
		{"webhook system key, unknown tenant", post, wh + "Echo/echo" + isoQuery("apikey", S, "tenantId", "nobody"), nil, "", 404},
		{"webhook handler panic", post, wh + "Leaky/panic" + isoQuery("apikey", K), nil, "", 500},
	}
}

// walkConverseCases are converse's refusals.
func walkConverseCases(k walkKeys) []routeCase {
	auth := bearerHeader(k.K)
	return []routeCase{
		{"converse no key", post, convQ(), nil, "", 401},
		{"converse missing workflow", post, conv + isoQuery("type", "Chat", "text", "hi"), auth, "", 400},
		{"converse missing type", post, conv + isoQuery("workflow", "Echo", "text", "hi"), auth, "", 400},
		{"converse missing text", post, conv + isoQuery("workflow", "Echo", "type", "Chat"), auth, "", 400},
		{"converse bad type", post, convQ("type", "Shout"), auth, "", 400},
		{"converse timeoutSeconds 0", post, convQ("timeoutSeconds", "0"), auth, "", 400},
		{"converse timeoutSeconds 301", post, convQ("timeoutSeconds", "301"), auth, "", 400},
		{"converse timeoutSeconds not a number", post, convQ("timeoutSeconds", "soon"), auth, "", 400},
		{"converse oversized topic", post, convQ("topic", long), auth, "", 400},
		{"converse oversized workflow", post, convQ("workflow", huge), auth, "", 400},
		{"converse oversized participant", post, convQ("participantId", long), auth, "", 400},
		{"converse other tenant's workflow", post, convQ("workflow", "other:Echo:Supervisor Workflow:x"), auth, "", 403},
		{"converse Data bad JSON", post, convQ("type", "Data", "text", "echo"), auth, `{"a":`, 400},
		{"converse Data array", post, convQ("type", "Data", "text", "echo"), auth, `[1,2]`, 400},
		{"converse Data too large", post, convQ("type", "Data", "text", "echo"), auth, `{"a":"` + strings.Repeat("z", 1<<20) + `"}`, 413},
		{"converse Data wrong parameter type", post, convQ("type", "Data", "text", "sum"), auth, `{"values":"nope"}`, 400},
		{"converse unknown agent", post, convQ("workflow", "Nobody"), auth, "", 404},
		{"converse unknown Data method", post, convQ("type", "Data", "text", "nope"), auth, "{}", 404},
		{"converse handler error", post, convQ("type", "Data", "text", "fail"), auth, `{"status":422,"message":"no"}`, 422},
		{"converse Data handler panic", post, convQ("workflow", "Leaky", "type", "Data", "text", "panic"), auth, "{}", 500},
		{"converse Chat handler panic", post, convQ("workflow", "Leaky"), auth, "", 500},
	}
}

// walkSendCases are send's refusals.
func walkSendCases(k walkKeys) []routeCase {
	auth, sys := bearerHeader(k.K), bearerHeader(k.S)
	return []routeCase{
		{"send no key", post, sendPath, nil, chatMsg(), 401},
		{"send empty body", post, sendPath, auth, "", 400},
		{"send bad JSON", post, sendPath, auth, `{"type":`, 400},
		{"send two values", post, sendPath, auth, chatMsg() + chatMsg(), 400},
		{"send array", post, sendPath, auth, `[]`, 400},
		{"send wrong field type", post, sendPath, auth, `{"agentName":5}`, 400},
		{"send missing agentName", post, sendPath, auth, chatMsg("agentName", ""), 400},
		{"send missing type", post, sendPath, auth, chatMsg("type", ""), 400},
		{"send bad type", post, sendPath, auth, chatMsg("type", "Shout"), 400},
		{"send Data without method", post, sendPath, auth, chatMsg("type", "Data", "text", ""), 400},
		{"send Data array", post, sendPath, auth, chatMsg("type", "Data", "text", "echo", "data", []int{1}), 400},
		{"send oversized activation", post, sendPath, auth, chatMsg("activationName", long), 400},
		{"send activation with ':'", post, sendPath, auth, chatMsg("activationName", "a:b"), 400},
		{"send oversized participant", post, sendPath, auth, chatMsg("participantId", long), 400},
		{"send oversized requestId", post, sendPath, auth, chatMsg("requestId", long), 400},
		{"send oversized topic", post, sendPath, auth, chatMsg("topic", long), 400},
		{"send wait not a bool", post, sendPath + "?wait=maybe", auth, chatMsg(), 400},
		{"send timeoutSeconds 0", post, sendPath + "?wait=true&timeoutSeconds=0", auth, chatMsg(), 400},
		{"send unknown agent", post, sendPath, auth, chatMsg("agentName", "Nobody"), 404},
		{"send unknown workflow type", post, sendPath, auth, chatMsg("workflowType", "Batch"), 404},
		{"send unknown Data method", post, sendPath, auth, chatMsg("type", "Data", "text", "nope"), 404},
		{"send no tenant", post, "/api/v1/admin/messaging/send", auth, chatMsg(), 400},
		{"send invalid path tenant", post, "/api/v1/admin/tenants/" + strings.Repeat("t", 65) + "/messaging/send", auth, chatMsg(), 400},
		{"send system key, unknown tenant", post, "/api/v1/admin/tenants/nobody/messaging/send", sys, chatMsg(), 404},
		{"send file data a number", post, sendPath, auth, chatMsg("type", "File", "data", 5), 400},
		{"send file object bad field", post, sendPath, auth, chatMsg("type", "File", "data", map[string]any{"content": 5}), 400},
		{"send file too large", post, sendPath, auth, chatMsg("type", "File", "data", bigFile), 413},
		{"send body too large", post, sendPath, auth, chatMsg("text", strings.Repeat("z", 1<<20+4096)), 413},
		{"send handler panic", post, sendPath + "?wait=true", auth, chatMsg("agentName", "Leaky", "type", "Data", "text", "panic"), 500},
	}
}

// walkHistoryCases are the refusals of history, topics and listen.
func walkHistoryCases(k walkKeys) []routeCase {
	auth, sys := bearerHeader(k.K), bearerHeader(k.S)
	return []routeCase{
		{"history no key", get, msgs + "history" + walkThread(), nil, "", 401},
		{"history pageSize 0", get, msgs + "history" + walkThread("pageSize", "0"), auth, "", 400},
		{"history pageSize not a number", get, msgs + "history" + walkThread("pageSize", "ten"), auth, "", 400},
		{"history page 0", get, msgs + "history" + walkThread("page", "0"), auth, "", 400},
		{"history page too deep", get, msgs + "history" + walkThread("page", "99999"), auth, "", 400},
		{"history bad cursor", get, msgs + "history" + walkThread("before", "!!"), auth, "", 400},
		{"history unknown cursor", get, msgs + "history" + walkThread("before", "AQI"), auth, "", 400},
		{"history cursor and page", get, msgs + "history" + walkThread("before", "AQI", "page", "2"), auth, "", 400},
		{"history oversized topic", get, msgs + "history" + walkThread("topic", long), auth, "", 400},
		{"history three-segment workflowId", get, msgs + "history" + walkThread("workflowId", "a:b:c"), auth, "", 400},
		{"history oversized workflowId", get, msgs + "history" + walkThread("workflowId", "default:Echo:Supervisor Workflow:"+huge), auth, "", 400},
		{"history agentName with ':'", get, msgs + "history" + walkThread("workflowId", "", "agentName", "a:b", "activationName", "x"), auth, "", 400},
		{"history missing participant", get, msgs + "history" + walkThread("participantId", ""), auth, "", 400},
		{"history control character in participant", get, msgs + "history" + walkThread("participantId", "a\x00"), auth, "", 400},
		{"history invalid path tenant", get, "/api/v1/admin/tenants/bad%20tenant/messaging/history" + walkThread(), auth, "", 400},
		{"history system key, unknown tenant", get, "/api/v1/admin/tenants/nobody/messaging/history" + walkThread(), sys, "", 404},
		{"topics missing workflow", get, msgs + "topics" + walkThread("workflowId", ""), auth, "", 400},
		{"topics bad query encoding", get, msgs + "topics?x=%zz", auth, "", 400},
		{"listen missing participant", get, msgs + "listen" + walkThread("participantId", ""), auth, "", 400},
		{"listen no tenant", get, "/api/v1/admin/messaging/listen" + walkThread(), auth, "", 400},
	}
}

// walkAdminCases are the refusals of tenant and key management.
func walkAdminCases(k walkKeys) []routeCase {
	revokedRec := k.revokedRec
	auth, sys := bearerHeader(k.K), bearerHeader(k.S)
	return []routeCase{
		{"admin no key", get, tenants, nil, "", 401},
		{"admin key id as key", get, ownKeys, bearerHeader(revokedRec.ID), "", 401},
		{"create tenant bad JSON", post, tenants, sys, `{"id":`, 400},
		{"create tenant empty body", post, tenants, sys, "", 400},
		{"create tenant array", post, tenants, sys, `[]`, 400},
		{"create tenant two objects", post, tenants, sys, `{"id":"a"}{"id":"b"}`, 400},
		{"create tenant unknown field", post, tenants, sys, `{"id":"a","name":"b"}`, 400},
		{"create tenant wrong type", post, tenants, sys, `{"id":5}`, 400},
		{"create tenant invalid id", post, tenants, sys, `{"id":"bad id"}`, 400},
		{"create tenant oversized id", post, tenants, sys, `{"id":"` + strings.Repeat("t", 65) + `"}`, 400},
		{"create tenant exists", post, tenants, sys, `{"id":"default"}`, 409},
		{"create tenant body too large", post, tenants, sys, `{"id":"` + strings.Repeat("t", 70<<10) + `"}`, 413},
		{"read unknown tenant", get, tenants + "/nobody", sys, "", 404},
		{"read invalid tenant", get, tenants + "/" + strings.Repeat("t", 65), sys, "", 400},
		{"read tenant, X-Tenant-Id differs", get, tenants + "/default", append(sys, "X-Tenant-Id", "other"), "", 400},
		{"delete unknown tenant", del, tenants + "/nobody", sys, "", 404},
		{"delete invalid tenant", del, tenants + "/bad%20tenant", sys, "", 400},
		{"create key bad role", post, ownKeys, auth, `{"name":"n","role":"root"}`, 400},
		{"create key missing role", post, ownKeys, auth, `{"name":"n"}`, 400},
		{"create key oversized name", post, ownKeys, auth, `{"name":"` + long + `","role":"user"}`, 400},
		{"create key control character in name", post, ownKeys, auth, `{"name":"a\u0007","role":"user"}`, 400},
		{"create system-admin key in a tenant", post, ownKeys, sys, `{"name":"n","role":"system-admin"}`, 400},
		{"create tenant key as a system key", post, sysKeys, sys, `{"name":"n","role":"user"}`, 400},
		{"create key in an unknown tenant", post, "/api/v1/admin/tenants/nobody/keys", sys, `{"name":"n","role":"user"}`, 404},
		{"system keys with X-Tenant-Id", get, sysKeys, append(sys, "X-Tenant-Id", "default"), "", 400},
		{"read unknown key", get, ownKeys + "/" + unknownID, auth, "", 404},
		{"read malformed key id", get, ownKeys + "/not-a-key-id", auth, "", 404},
		{"read oversized key id", get, ownKeys + "/" + huge, auth, "", 400},
		{"revoke unknown key", del, ownKeys + "/" + unknownID, auth, "", 404},
		{"rotate unknown key", post, ownKeys + "/" + unknownID + "/rotate", auth, "", 404},
		{"rotate revoked key", post, ownKeys + "/" + revokedRec.ID + "/rotate", auth, "", 409},
		{"read unknown system key", get, sysKeys + "/" + unknownID, sys, "", 404},
	}
}
