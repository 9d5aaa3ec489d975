package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// GitHub's example in "Validating webhook deliveries" (docs.github.com/en/webhooks/
// using-webhooks/validating-webhook-deliveries, "Testing the webhook payload validation").
const (
	githubSecret = "It's a Secret to Everybody"
	githubBody   = "Hello, World!"
	githubSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

// hooksStack runs the agent Hooks: its webhook "headers" answers with the headers its handler
// received, and "github" runs only for calls that carry GitHub's signature of the body.
func hooksStack(t *testing.T) *stacktest.Stack {
	t.Helper()
	a := agent.New("Hooks")
	a.WebhookFunc("headers", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		return agent.JSON(http.StatusOK, r.Header)
	})
	verified := agent.WebhookFunc(func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		return agent.Text(http.StatusOK, "verified "+r.Header["X-Github-Delivery"]+": "+string(r.Body))
	})
	a.Webhook("github", webhooksig.Require(webhooksig.GitHub{Secret: []byte(githubSecret)}, nil)(verified))
	return stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}})
}

// postHook POSTs body to a webhook method of Hooks with the header as given, so that a header
// may carry several values and a name may be sent in any case.
func postHook(t *testing.T, s *stacktest.Stack, method, body string, header http.Header) (int, string, []byte) {
	t.Helper()
	req := newRequest(t, context.Background(), http.MethodPost,
		s.URL+"/api/user/webhooks/Hooks/"+method+"?"+q("apikey", s.Key).Encode(), strings.NewReader(body))
	for name, values := range header {
		req.Header[name] = values // as given: Header.Set would canonicalize the name
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// A webhook handler gets the caller's headers under their canonical names, several values of
// one header joined, and never the caller's credentials.
func TestWebhookHeadersReachTheHandler(t *testing.T) {
	t.Parallel()
	s := hooksStack(t)
	status, ct, b := postHook(t, s, "headers", `{"a":1}`, http.Header{
		"Content-Type":        {"application/json"},
		"X-Source":            {"crm"},
		"X-Multi":             {"first", "second"},
		"x-lower-case":        {"sent in lower case"},
		"X-Github-Delivery":   {"72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		"Authorization":       {"Bearer not-for-the-handler"},
		"Cookie":              {"sid=not-for-the-handler"},
		"Proxy-Authorization": {"Basic bm90LWZvci10aGUtaGFuZGxlcg=="},
	})
	require.Equal(t, http.StatusOK, status, "%s", b)
	require.Equal(t, "application/json", ct)
	var got map[string]string
	require.NoError(t, json.Unmarshal(b, &got), "%s", b)

	assert.Equal(t, "application/json", got["Content-Type"])
	assert.Equal(t, "crm", got["X-Source"])
	assert.Equal(t, "first, second", got["X-Multi"], "several values of one header, joined")
	assert.Equal(t, "sent in lower case", got["X-Lower-Case"], "the canonical name")
	assert.Equal(t, "72d3162e-cc78-11e3-81ab-4c9367dc0958", got["X-Github-Delivery"])
	assert.NotEmpty(t, got["User-Agent"])
	for name := range got {
		assert.Equal(t, http.CanonicalHeaderKey(name), name, "header names are canonical")
	}
	for _, credential := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
		assert.NotContains(t, got, credential)
	}
	assert.NotContains(t, string(b), "not-for-the-handler")
	assert.NotContains(t, string(b), s.Key)
}

// GitHub's documented example verifies through the whole stack (ingress, bus, host, Require):
// the body arrives byte for byte and the signature header under its name. A forged or missing
// signature, or an altered body, is refused before the handler runs.
func TestWebhookGitHubSignatureThroughTheStack(t *testing.T) {
	t.Parallel()
	s := hooksStack(t)
	forged := "sha256=" + strings.Repeat("0", 64)
	for _, tc := range []struct {
		name   string
		body   string
		header http.Header
		status int
		want   string
	}{
		{name: "documented example", body: githubBody, header: http.Header{"X-Hub-Signature-256": {githubSig}, "X-Github-Delivery": {"d1"}},
			status: http.StatusOK, want: "verified d1: " + githubBody},
		{name: "name in lower case", body: githubBody, header: http.Header{"x-hub-signature-256": {githubSig}, "x-github-delivery": {"d2"}},
			status: http.StatusOK, want: "verified d2: " + githubBody},
		{name: "forged signature", body: githubBody, header: http.Header{"X-Hub-Signature-256": {forged}},
			status: http.StatusUnauthorized, want: "invalid webhook signature"},
		{name: "altered body", body: "Hello, World?", header: http.Header{"X-Hub-Signature-256": {githubSig}},
			status: http.StatusUnauthorized, want: "invalid webhook signature"},
		{name: "signed twice", body: githubBody, header: http.Header{"X-Hub-Signature-256": {githubSig, githubSig}},
			status: http.StatusUnauthorized, want: "malformed webhook signature"},
		{name: "no signature", body: githubBody, header: http.Header{"X-Github-Delivery": {"d3"}},
			status: http.StatusUnauthorized, want: "missing webhook signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := postHook(t, s, "github", tc.body, tc.header)
			assert.Equal(t, tc.status, status, "%s", b)
			assert.Equal(t, "text/plain; charset=utf-8", ct)
			assert.Equal(t, tc.want, string(b))
		})
	}
}
