package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP trace collector that hands what it receives to the test.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	got chan *coltracepb.ExportTraceServiceRequest
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.got <- req
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestSetupExports sends a span through Setup's exporter to a collector over each protocol and
// finds it there with the service name.
func TestSetupExports(t *testing.T) {
	for _, protocol := range []string{protocolHTTP, protocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			c := &collector{got: make(chan *coltracepb.ExportTraceServiceRequest, 10)}
			var endpoint string
			if protocol == protocolGRPC {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				srv := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(srv, c)
				go func() { _ = srv.Serve(ln) }()
				t.Cleanup(srv.Stop)
				endpoint = "http://" + ln.Addr().String()
			} else {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, err := io.ReadAll(r.Body)
					req := new(coltracepb.ExportTraceServiceRequest)
					if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(b, req) != nil {
						http.Error(w, "bad export", http.StatusBadRequest)
						return
					}
					c.got <- req
					w.Header().Set("Content-Type", "application/x-protobuf")
				}))
				t.Cleanup(srv.Close)
				endpoint = srv.URL
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_SERVICE_NAME", "agentbus-test")
			t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

			shutdown, err := Setup(t.Context(), "agentbus-ingress")
			require.NoError(t, err)
			_, span := Tracer(nil).Start(t.Context(), "a span")
			span.End()
			require.NoError(t, shutdown(t.Context()), "flushing")

			var req *coltracepb.ExportTraceServiceRequest
			select {
			case req = <-c.got:
			default:
				require.FailNow(t, "the collector received nothing")
			}
			require.NotEmpty(t, req.GetResourceSpans())
			rs := req.GetResourceSpans()[0]
			var service string
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			assert.Equal(t, "agentbus-test", service)
			require.NotEmpty(t, rs.GetScopeSpans())
			require.NotEmpty(t, rs.GetScopeSpans()[0].GetSpans())
			assert.Equal(t, "a span", rs.GetScopeSpans()[0].GetSpans()[0].GetName())
		})
	}
}
