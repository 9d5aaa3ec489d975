package agent

import (
	"context"
	"log/slog"
	"sync"
)

// WebhookHandler answers webhook calls.
type WebhookHandler interface {
	ServeWebhook(ctx context.Context, r *WebhookRequest) Response
}

// WebhookFunc adapts a function to a WebhookHandler.
type WebhookFunc func(ctx context.Context, r *WebhookRequest) Response

// ServeWebhook calls f.
func (f WebhookFunc) ServeWebhook(ctx context.Context, r *WebhookRequest) Response { return f(ctx, r) }

// WebhookRequest is one webhook call as the handler sees it.
type WebhookRequest struct {
	// Method is the webhook method name from the URL.
	Method string
	// Params holds every query parameter except apikey (and tenantId when given); for a
	// parameter given more than once, its first value.
	Params map[string]string
	// Body is the raw request body, byte for byte (empty when there was none).
	Body []byte
	// ContentType is the caller's Content-Type header.
	ContentType string
	// Header holds the caller's HTTP headers (canonical names; Authorization,
	// Proxy-Authorization and Cookie removed; repeated headers joined with ", ").
	Header map[string]string
	// RequestID correlates the call; it is the caller's Idempotency-Key when one was sent.
	RequestID string
	// ParticipantID is the participantId query parameter, lowercased, else "webhook".
	ParticipantID string
	// Attempt counts the tries of the request: 1 at first, more after a retry or a redelivery.
	Attempt int

	inst    *Instance
	log     *slog.Logger
	respond func(Response)
	once    sync.Once
}

// Instance returns the workflow instance the call runs on.
func (r *WebhookRequest) Instance() *Instance { return r.inst }

// Respond sends resp to the caller at once, before the handler returns, for example a 202 to
// acknowledge work the handler goes on doing. The handler keeps running; the request is only
// acknowledged to the bus, and the next call of this conversation only starts, once it returns.
// What the handler returns after Respond is not sent. Only the first Respond counts.
func (r *WebhookRequest) Respond(resp Response) {
	r.once.Do(func() {
		if r.respond != nil {
			log := r.log
			if log == nil {
				log = slog.New(slog.DiscardHandler)
			}
			r.respond(resp.answer(log, r.Method))
		}
	})
}
