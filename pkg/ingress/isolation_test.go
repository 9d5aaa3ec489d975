package ingress_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The isolation matrix (docs/security.md#isolation-matrix): a key of tenant A ("default") aimed
// at tenant B ("other") by every route there is gets a refusal and none of B's data; a user key
// on an admin endpoint gets 403; a revoked key gets 401 everywhere.

// isoCase is one request of the matrix.
type isoCase struct {
	name   string
	method string
	// path holds the query too.
	path string
	hdr  []string
	body string
	// want are the acceptable statuses, the expected one first.
	want []int
}

// isoTenantB is what B holds that A must never see.
type isoTenantB struct {
	marker   string
	secrets  []string // B's key secrets
	userKey  keys.Key // a user key of B named after the marker
	cursor   string   // a history cursor of B's thread
	lastID   string   // a message id of B's thread
	messages int      // messages in B's thread after seeding
}

// Addressing B's seeded thread, and A's thread of the same names.
const (
	isoWFB        = "other:Echo:Supervisor Workflow:default"
	isoWFA        = "default:Echo:Supervisor Workflow:default"
	isoThreadUser = "victim"
)

// seedB stores the marker in B's history (a webhook call, a chat with the marker as topic and a
// file named after it) and names one of B's keys after it.
func seedB(t *testing.T, s *stacktest.Stack) isoTenantB {
	t.Helper()
	rnd := make([]byte, 8)
	_, err := rand.Read(rnd)
	require.NoError(t, err)
	b := isoTenantB{marker: "B-ONLY-MARKER-" + hex.EncodeToString(rnd)}
	userSecret, userKey := storeKey(t, s, "other", keys.RoleUser, b.marker)
	b.userKey, b.secrets = userKey, []string{s.OtherKey, userSecret}

	status, _, body := call(t, s.URL, "Echo", "echo", q("apikey", s.OtherKey, "participantId", isoThreadUser, "note", b.marker), []byte("body "+b.marker))
	require.Equal(t, http.StatusOK, status, "seeding B by webhook: %s", body)
	for _, m := range []map[string]any{
		{"agentName": "Echo", "activationName": "default", "participantId": isoThreadUser, "type": "Chat", "text": "chat " + b.marker, "topic": b.marker},
		{"agentName": "Echo", "activationName": "default", "participantId": isoThreadUser, "type": "File", "text": b.marker + ".txt",
			"data": base64.StdEncoding.EncodeToString([]byte("file " + b.marker))},
	} {
		status, _, body := send(t, s, "other", "wait=true", m, bearerHeader(s.OtherKey)...)
		require.Equal(t, http.StatusOK, status, "seeding B by send: %s", body)
	}
	// Six messages: each call and its reply. The host answers before it stores the reply.
	path := historyPath("other")
	thread := q("workflowId", isoWFB, "participantId", isoThreadUser, "pageSize", "100")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a := readHistory(t, s.URL, path, thread, bearerHeader(s.OtherKey)...)
		if len(a.Messages) >= 6 {
			b.messages, b.lastID = len(a.Messages), a.Messages[0].ID
			// The positive control: B itself sees the marker, so its absence from A's answers
			// means something.
			require.Contains(t, mustJSON(a), b.marker, "B's history does not show the marker")
			break
		}
		require.False(t, time.Now().After(deadline), "B's thread has %d messages, want 6", len(a.Messages))
	}
	a := readHistory(t, s.URL, path, with(thread, "pageSize", "1"), bearerHeader(s.OtherKey)...)
	require.Len(t, a.Messages, 1, "B's first page: %+v", a)
	require.NotNil(t, a.Next, "B's first page: %+v", a)
	b.cursor = *a.Next
	return b
}

// checkIsoCase runs one case and checks the status and that nothing of B is in the answer.
func checkIsoCase(t *testing.T, s *stacktest.Stack, b isoTenantB, tc isoCase) {
	t.Helper()
	status, ct, body := doPeek(t, s.URL, tc.method, tc.path, tc.body, tc.hdr...)
	require.Contains(t, tc.want, status, "%s %s: status, want one of %v: %.300s", tc.method, tc.path, tc.want, body)
	if status >= 400 {
		assert.Equal(t, "application/problem+json", ct, "refusal's content type")
	}
	for _, secret := range append([]string{b.marker, b.userKey.ID}, b.secrets...) {
		assert.NotContains(t, string(body), secret, "the answer holds B's data")
	}
}

func TestIsolationMatrix(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx := context.Background()
	b := seedB(t, s)
	userA, _ := storeKey(t, s, "default", keys.RoleUser, "a-user")
	for _, cases := range [][]isoCase{isoCallCases(s.Key, userA), isoThreadCases(s.Key, userA, b), isoManagementCases(s.Key, b), isoInspectCases(s.Key)} {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { checkIsoCase(t, s, b, tc) })
		}
	}

	// Nothing A tried changed B: its thread, tenant and keys are as they were.
	a := readHistory(t, s.URL, historyPath("other"), q("workflowId", isoWFB, "participantId", isoThreadUser, "pageSize", "100"), bearerHeader(s.OtherKey)...)
	assert.Len(t, a.Messages, b.messages, "B's thread after the matrix")
	for _, k := range b.secrets {
		assert.True(t, s.Ingress.KeyKnown(k), "a key of B stopped working")
	}
	_, err := s.Keys.GetTenant(ctx, "other")
	assert.NoError(t, err, "tenant B")
	_, err = s.Keys.GetTenant(ctx, "a-made-this")
	assert.Error(t, err, "a tenant admin created a tenant")
}

// isoCallCases are the calls of A's tenant admin (A) and user (userA) aimed at B through the
// webhook, converse and send.
func isoCallCases(A, userA string) []isoCase {
	const (
		webhooks = "/api/user/webhooks/"
		converse = "/api/user/rest/converse"
		sendB    = "/api/v1/admin/tenants/other/messaging/send"
		sendA    = "/api/v1/admin/tenants/default/messaging/send"
		sendBare = "/api/v1/admin/messaging/send"
	)
	refused, mismatch := []int{403}, []int{400}
	wfB := url.PathEscape(isoWFB)
	sendBody := func(typ, text string, extra ...any) string {
		return chatMsg(append([]any{"participantId", isoThreadUser, "type", typ, "text", text}, extra...)...)
	}
	fileBody := sendBody("File", "a.txt", "data", base64.StdEncoding.EncodeToString([]byte("hello")))
	historyData := `{"size":100}`
	return []isoCase{
		// Webhook: POST /api/user/webhooks/{workflow}/{method}?apikey=…
		{"webhook/tenantId query", post, webhooks + "Echo/state" + isoQuery("apikey", A, "tenantId", "other"), nil, "", refused},
		{"webhook/tenantId query of an unknown tenant", post, webhooks + "Echo/state" + isoQuery("apikey", A, "tenantId", "nobody"), nil, "", refused},
		{"webhook/workflow id tenant segment", post, webhooks + wfB + "/state" + isoQuery("apikey", A), nil, "", refused},
		{"webhook/workflow id tenant segment, user key", post, webhooks + wfB + "/echo" + isoQuery("apikey", userA, "participantId", isoThreadUser), nil, "", refused},
		{"webhook/workflow id tenant segment and tenantId", post, webhooks + wfB + "/state" + isoQuery("apikey", A, "tenantId", "other"), nil, "", refused},
		{"webhook/X-Tenant-Id", post, webhooks + "Echo/state" + isoQuery("apikey", A), []string{"X-Tenant-Id", "other"}, "", refused},

		// Converse: POST /api/user/rest/converse?workflow=…&type=…&text=…
		{"converse/tenantId query, bearer", post, converse + isoQuery("workflow", "Echo", "type", "Data", "text", "history", "participantId", isoThreadUser, "tenantId", "other"), bearerHeader(A), historyData, refused},
		{"converse/tenantId query, apikey", post, converse + isoQuery("apikey", A, "workflow", "Echo", "type", "Chat", "text", "hi", "tenantId", "other"), nil, "", refused},
		{"converse/workflow id tenant segment, Data history", post, converse + isoQuery("workflow", isoWFB, "type", "Data", "text", "history", "participantId", isoThreadUser), bearerHeader(A), historyData, refused},
		{"converse/workflow id tenant segment, Chat", post, converse + isoQuery("workflow", isoWFB, "type", "Chat", "text", "what did they say?", "participantId", isoThreadUser), bearerHeader(A), "", refused},
		{"converse/workflow id tenant segment, user key by apikey", post, converse + isoQuery("apikey", userA, "workflow", isoWFB, "type", "Data", "text", "history", "participantId", isoThreadUser), nil, historyData, refused},
		{"converse/workflow id tenant segment, event stream", post, converse + isoQuery("workflow", isoWFB, "type", "Chat", "text", "hi", "participantId", isoThreadUser), append(bearerHeader(A), "Accept", "text/event-stream"), "", refused},
		{"converse/X-Tenant-Id", post, converse + isoQuery("workflow", "Echo", "type", "Data", "text", "history", "participantId", isoThreadUser), append(bearerHeader(A), "X-Tenant-Id", "other"), historyData, refused},

		// Send: POST /api/v1/admin/[tenants/{tenantId}/]messaging/send
		{"send/path tenant", post, sendB, bearerHeader(A), sendBody("Chat", "hi"), refused},
		{"send/path tenant, wait=true Data history", post, sendB + "?wait=true", bearerHeader(A), sendBody("Data", "history"), refused},
		{"send/path tenant, key in the authorization field", post, sendB, nil, sendBody("Chat", "hi", "authorization", A), refused},
		{"send/path tenant of an unknown tenant", post, "/api/v1/admin/tenants/nobody/messaging/send", bearerHeader(A), sendBody("Chat", "hi"), refused},
		{"send/X-Tenant-Id", post, sendBare, append(bearerHeader(A), "X-Tenant-Id", "other"), sendBody("Chat", "hi"), refused},
		{"send/X-Tenant-Id, key in the authorization field", post, sendBare, []string{"X-Tenant-Id", "other"}, sendBody("Chat", "hi", "authorization", A), refused},
		{"send/path own tenant, X-Tenant-Id other", post, sendA, append(bearerHeader(A), "X-Tenant-Id", "other"), sendBody("Chat", "hi"), mismatch},
		{"send/path other tenant, X-Tenant-Id own", post, sendB, append(bearerHeader(A), "X-Tenant-Id", "default"), sendBody("Chat", "hi"), mismatch},
		{"send/file upload, path tenant", post, sendB + "?wait=true", bearerHeader(A), fileBody, refused},
		{"send/file upload, X-Tenant-Id", post, sendBare, append(bearerHeader(A), "X-Tenant-Id", "other"), fileBody, refused},
		{"send/tenantId query", post, sendA + isoQuery("tenantId", "other", "wait", "true"), bearerHeader(A), sendBody("Data", "history"), refused},
	}
}

// isoThreadCases are A's reads of B's thread through history, topics and listen:
// GET /api/v1/admin/[tenants/{tenantId}/]messaging/{endpoint}.
func isoThreadCases(A, userA string, b isoTenantB) []isoCase {
	refused, mismatch := []int{403}, []int{400}
	threadB := []string{"workflowId", isoWFB, "participantId", isoThreadUser}
	threadA := []string{"workflowId", isoWFA, "participantId", isoThreadUser}
	byNames := []string{"agentName", "Echo", "activationName", "default", "participantId", isoThreadUser}
	var cs []isoCase
	for _, ep := range []string{"history", "topics", "listen"} {
		pathB := "/api/v1/admin/tenants/other/messaging/" + ep
		pathA := "/api/v1/admin/tenants/default/messaging/" + ep
		bare := "/api/v1/admin/messaging/" + ep
		cs = append(cs,
			isoCase{ep + "/path tenant, bearer", get, pathB + isoQuery(threadB...), bearerHeader(A), "", refused},
			isoCase{ep + "/path tenant, apikey", get, pathB + isoQuery(append(threadB, "apikey", A)...), nil, "", refused},
			isoCase{ep + "/path tenant, user key", get, pathB + isoQuery(threadB...), bearerHeader(userA), "", refused},
			isoCase{ep + "/path tenant by agent and activation", get, pathB + isoQuery(byNames...), bearerHeader(A), "", refused},
			isoCase{ep + "/path tenant of an unknown tenant", get, "/api/v1/admin/tenants/nobody/messaging/" + ep + isoQuery(threadA...), bearerHeader(A), "", refused},
			isoCase{ep + "/X-Tenant-Id", get, bare + isoQuery(threadB...), append(bearerHeader(A), "X-Tenant-Id", "other"), "", refused},
			isoCase{ep + "/X-Tenant-Id, apikey", get, bare + isoQuery(append(threadB, "apikey", userA)...), []string{"X-Tenant-Id", "other"}, "", refused},
			isoCase{ep + "/path own tenant, X-Tenant-Id other", get, pathA + isoQuery(threadA...), append(bearerHeader(A), "X-Tenant-Id", "other"), "", mismatch},
			isoCase{ep + "/workflowId tenant segment", get, pathA + isoQuery(threadB...), bearerHeader(A), "", refused},
			isoCase{ep + "/workflowId tenant segment, X-Tenant-Id own", get, bare + isoQuery(threadB...), append(bearerHeader(A), "X-Tenant-Id", "default"), "", refused},
			isoCase{ep + "/tenantId query", get, pathA + isoQuery(append(threadA, "tenantId", "other")...), bearerHeader(A), "", refused},
			// The same agent, activation and participant names in A's own tenant are A's thread.
			isoCase{ep + "/same names in own tenant", get, pathA + isoQuery(byNames...), bearerHeader(userA), "", []int{200}},
		)
	}
	cs = append(cs,
		isoCase{"history/B's cursor on A's thread", get, "/api/v1/admin/tenants/default/messaging/history" + isoQuery(append(threadA, "before", b.cursor)...), bearerHeader(A), "", []int{400}},
		isoCase{"listen/B's message id as Last-Event-ID on A's thread", get, "/api/v1/admin/tenants/default/messaging/listen" + isoQuery(threadA...), append(bearerHeader(A), "Last-Event-ID", b.lastID), "", []int{200}},
		isoCase{"listen/B's message id as lastEventId on A's thread", get, "/api/v1/admin/tenants/default/messaging/listen" + isoQuery(append(threadA, "lastEventId", b.lastID)...), bearerHeader(A), "", []int{200}},
	)
	return cs
}

// isoManagementCases are the tenant and key management requests of A's tenant admin aimed at B.
func isoManagementCases(A string, b isoTenantB) []isoCase {
	const (
		keysB = "/api/v1/admin/tenants/other/keys"
		keysA = "/api/v1/admin/tenants/default/keys"
	)
	refused, hidden, mismatch := []int{403}, []int{404}, []int{400}
	bid := b.userKey.ID
	userKeyBody := `{"name":"n","role":"user"}`
	return []isoCase{
		isoCase{"admin/list tenants", get, tenants, bearerHeader(A), "", refused},
		isoCase{"admin/create tenant", post, tenants, bearerHeader(A), `{"id":"a-made-this"}`, refused},
		isoCase{"admin/read tenant", get, tenants + "/other", bearerHeader(A), "", refused},
		isoCase{"admin/read unknown tenant", get, tenants + "/nobody", bearerHeader(A), "", refused},
		isoCase{"admin/read own tenant, X-Tenant-Id other", get, tenants + "/default", append(bearerHeader(A), "X-Tenant-Id", "other"), "", mismatch},
		isoCase{"admin/delete tenant", del, tenants + "/other", bearerHeader(A), "", refused},
		isoCase{"admin/list keys", get, keysB, bearerHeader(A), "", refused},
		isoCase{"admin/list keys, X-Tenant-Id own", get, keysB, append(bearerHeader(A), "X-Tenant-Id", "default"), "", mismatch},
		isoCase{"admin/create key", post, keysB, bearerHeader(A), userKeyBody, refused},
		isoCase{"admin/read key", get, keysB + "/" + bid, bearerHeader(A), "", refused},
		isoCase{"admin/revoke key", del, keysB + "/" + bid, bearerHeader(A), "", refused},
		isoCase{"admin/rotate key", post, keysB + "/" + bid + "/rotate", bearerHeader(A), "", refused},
		isoCase{"admin/read B's key under own tenant", get, keysA + "/" + bid, bearerHeader(A), "", hidden},
		isoCase{"admin/revoke B's key under own tenant", del, keysA + "/" + bid, bearerHeader(A), "", hidden},
		isoCase{"admin/rotate B's key under own tenant", post, keysA + "/" + bid + "/rotate", bearerHeader(A), "", hidden},
		isoCase{"admin/list system keys", get, sysKeys, bearerHeader(A), "", refused},
		isoCase{"admin/create system key", post, sysKeys, bearerHeader(A), `{"name":"n","role":"system-admin"}`, refused},
		isoCase{"admin/read B's key as a system key", get, sysKeys + "/" + bid, bearerHeader(A), "", refused},
		isoCase{"admin/revoke B's key as a system key", del, sysKeys + "/" + bid, bearerHeader(A), "", refused},
		isoCase{"admin/rotate B's key as a system key", post, sysKeys + "/" + bid + "/rotate", bearerHeader(A), "", refused},
		isoCase{"admin/list own keys shows none of B's", get, keysA, bearerHeader(A), "", []int{200}},
	}
}

// isoEveryEndpoint is one call to every authenticated endpoint of tenant "default" (or the
// system scope) with key, in each place the endpoint reads a key from.
func isoEveryEndpoint(key, ownKeyID string) []isoCase {
	chat, chatWithKey := chatMsg(), chatMsg("authorization", key)
	thread := []string{"workflowId", isoWFA, "participantId", "p"}
	cs := []isoCase{
		{name: "webhook, apikey", method: post, path: "/api/user/webhooks/Echo/echo" + isoQuery("apikey", key)},
		{name: "converse, bearer", method: post, path: "/api/user/rest/converse" + isoQuery("workflow", "Echo", "type", "Chat", "text", "hi"), hdr: bearerHeader(key)},
		{name: "converse, apikey", method: post, path: "/api/user/rest/converse" + isoQuery("workflow", "Echo", "type", "Chat", "text", "hi", "apikey", key)},
		{name: "converse, event stream", method: post, path: "/api/user/rest/converse" + isoQuery("workflow", "Echo", "type", "Chat", "text", "hi"), hdr: append(bearerHeader(key), "Accept", "text/event-stream")},
		{name: "send, path tenant", method: post, path: "/api/v1/admin/tenants/default/messaging/send", hdr: bearerHeader(key), body: chat},
		{name: "send, X-Tenant-Id", method: post, path: "/api/v1/admin/messaging/send", hdr: append(bearerHeader(key), "X-Tenant-Id", "default"), body: chat},
		{name: "send, authorization field", method: post, path: "/api/v1/admin/tenants/default/messaging/send", body: chatWithKey},
	}
	for _, ep := range []string{"history", "topics", "listen"} {
		cs = append(cs,
			isoCase{name: ep + ", bearer", method: get, path: "/api/v1/admin/tenants/default/messaging/" + ep + isoQuery(thread...), hdr: bearerHeader(key)},
			isoCase{name: ep + ", apikey", method: get, path: "/api/v1/admin/tenants/default/messaging/" + ep + isoQuery(append(thread, "apikey", key)...)},
			isoCase{name: ep + ", X-Tenant-Id", method: get, path: "/api/v1/admin/messaging/" + ep + isoQuery(thread...), hdr: append(bearerHeader(key), "X-Tenant-Id", "default")},
		)
	}
	return append(cs, isoAdminEndpoints(key, ownKeyID)...)
}

// isoAdminEndpoints is one call to every admin endpoint with key.
func isoAdminEndpoints(key, ownKeyID string) []isoCase {
	const (
		own = "/api/v1/admin/tenants/default/keys"
		sys = "/api/v1/admin/keys"
	)
	h := bearerHeader(key)
	return []isoCase{
		{name: "admin list tenants", method: get, path: "/api/v1/admin/tenants", hdr: h},
		{name: "admin create tenant", method: post, path: "/api/v1/admin/tenants", hdr: h, body: `{"id":"never-made"}`},
		{name: "admin read tenant", method: get, path: "/api/v1/admin/tenants/default", hdr: h},
		{name: "admin delete tenant", method: del, path: "/api/v1/admin/tenants/never-made", hdr: h},
		{name: "admin list keys", method: get, path: own, hdr: h},
		{name: "admin create key", method: post, path: own, hdr: h, body: `{"name":"n","role":"user"}`},
		{name: "admin read key", method: get, path: own + "/" + ownKeyID, hdr: h},
		{name: "admin revoke key", method: del, path: own + "/" + ownKeyID, hdr: h},
		{name: "admin rotate key", method: post, path: own + "/" + ownKeyID + "/rotate", hdr: h},
		{name: "admin list system keys", method: get, path: sys, hdr: h},
		{name: "admin create system key", method: post, path: sys, hdr: h, body: `{"name":"n","role":"system-admin"}`},
		{name: "admin read system key", method: get, path: sys + "/" + ownKeyID, hdr: h},
		{name: "admin revoke system key", method: del, path: sys + "/" + ownKeyID, hdr: h},
		{name: "admin rotate system key", method: post, path: sys + "/" + ownKeyID + "/rotate", hdr: h},
	}
}

func TestIsolationUserKeyOnAdminEndpoints(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx := context.Background()
	user, rec := storeKey(t, s, "default", keys.RoleUser, "user")
	cases := isoAdminEndpoints(user, rec.ID)
	// Sending through the admin send endpoint needs an admin key too; reading history does not.
	cases = append(cases,
		isoCase{name: "send, path tenant", method: post, path: "/api/v1/admin/tenants/default/messaging/send", hdr: bearerHeader(user), body: chatMsg()},
		isoCase{name: "send, authorization field", method: post, path: "/api/v1/admin/tenants/default/messaging/send", body: chatMsg("authorization", user)},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, body := doPeek(t, s.URL, tc.method, tc.path, tc.body, tc.hdr...)
			p := problemOf(t, status, ct, body, http.StatusForbidden)
			assert.Equal(t, "urn:agentbus:problem:forbidden", p["type"])
		})
	}
	// The user key is untouched and still works where users may go.
	k, err := s.Keys.Get(ctx, rec.ID)
	require.NoError(t, err, "user key after the refusals")
	assert.Nil(t, k.RevokedAt, "user key after the refusals: %+v", k)
	_, err = s.Keys.GetTenant(ctx, "never-made")
	assert.Error(t, err, "a user key created a tenant")
	assert.Equal(t, http.StatusOK, callEcho(t, s.URL, user), "user key on its webhook")
}

func TestIsolationRevokedKeyEverywhere(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx := context.Background()
	for _, role := range []keys.Role{keys.RoleTenantAdmin, keys.RoleUser, keys.RoleSystemAdmin} {
		t.Run(string(role), func(t *testing.T) {
			tenant := "default"
			if role == keys.RoleSystemAdmin {
				tenant = ""
			}
			secret, rec := revokedKey(t, s, tenant, role, "revoked")
			for _, tc := range isoEveryEndpoint(secret, rec.ID) {
				t.Run(tc.name, func(t *testing.T) {
					status, ct, body := doPeek(t, s.URL, tc.method, tc.path, tc.body, tc.hdr...)
					p := problemOf(t, status, ct, body, http.StatusUnauthorized)
					assert.Equal(t, "urn:agentbus:problem:unauthorized", p["type"])
					assert.NotContains(t, string(body), secret, "the answer shows the key")
				})
			}
		})
	}
	_, err := s.Keys.GetTenant(ctx, "never-made")
	assert.Error(t, err, "a revoked key created a tenant")
}
