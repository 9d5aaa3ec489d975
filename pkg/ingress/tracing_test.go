package ingress_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestTraceFromCallerToHandler follows one webhook call's trace: the caller's traceparent is the
// parent of the ingress's server span, whose context travels in the NATS headers to the host's
// handler span.
func TestTraceFromCallerToHandler(t *testing.T) {
	t.Parallel()
	exp, tp := memoryTracer(t)
	s := stacktest.Start(t, stacktest.Options{Tracer: tp})

	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		callerID = "00f067aa0ba902b7"
	)
	wf := "default:Echo:Supervisor Workflow:traced"
	status, _, b := call(t, s.URL, wf, "echo", q("apikey", s.Key), []byte(`{"a":1}`),
		"traceparent", "00-"+traceID+"-"+callerID+"-01")
	require.Equal(t, http.StatusOK, status, "%s", b)

	server, handler := serverAndHandlerSpans(t, exp)

	assert.Equal(t, "POST /api/user/webhooks/{workflow}/{method}", server.Name)
	assert.Equal(t, traceID, server.SpanContext.TraceID().String(), "server span's trace")
	assert.Equal(t, callerID, server.Parent.SpanID().String(), "server span's parent is the caller's")
	assert.True(t, server.Parent.IsRemote(), "server span's parent is remote")
	assert.Equal(t, map[attribute.Key]attribute.Value{
		"http.request.method":       attribute.StringValue("POST"),
		"http.route":                attribute.StringValue("/api/user/webhooks/{workflow}/{method}"),
		"http.response.status_code": attribute.IntValue(200),
		"agentbus.tenant":           attribute.StringValue("default"),
	}, attrs(server.Attributes), "server span's attributes")

	assert.Equal(t, "handle Echo webhook echo", handler.Name)
	assert.Equal(t, traceID, handler.SpanContext.TraceID().String(), "handler span's trace")
	assert.Equal(t, server.SpanContext.SpanID(), handler.Parent.SpanID(), "handler span's parent is the server span")
	got := attrs(handler.Attributes)
	assert.NotEmpty(t, got["agentbus.request_id"].AsString(), "requestId")
	delete(got, "agentbus.request_id")
	assert.Equal(t, map[attribute.Key]attribute.Value{
		"agentbus.agent":       attribute.StringValue("Echo"),
		"agentbus.kind":        attribute.StringValue("webhook"),
		"agentbus.method":      attribute.StringValue("echo"),
		"agentbus.workflow_id": attribute.StringValue(wf),
		"agentbus.attempt":     attribute.IntValue(1),
	}, got, "handler span's attributes")
	assert.Equal(t, "Unset", handler.Status.Code.String(), "handler span's status")
}

// A replayed dead letter continues the trace of the replay request: the host's handler span is a
// child of the ingress's server span of POST .../deadletters/{id}/replay, which continues the
// operator's traceparent.
func TestTraceOfDeadLetterReplay(t *testing.T) {
	t.Parallel()
	exp, tp := memoryTracer(t)
	flaky := &failing{name: "Flaky"}
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Agents: []*agent.Agent{flaky.agent()},
		Host: agent.HostConfig{MaxDeliveries: 2}, Tracer: tp})
	require.NoError(t, s.WaitLive(t.Context(), "Flaky"))
	id := killLetter(t, s, s.Key, "default:Flaky:Supervisor Workflow:traced", "mendable")
	flaky.mended.Store(true)
	// The dead request's own spans ended when the host gave it up.
	require.Eventually(t, func() bool {
		for _, sp := range exp.GetSpans() {
			if sp.SpanKind == trace.SpanKindConsumer {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the dead request's handler span")
	exp.Reset()

	const (
		traceID    = "0af7651916cd43dd8448eb211c80319c"
		operatorID = "b7ad6b7169203331"
	)
	status, _, b := adminReq(t, s, http.MethodPost, deadLetterOf("default", id)+"/replay", s.Key, nil,
		"traceparent", "00-"+traceID+"-"+operatorID+"-01")
	require.Equal(t, http.StatusAccepted, status, "%s", b)

	server, handler := serverAndHandlerSpans(t, exp)
	assert.EqualValues(t, 1, flaky.runs.Load(), "the replayed request ran")

	assert.Equal(t, "POST /api/v1/admin/tenants/{tenantId}/deadletters/{id}/replay", server.Name)
	assert.Equal(t, traceID, server.SpanContext.TraceID().String(), "replay span's trace")
	assert.Equal(t, operatorID, server.Parent.SpanID().String(), "replay span's parent is the operator's")

	assert.Equal(t, "handle Flaky webhook mendable", handler.Name)
	assert.Equal(t, traceID, handler.SpanContext.TraceID().String(), "handler span's trace is the replay's")
	assert.Equal(t, server.SpanContext.SpanID(), handler.Parent.SpanID(), "handler span's parent is the replay span")
	assert.True(t, handler.Parent.IsRemote(), "handler span's parent came over the bus")
	assert.Equal(t, "Unset", handler.Status.Code.String(), "handler span's status")
}

// memoryTracer is a tracer provider whose spans go to the returned exporter as they end.
func memoryTracer(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// A tool call of a chat is a span under the chat's handler span.
func TestTraceOfToolCall(t *testing.T) {
	t.Parallel()
	exp, tp := memoryTracer(t)
	s := stacktest.Start(t, stacktest.Options{Tracer: tp})
	status, _, b := converse(t, s, q("workflow", "Echo", "type", "Chat", "text", `call sum {"values":[1]}`, "apikey", s.Key), "")
	require.Equal(t, http.StatusOK, status, "%s", b)

	var handler, tool tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, sp := range exp.GetSpans() {
			switch sp.Name {
			case "handle Echo chat":
				handler = sp
			case "tool sum":
				tool = sp
			}
		}
		return handler.Name != "" && tool.Name != ""
	}, 10*time.Second, 10*time.Millisecond, "spans: %v", exp.GetSpans().Snapshots())
	assert.Equal(t, handler.SpanContext.SpanID(), tool.Parent.SpanID(), "the tool span's parent is the handler span")
	assert.Equal(t, "sum", attrs(tool.Attributes)["agentbus.method"].AsString())
}

// serverAndHandlerSpans waits for the exporter to hold one server span (the ingress's) and one
// consumer span (the host's handler) and returns them. The host ends its span once the request
// is acknowledged, which may be after the answer.
func serverAndHandlerSpans(t *testing.T, exp *tracetest.InMemoryExporter) (server, handler tracetest.SpanStub) {
	t.Helper()
	require.Eventually(t, func() bool {
		var found int
		for _, sp := range exp.GetSpans() {
			switch sp.SpanKind {
			case trace.SpanKindServer:
				server, found = sp, found+1
			case trace.SpanKindConsumer:
				handler, found = sp, found+1
			}
		}
		return found == 2
	}, 10*time.Second, 10*time.Millisecond, "spans: %v", exp.GetSpans().Snapshots())
	return server, handler
}
