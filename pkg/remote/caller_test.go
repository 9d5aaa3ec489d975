package remote

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// An endpoint that dies after sending its answer's status line and headers, before the whole
// body (a process killed between the two writes, a connection reset), failed: the request is
// tried again. Only an answer read whole that is not a protocol answer fails the request (502).
func TestPostAnswerCutOff(t *testing.T) {
	cases := []struct {
		name string
		// raw is what the endpoint writes before it closes the connection.
		raw   string
		reset bool // close with a reset (RST) rather than a FIN
		retry bool
	}{
		{name: "JSON cut off", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"response\":{\"status\":200,", retry: true},
		{name: "JSON cut off by a reset", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"response\":", reset: true, retry: true},
		{name: "headers only", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n", retry: true},
		{name: "stream cut off", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e\r\n{\"delta\":\"a\"}\n\r\n", retry: true},
		{name: "not JSON", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\nnot json"},
		{name: "stream without an answer", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e\r\n{\"delta\":\"a\"}\n\r\n0\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				writeRaw(t, buf, tc.raw)
				if tc.reset {
					_ = conn.(*net.TCPConn).SetLinger(0)
				}
			}))
			t.Cleanup(srv.Close)
			c := newCaller(Registration{Name: "Cut", URL: srv.URL, TimeoutSeconds: 5, MaxConcurrent: 4, Secret: webhooksig.NewStandardSecret()},
				nil, slog.New(slog.DiscardHandler))
			t.Cleanup(c.close)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var deltas []string
			_, err := c.post(ctx, &Request{Protocol: ProtocolVersion, Type: "Webhook", RequestID: "r1", Attempt: 1, Stream: true},
				func(d string) { deltas = append(deltas, d) })
			require.Error(t, err)
			assert.Equal(t, tc.retry, agent.IsRetryable(err), "retryable: %v", err)
			var failed *agent.Error
			if tc.retry {
				assert.ErrorIs(t, err, errEndpoint)
				assert.ErrorIs(t, err, errAnswerCut)
			} else if assert.True(t, errors.As(err, &failed), "%v", err) {
				assert.Equal(t, http.StatusBadGateway, failed.Status)
			}
		})
	}
}

func writeRaw(t *testing.T, w *bufio.ReadWriter, raw string) {
	t.Helper()
	if _, err := w.WriteString(raw); err != nil {
		t.Error(err)
	}
	if err := w.Flush(); err != nil {
		t.Error(err)
	}
}
