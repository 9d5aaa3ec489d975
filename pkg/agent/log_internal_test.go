package agent

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"

	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// requestLog writes what Logger.With of the request's attributes writes, in the same order, also
// under further attributes and groups.
func TestRequestLogWritesAsWith(t *testing.T) {
	req := &agentbusv1.Request{RequestId: "r-1", WorkflowId: "acme:Echo:Supervisor Workflow:a b"}
	opts := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	write := func(log func(base *slog.Logger) *slog.Logger) string {
		var buf bytes.Buffer
		base := slog.New(slog.NewTextHandler(&buf, opts)).With("host", "h1")
		l := log(base)
		l.Warn("retrying", "attempt", 2, "err", errors.New("boom"))
		l.With("method", "sum").Info("answered", "status", 200)
		l.With("method", "sum").With("attempt", 3).WithGroup("call").Warn("failed", "code", 502)
		l.WithGroup("call").Error("failed", "code", 500)
		l.Debug("not written")
		return buf.String()
	}
	want := write(func(base *slog.Logger) *slog.Logger {
		return base.With("requestId", req.GetRequestId(), "workflowId", req.GetWorkflowId())
	})
	got := write(func(base *slog.Logger) *slog.Logger { return requestLog(base, req) })
	assert.Equal(t, want, got)
	assert.Contains(t, got, `requestId=r-1 workflowId="acme:Echo:Supervisor Workflow:a b" attempt=2`)

	// A delivery's logger names its inbox sequence and delivery count after the request.
	want = write(func(base *slog.Logger) *slog.Logger {
		return base.With("requestId", req.GetRequestId(), "workflowId", req.GetWorkflowId(), "seq", uint64(42), "delivered", uint64(2))
	})
	got = write(func(base *slog.Logger) *slog.Logger {
		return slog.New(&requestHandler{base: base.Handler(), req: req, seq: 42, delivered: 2})
	})
	assert.Equal(t, want, got)
	assert.Contains(t, got, `workflowId="acme:Echo:Supervisor Workflow:a b" seq=42 delivered=2 attempt=2`)
}
