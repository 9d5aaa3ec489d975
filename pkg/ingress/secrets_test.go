package ingress_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/subscription"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// Secrets out of logs (docs/security.md#what-is-protected): keys given in the apikey query parameter, the
// Authorization header or the send body's authorization field never reach the logs (every
// component, debug level) or an answer, whether the call succeeds or fails.

// leakyAgent shows a webhook handler everything it is given, and panics on demand.
func leakyAgent() *agent.Agent {
	a := agent.New("Leaky")
	a.WebhookFunc("show", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		return agent.JSON(http.StatusOK, map[string]any{"header": r.Header, "params": r.Params, "body": string(r.Body), "participant": r.ParticipantID})
	})
	a.WebhookFunc("panic", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		panic("webhook handler blew up")
	})
	a.DataFunc("panic", func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		panic("data handler blew up")
	})
	a.ChatFunc(func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		panic("chat handler blew up")
	})
	return a
}

// secStack starts a whole stack whose every component logs at debug level into the returned
// sink, with a short webhook timeout.
func secStack(t *testing.T) (*customStack, *natstest.LogBuffer) {
	t.Helper()
	sink := &natstest.LogBuffer{}
	s := startStack(t, stack.Config{
		Agents: []*agent.Agent{echo.New(), leakyAgent()},
		Bus:    bus.Config{Partitions: 4},
		// Retries of the panicking handler end well within the short webhook timeout (on a machine
		// busy with other tests under the race detector, 300 ms and 1 s were not always enough:
		// 1.17 s in one CI run).
		Ingress: ingress.Config{WebhookTimeout: 2 * time.Second, AdminKey: systemKey},
		Host:    agent.HostConfig{RetryBackoff: 10 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, "default", "other")
	return s, sink
}
func TestSecretsStayOutOfLogsAndAnswers(t *testing.T) {
	t.Parallel()
	st, sink := secStack(t)
	user, _ := storeKey(t, st.Stack, "default", keys.RoleUser, "secrets test")
	revoked, _ := revokedKey(t, st.Stack, "default", keys.RoleTenantAdmin, "secrets test")
	k := secKeys{admin: st.Key, otherAdmin: st.OtherKey, user: user, revoked: revoked}
	var answers [][]byte
	for _, cases := range [][]routeCase{secQueryAndHeaderCases(k), secBodyAndAdminCases(k)} {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				status, _, body := doPeek(t, st.URL, tc.method, tc.path, tc.body, tc.hdr...)
				answers = append(answers, body)
				require.Equal(t, tc.want, status, "status: %.300s", body)
			})
		}
	}
	made, adminAnswers := secAdminKeys(t, st.URL, k.admin)
	answers = append(answers, adminAnswers...)

	// The timed-out requests are still processed; let them finish so their logs are in.
	time.Sleep(3500 * time.Millisecond)
	checkNoSecrets(t, sink.String(), answers, append([]string{k.admin, k.user, k.otherAdmin, k.revoked}, made...))
}

// secKeys are the keys of the secrets test: tenant admins of "default" and "other", a user of
// "default", and a revoked tenant admin of "default".
type secKeys struct{ admin, otherAdmin, user, revoked string }

// secQueryAndHeaderCases are calls with keys in the apikey query parameter and the
// Authorization header.
func secQueryAndHeaderCases(k secKeys) []routeCase {
	admin, user, otherAdmin, revoked := k.admin, k.user, k.otherAdmin, k.revoked
	auth := bearerHeader
	return []routeCase{
		// The apikey query parameter (webhook; converse and history take it too).
		{"webhook ok", post, wh + "Echo/echo" + isoQuery("apikey", user, "x", "1"), append(auth(admin), "Cookie", "sid="+admin), `{"a":1}`, 200},
		{"webhook handler sees no credentials", post, wh + "Leaky/show" + isoQuery("apikey", user, "y", "2"),
			append(auth(admin), "Proxy-Authorization", "Bearer "+otherAdmin, "Cookie", "k="+admin), "body", 200},
		{"webhook key twice", post, wh + "Echo/echo" + isoQuery("apikey", user, "apikey", user), nil, "", 200},
		{"webhook unknown agent", post, wh + "Nobody/echo" + isoQuery("apikey", user), nil, "", 404},
		{"webhook unknown method", post, wh + "Echo/nope" + isoQuery("apikey", user), nil, "", 404},
		{"webhook bad workflow", post, wh + "a:b:c/echo" + isoQuery("apikey", user), nil, "", 400},
		{"webhook other tenant", post, wh + "Echo/echo" + isoQuery("apikey", user, "tenantId", "other"), nil, "", 403},
		{"webhook revoked key", post, wh + "Echo/echo" + isoQuery("apikey", revoked), nil, "", 401},
		{"webhook bad query encoding", post, wh + "Echo/echo?apikey=" + user + "&x=%zz", nil, "", 400},
		{"webhook Idempotency-Key too long", post, wh + "Echo/echo" + isoQuery("apikey", user), []string{"Idempotency-Key", strings.Repeat("k", 300)}, "", 400},
		{"webhook timeout", post, wh + "default:Echo:Supervisor Workflow:slow/sleep" + isoQuery("apikey", user, "ms", "3000"), nil, "", 504},
		{"webhook handler panic", post, wh + "Leaky/panic" + isoQuery("apikey", user), nil, "", 500},

		// The Authorization header and the apikey query parameter of converse.
		{"converse chat, header", post, conv + isoQuery("workflow", "Echo", "type", "Chat", "text", "hello"), auth(user), "", 200},
		{"converse chat, apikey", post, conv + isoQuery("workflow", "Echo", "type", "Chat", "text", "hello", "apikey", user), nil, "", 200},
		{"converse chat stream", post, conv + isoQuery("workflow", "Echo", "type", "Chat", "text", "hello"), append(auth(user), "Accept", "text/event-stream"), "", 200},
		{"converse bad JSON", post, conv + isoQuery("workflow", "Echo", "type", "Data", "text", "echo"), auth(user), `{"key":"` + user + `"`, 400},
		{"converse bad type", post, conv + isoQuery("workflow", "Echo", "type", "Nope", "text", "echo", "apikey", user), nil, "", 400},
		{"converse unknown agent", post, conv + isoQuery("workflow", "Nobody", "type", "Chat", "text", "hello"), auth(user), "", 404},
		{"converse timeout", post, conv + isoQuery("workflow", "Echo:Conversational", "type", "Data", "text", "sleep", "timeoutSeconds", "1"), auth(user), `{"ms":1500}`, 504},
		{"converse data handler panic", post, conv + isoQuery("workflow", "Leaky", "type", "Data", "text", "panic", "apikey", user), nil, "{}", 500},
		{"converse chat handler panic", post, conv + isoQuery("workflow", "Leaky", "type", "Chat", "text", "hi"), auth(user), "", 500},
		{"converse revoked key", post, conv + isoQuery("workflow", "Echo", "type", "Chat", "text", "hello"), auth(revoked), "", 401},
		{"converse header and apikey differ", post, conv + isoQuery("workflow", "Echo", "type", "Chat", "text", "hello", "apikey", revoked), auth(user), "", 401},
	}
}

// secBodyAndAdminCases are sends with keys in the body's authorization field, history reads and
// admin calls.
func secBodyAndAdminCases(k secKeys) []routeCase {
	admin, user, otherAdmin, revoked := k.admin, k.user, k.otherAdmin, k.revoked
	auth := bearerHeader
	return []routeCase{
		// The send body's authorization field, and the Authorization header of send.
		{"send ok, field", post, sendPath + "?wait=true", nil, chatMsg("authorization", admin), 200},
		{"send ok, header", post, sendPath, auth(admin), chatMsg(), 202},
		{"send bad JSON, field", post, sendPath, nil, `{"authorization":"` + admin + `","type":`, 400},
		{"send two objects, field", post, sendPath, nil, `{"authorization":"` + admin + `"} {"authorization":"` + admin + `"}`, 400},
		{"send wrong field type, field", post, sendPath, nil, `{"authorization":"` + admin + `","agentName":5}`, 400},
		{"send authorization of the wrong type", post, sendPath, auth(admin), `{"authorization":["` + admin + `"]}`, 400},
		{"send unknown agent, field", post, sendPath, nil, chatMsg("authorization", admin, "agentName", "Nobody"), 404},
		{"send timeout, field", post, sendPath + "?wait=true&timeoutSeconds=1", nil,
			chatMsg("authorization", admin, "type", "Data", "text", "sleep", "activationName", "slow-send", "data", map[string]int{"ms": 1500}), 504},
		{"send handler panic, header", post, sendPath + "?wait=true", auth(admin), chatMsg("agentName", "Leaky", "type", "Data", "text", "panic"), 500},
		{"send invalid file, field", post, sendPath + "?wait=true", nil, chatMsg("authorization", admin, "type", "File", "text", "f.txt", "data", "%%%not base64"), 200},
		{"send user key, field", post, sendPath, nil, chatMsg("authorization", user), 403},
		{"send revoked key, field", post, sendPath, nil, chatMsg("authorization", revoked), 401},
		{"send revoked field, good header", post, sendPath, auth(admin), chatMsg("authorization", revoked), 401},
		{"send other tenant, field", post, sendPath, nil, chatMsg("authorization", otherAdmin), 403},

		// History holds what the calls stored; it must hold no key.
		{"history of the webhook thread", get, "/api/v1/admin/tenants/default/messaging/history" + isoQuery("workflowId", isoWFA, "participantId", "webhook", "pageSize", "100"), auth(user), "", 200},
		{"history of the leaky thread", get, "/api/v1/admin/tenants/default/messaging/history" + isoQuery("workflowId", "default:Leaky:Supervisor Workflow:default", "participantId", "webhook", "pageSize", "100", "apikey", user), nil, "", 200},
		{"history of the send thread", get, "/api/v1/admin/messaging/history" + isoQuery("workflowId", isoWFA, "participantId", "p", "pageSize", "100"), append(auth(admin), "X-Tenant-Id", "default"), "", 200},
		{"history bad cursor", get, "/api/v1/admin/tenants/default/messaging/history" + isoQuery("workflowId", isoWFA, "participantId", "p", "before", "zz", "apikey", user), nil, "", 400},

		// Admin endpoints with the system key and a tenant admin's.
		{"admin list tenants", get, "/api/v1/admin/tenants", auth(systemKey), "", 200},
		{"admin bad JSON", post, "/api/v1/admin/tenants", auth(systemKey), `{"id":`, 400},
		{"admin unknown field", post, "/api/v1/admin/tenants/default/keys", auth(admin), `{"name":"n","role":"user","secret":"x"}`, 400},
		{"admin list keys", get, "/api/v1/admin/tenants/default/keys", auth(admin), "", 200},
		{"admin user key", get, "/api/v1/admin/tenants/default/keys", auth(user), "", 403},
		{"admin revoked key", get, "/api/v1/admin/tenants/default/keys", auth(revoked), "", 401},
		{"admin key in the query is not taken", get, "/api/v1/admin/tenants/default/keys" + isoQuery("apikey", admin), nil, "", 401},
	}
}

// secAdminKeys makes a key, rotates it and makes a system key through the admin API, which shows
// each secret once, in its creation answer; then it reads and revokes them. It returns the
// secrets and the answers other than the creation answers.
func secAdminKeys(t *testing.T, base, admin string) (secrets []string, answers [][]byte) {
	t.Helper()
	made := secCreatedKey(t, base, "/api/v1/admin/tenants/default/keys", `{"name":"made","role":"user"}`, admin, "creating a key")
	rotated := secCreatedKey(t, base, "/api/v1/admin/tenants/default/keys/"+made.ID+"/rotate", "", systemKey, "rotating a key")
	sysMade := secCreatedKey(t, base, "/api/v1/admin/keys", `{"name":"sys","role":"system-admin"}`, systemKey, "creating a system key")
	for _, tc := range []struct{ method, path string }{
		{get, "/api/v1/admin/tenants/default/keys"},
		{get, "/api/v1/admin/tenants/default/keys/" + made.ID},
		{get, "/api/v1/admin/keys"},
		{del, "/api/v1/admin/tenants/default/keys/" + rotated.ID},
		{del, "/api/v1/admin/keys/" + sysMade.ID},
	} {
		status, _, body := doPeek(t, base, tc.method, tc.path, "", bearerHeader(systemKey)...)
		answers = append(answers, body)
		require.Less(t, status, 300, "%s %s: %s", tc.method, tc.path, body)
	}
	return []string{made.Key, rotated.Key, sysMade.Key}, answers
}

// secCreatedKey POSTs body to path with key, which must create a key, and returns the new key's
// secret and id.
func secCreatedKey(t *testing.T, base, path, body, key, what string) newKey {
	t.Helper()
	status, _, b := doPeek(t, base, post, path, body, bearerHeader(key)...)
	require.Equal(t, http.StatusCreated, status, "%s: %s", what, b)
	var k newKey
	require.NoError(t, json.Unmarshal(b, &k), "%s: %s", what, b)
	require.NotEmpty(t, k.Key, "%s: %s", what, b)
	return k
}

// checkNoSecrets checks that neither the logs nor any answer hold a secret, the system key or
// any of secrets, whole or without its prefix.
func checkNoSecrets(t *testing.T, logs string, answers [][]byte, secrets []string) {
	t.Helper()
	// Positive controls: the logs hold the failures above, so their silence about keys counts.
	for _, want := range []string{"level=DEBUG", "handler panicked", "key created"} {
		assert.True(t, strings.Contains(logs, want), "the logs do not show %q; is the capture working?", want)
	}
	forbidden := []string{systemKey}
	for _, s := range secrets {
		forbidden = append(forbidden, s, strings.TrimPrefix(s, keys.Prefix))
	}
	for i, f := range forbidden {
		// Not assert.NotContains, which would print the secret and the logs.
		assert.False(t, strings.Contains(logs, f), "the logs hold secret #%d", i)
		for _, a := range answers {
			assert.False(t, bytes.Contains(a, []byte(f)), "an answer holds secret #%d: %.300s", i, a)
		}
	}
	if t.Failed() && testing.Verbose() {
		t.Logf("logs:\n%s", logs)
	}
}

// TestSecretsShownOnlyAtRegistration (docs/admin.md#rules): a remote agent's signing secret is
// answered only by its registration, and a subscription's only by its creation. Every route of
// the OpenAPI document is called, reads and writes alike, as a tenant admin (a system admin on
// the system's routes) on a tenant that has both, DELETEs last; no answer, headers included,
// may carry a secret.
func TestSecretsShownOnlyAtRegistration(t *testing.T) {
	t.Parallel()
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	require.NoError(t, err)
	s := startStack(t, stack.Config{Ingress: ingress.Config{AdminKey: systemKey, Subscriptions: subscription.Config{Allow: allow}}}, "default", "other")
	addr := strings.TrimPrefix(s.URL, "http://")
	secrets := map[string]string{}
	register := func(path, key, name string) {
		secret := webhooksig.NewStandardSecret()
		var reg map[string]any
		adminOK(t, s.Stack, post, path, key, map[string]any{"name": name, "url": "http://127.0.0.1:9/agent", "methods": []map[string]string{{"name": "m"}}, "secret": secret}, http.StatusCreated, &reg)
		assert.Equal(t, secret, reg["secret"], "the registration's answer shows the secret")
		secrets[path+" "+name] = secret
	}
	register("/api/v1/admin/tenants/default/agents", s.Key, "TenantSecretAgent")
	register("/api/v1/admin/agents", systemKey, "SystemSecretAgent")
	subSecret := webhooksig.NewStandardSecret()
	var sub map[string]any
	adminOK(t, s.Stack, post, "/api/v1/admin/tenants/default/subscriptions", s.Key,
		map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"message.incoming"}, "secret": subSecret}, http.StatusCreated, &sub)
	assert.Equal(t, subSecret, sub["secret"], "the creation's answer shows the secret")
	secrets["subscription"] = subSecret

	// A replacement that gives a new secret does not answer with it either.
	newSecret := webhooksig.NewStandardSecret()
	status, h, b := adminReq(t, s.Stack, put, "/api/v1/admin/tenants/default/agents/TenantSecretAgent", s.Key,
		map[string]any{"name": "TenantSecretAgent", "url": "http://127.0.0.1:9/agent", "methods": []map[string]string{{"name": "m"}}, "secret": newSecret})
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.NotContains(t, decode(t, b), "secret")
	assert.Equal(t, "no-store", h.Get("Cache-Control"))
	secrets["replaced"] = newSecret

	doc := loadOpenAPI(t)
	ops := operations(doc)
	// DELETEs last, so that the other routes find what they name.
	slices.SortStableFunc(ops, func(a, b string) int {
		return cmp.Compare(boolInt(strings.HasPrefix(a, del+" ")), boolInt(strings.HasPrefix(b, del+" ")))
	})
	calls := 0
	for _, opKey := range ops {
		method, path, _ := strings.Cut(opKey, " ")
		values := maps.Clone(ordinary)
		values["subscriptionId"] = sub["id"].(string)
		values["name"] = "TenantSecretAgent"
		if strings.HasPrefix(path, "/api/v1/admin/agents") {
			values["name"] = "SystemSecretAgent"
		}
		op := doc.Paths.Find(path).GetOperation(method)
		status, answer := exchangeRaw(t, addr, rawRequest(s.Key, method, path, hostileParams(op), values, nil, ""), true)
		calls++
		assert.Less(t, status, 500, "%s: %.300s", opKey, answer)
		for what, secret := range secrets {
			// Not assert.NotContains, which would print the secret.
			assert.False(t, strings.Contains(answer, secret) || strings.Contains(answer, strings.TrimPrefix(secret, webhooksig.StandardSecretPrefix)),
				"%s (status %d) answers the secret of %s", opKey, status, what)
		}
	}
	t.Logf("%d routes called; none answered a secret", calls)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
