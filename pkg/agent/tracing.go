package agent

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Attributes of the handler spans.
const (
	attrAgent      = attribute.Key("agentbus.agent")
	attrKind       = attribute.Key("agentbus.kind")
	attrMethod     = attribute.Key("agentbus.method")
	attrRequestID  = attribute.Key("agentbus.request_id")
	attrWorkflowID = attribute.Key("agentbus.workflow_id")
	attrAttempt    = attribute.Key("agentbus.attempt")
)

// startSpan starts the consumer span of a request's processing, "handle {agent} {kind}
// {method}", as the child of the span its inbox message's headers name (the ingress's). The
// handler runs in its context, so that an agent's own spans nest under it.
func (h *Host) startSpan(ctx context.Context, header nats.Header, in *inbound) (context.Context, trace.Span) {
	req := in.req
	kind := msgkind.Of(req.GetKind()).Label
	name := "handle " + req.GetAgentName() + " " + kind
	if req.GetMethod() != "" {
		name += " " + req.GetMethod()
	}
	return h.tracer.Start(tracing.Extract(ctx, header), name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attrAgent.String(req.GetAgentName()),
			attrKind.String(kind),
			attrMethod.String(req.GetMethod()),
			attrRequestID.String(req.GetRequestId()),
			attrWorkflowID.String(req.GetWorkflowId()),
		))
}

// endSpan records the attempts the request took and whether it was finished: a request given
// back to the bus is marked failed (a dead letter is marked by deadLetter, with its cause).
func endSpan(span trace.Span, in *inbound, finished bool) {
	span.SetAttributes(attrAttempt.Int(in.tries.n))
	if !finished {
		span.SetStatus(codes.Error, "given back to the bus unfinished")
	}
	span.End()
}

// recordAttempt notes a handler's failed attempt (err non-nil) as an event of the request's span.
func recordAttempt(ctx context.Context, err error) {
	if err != nil {
		trace.SpanFromContext(ctx).RecordError(err)
	}
}
