package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

func TestExporterProtocol(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		protocol string // "" is off
		err      bool
	}{
		{name: "nothing set"},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, protocol: "http/protobuf"},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, protocol: "http/protobuf"},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, protocol: "http/protobuf"},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
		{name: "grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, protocol: "grpc"},
		{name: "http/json", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: true},
		{name: "traces protocol first", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, protocol: "http/protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			protocol, err := exporterProtocol(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.protocol, protocol)
		})
	}
}

func TestInjectExtract(t *testing.T) {
	h := nats.Header{}
	Inject(context.Background(), h)
	assert.Empty(t, h, "no span context, no headers")

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	assert.Equal(t, "00-01020300000000000000000000000000-0405060000000000-01", h.Get("traceparent"))
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	assert.True(t, got.IsRemote())
	assert.Equal(t, sc.TraceID(), got.TraceID())
	assert.Equal(t, sc.SpanID(), got.SpanID())
}
