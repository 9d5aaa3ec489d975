package webhooksig_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

func TestReject(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
	}{
		{name: "missing", err: webhooksig.ErrMissingSignature, status: http.StatusUnauthorized},
		{name: "malformed", err: webhooksig.ErrMalformedSignature, status: http.StatusUnauthorized},
		{name: "bad", err: fmt.Errorf("checking X-Signature: %w", webhooksig.ErrBadSignature), status: http.StatusUnauthorized},
		{name: "timestamp", err: webhooksig.ErrTimestamp, status: http.StatusUnauthorized},
		{name: "config", err: webhooksig.GitHub{}.Verify(nil, nil), status: http.StatusInternalServerError},
		{name: "unknown", err: fmt.Errorf("something else"), status: http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := webhooksig.Reject(tc.err)
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, "text/plain; charset=utf-8", resp.ContentType)
			assert.NotContains(t, string(resp.Content), "X-Signature", "the cause's details stay out of the answer")
		})
	}
}

func TestRequireDoesNotCallTheHandlerOnRefusal(t *testing.T) {
	called := 0
	h := webhooksig.Require(webhooksig.GitHub{Secret: []byte(githubSecret)}, nil)(agent.WebhookFunc(
		func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
			called++
			return agent.Status(http.StatusNoContent)
		}))
	resp := h.ServeWebhook(context.Background(), &agent.WebhookRequest{Body: []byte(githubBody + "!"), Header: map[string]string{"X-Hub-Signature-256": githubSig}})
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Zero(t, called)
	resp = h.ServeWebhook(context.Background(), &agent.WebhookRequest{Body: []byte(githubBody), Header: map[string]string{"X-Hub-Signature-256": githubSig}})
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, 1, called)
}
