package agent

import (
	"context"
	"log/slog"
	"slices"

	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// requestLog returns the logger of one request: base with the request's id and workflow id,
// which are only formatted when a record is written. Most requests log nothing, and
// Logger.With would format and copy them for every one.
func requestLog(base *slog.Logger, req *agentbusv1.Request) *slog.Logger {
	return slog.New(&requestHandler{base: base.Handler(), req: req})
}

// requestHandler adds a request's attributes to the records it hands to base, first, as
// base.WithAttrs would have, then those of the Logger.With calls on it (extra): these too are
// only formatted when a record is written.
type requestHandler struct {
	base  slog.Handler
	req   *agentbusv1.Request
	extra []slog.Attr
	// seq and delivered name the inbox delivery being processed, when there is one: its stream
	// sequence and how often the inbox delivered it. They tell a request's redelivery (the same
	// seq, delivered again) from a second copy of it in the inbox (another seq).
	seq, delivered uint64
}

func (h *requestHandler) attrs() []slog.Attr {
	a := []slog.Attr{slog.String("requestId", h.req.GetRequestId()), slog.String("workflowId", h.req.GetWorkflowId())}
	if h.seq != 0 {
		a = append(a, slog.Uint64("seq", h.seq), slog.Uint64("delivered", h.delivered))
	}
	return a
}

func (h *requestHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.base.Enabled(ctx, level)
}

func (h *requestHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(h.attrs()...)
	out.AddAttrs(h.extra...)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return h.base.Handle(ctx, out)
}

func (h *requestHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &requestHandler{base: h.base, req: h.req, extra: append(slices.Clip(h.extra), attrs...), seq: h.seq, delivered: h.delivered}
}

func (h *requestHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.base.WithAttrs(h.attrs()).WithAttrs(h.extra).WithGroup(name)
}
