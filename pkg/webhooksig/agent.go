package webhooksig

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/agentbus/agentbus/pkg/agent"
)

// Require returns middleware that lets a webhook call through to its handler only when v
// accepts its signature, and otherwise answers it with [Reject] without calling the handler.
// Refusals are logged at Warn on log with their cause (never the secret); a nil log discards
// them.
//
//	a.Webhook("push", webhooksig.Require(webhooksig.GitHub{Secret: secret}, log)(agent.WebhookFunc(push)))
func Require(v Verifier, log *slog.Logger) func(agent.WebhookHandler) agent.WebhookHandler {
	if v == nil {
		panic("webhooksig: Require needs a Verifier")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(next agent.WebhookHandler) agent.WebhookHandler {
		return agent.WebhookFunc(func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
			if err := v.Verify(r.Header, r.Body); err != nil {
				log.WarnContext(ctx, "webhook signature refused", "method", r.Method, "requestId", r.RequestID, "err", err)
				return Reject(err)
			}
			return next.ServeWebhook(ctx, r)
		})
	}
}

// Reject is the answer to a call whose signature Verify refused with err: 401 with a short
// text/plain reason naming which check failed, or 500 when the verifier itself is misconfigured
// ([ErrInvalidConfig], or an error this package does not know), so the provider retries once it
// is fixed. The answer never carries err's details; log them.
func Reject(err error) agent.Response {
	switch {
	case errors.Is(err, ErrMissingSignature):
		return agent.Text(http.StatusUnauthorized, "missing webhook signature")
	case errors.Is(err, ErrMalformedSignature):
		return agent.Text(http.StatusUnauthorized, "malformed webhook signature")
	case errors.Is(err, ErrBadSignature):
		return agent.Text(http.StatusUnauthorized, "invalid webhook signature")
	case errors.Is(err, ErrTimestamp):
		return agent.Text(http.StatusUnauthorized, "webhook timestamp outside tolerance")
	}
	return agent.Text(http.StatusInternalServerError, "webhook signature verification is misconfigured")
}
