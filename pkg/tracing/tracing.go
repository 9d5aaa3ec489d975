// Package tracing carries W3C trace context (traceparent, tracestate) from the ingress's HTTP
// requests through NATS message headers to the workflow host, and sets up the OpenTelemetry
// exporter of the services from the standard OTEL_* variables.
//
// It holds no spans of its own: the ingress starts the server span of each HTTP request and the
// host the consumer span of each handler run, each with the tracer Tracer gives it. It is not a
// general OpenTelemetry configuration: only an OTLP trace exporter is supported (over HTTP or
// gRPC), and metrics stay with Prometheus (package metrics).
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of agentbus's spans.
const ScopeName = "github.com/agentbus/agentbus"

// propagator is W3C trace context only, whatever the global propagator is: the ingress honours
// an incoming traceparent even when the process set no propagator, and the host reads what the
// ingress wrote.
var propagator = propagation.TraceContext{}

// unsetGlobal is otel's global tracer provider before anyone sets one: a stand-in that only
// forwards to the provider set later.
var unsetGlobal = otel.GetTracerProvider()

// Tracer returns the agentbus tracer of tp, or nil when tracing is off. A nil tp means otel's
// global provider as it is now; tracing is off when that was never set, or when the provider
// is a no-op one (as Setup installs when nothing is configured). Callers skip all tracing work
// on nil, so that a request costs nothing extra when tracing is off; the global stand-in would
// instead make non-recording spans at a few allocations each.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
		if tp == unsetGlobal {
			return nil
		}
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer(ScopeName)
}

// ExtractHTTP returns ctx with the remote span context of an incoming traceparent header, if
// the request has a valid one.
func ExtractHTTP(ctx context.Context, h map[string][]string) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject writes ctx's span context into NATS message headers (traceparent, tracestate); it
// writes nothing when ctx holds no valid span context.
func Inject(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote span context that a NATS message's headers carry, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// HeaderCarrier is a propagation.TextMapCarrier over NATS message headers. Keys are used as
// given (NATS headers are case-sensitive), which for W3C trace context is lower case.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key, or "".
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with value.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Setup configures the process's tracing from the standard OpenTelemetry variables and installs
// it as otel's global tracer provider, so that ingress and host (whose Config.Tracer is nil) and
// agent authors' own otel.Tracer calls use it. Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set or OTEL_TRACES_EXPORTER is "otlp"; it is off
// (a no-op provider) otherwise, and when OTEL_SDK_DISABLED is "true" or OTEL_TRACES_EXPORTER is
// "none". Spans go in batches to an OTLP exporter, over HTTP (http/protobuf, the default) or
// gRPC as OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL says; the exporter
// reads the rest of the OTEL_EXPORTER_OTLP_* variables itself. OTEL_SERVICE_NAME defaults to
// serviceName.
//
// The returned shutdown flushes the spans not yet exported, for up to 5 s when its ctx has no
// deadline; call it on exit.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	protocol, err := exporterProtocol(os.LookupEnv)
	if err != nil || protocol == "" {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, err
	}
	var exp sdktrace.SpanExporter
	if protocol == protocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: creating the OTLP exporter: %w", err)
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: describing the service: %w", err)
	}
	// The provider reads OTEL_TRACES_SAMPLER and the batch processor OTEL_BSP_* themselves.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flushing spans: %w", err)
		}
		return nil
	}, nil
}

// The OTLP protocols an exporter can speak.
const (
	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
)

// exporterProtocol tells from the environment whether tracing is on, and if so over which
// OTLP protocol spans are exported; "" means off.
func exporterProtocol(lookupEnv func(string) (string, bool)) (string, error) {
	get := func(k string) string { v, _ := lookupEnv(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return "", nil
	}
	switch exporter := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return "", nil
	case "otlp":
	case "":
		if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return "", nil
		}
	default:
		return "", fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q is not supported (otlp or none)", exporter)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := get(k); p {
		case "":
			continue
		case protocolHTTP, protocolGRPC:
			return p, nil
		default:
			return "", fmt.Errorf("tracing: %s %q is not supported (http/protobuf or grpc)", k, p)
		}
	}
	return protocolHTTP, nil
}
