package ingress

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/tracing"
)

// attrTenant is the span attribute naming the request's tenant, once the handler knows it.
const attrTenant = attribute.Key("agentbus.tenant")

// startSpan starts the server span of a request, as the child of the caller's span when the
// request carries a traceparent. It is named by the route template ("POST /api/user/webhooks/
// {workflow}/{method}"), or by the method alone when no route took the request. Nothing else of
// the request is recorded: no query (API keys travel there), no body.
func (m *apiMetrics) startSpan(ctx context.Context, r *http.Request, route string) (context.Context, trace.Span) {
	ctx = tracing.ExtractHTTP(ctx, r.Header)
	name := r.Method
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(r.Method)}
	if route != "unknown" {
		name += " " + route
		attrs = append(attrs, semconv.HTTPRoute(route))
	}
	return m.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endSpan records the answer's status and the tenant, and ends the span. A 5xx answer marks the
// span as failed; a 4xx is the client's error, not the server's.
func endSpan(span trace.Span, status int, tenant string) {
	span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	if tenant != "" {
		span.SetAttributes(attrTenant.String(tenant))
	}
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}
