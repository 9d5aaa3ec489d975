package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
)

// ClosedError reports a NATS connection that was closed for good while its process was not
// stopping. nats.go closes a connection, instead of reconnecting, on a protocol error from the
// server (such as "maximum control line exceeded"), on the same authorization error twice in a
// row, on an unknown -ERR, or when its reconnect budget runs out; every *nats.Conn and
// JetStream handle of the process is then useless until the process starts again.
type ClosedError struct {
	// Name is the connection's name (nats.Name).
	Name string
	// Err is why nats.go closed it (the connection's last error); nats.ErrConnectionClosed when
	// it kept none.
	Err error
}

func (e *ClosedError) Error() string {
	if e.Name == "" {
		return "NATS connection closed: " + e.Err.Error()
	}
	return "NATS connection " + e.Name + " closed: " + e.Err.Error()
}

func (e *ClosedError) Unwrap() error { return e.Err }

// FailWhenClosed returns a context that ends with ctx, or earlier, with a *ClosedError as its
// cause (ClosedCause), when one of conns is closed while ctx is still live; it logs that cause
// at error level. A process that runs until the returned context ends and then returns
// ClosedCause exits non-zero when its NATS connection is lost for good, so that its supervisor
// starts it again: replacing the connection in place would mean replacing every handle built on
// it. A close once ctx has ended (a stopping process closes its connections) or after stop is
// not a failure: call stop before closing conns while ctx may still be live.
func FailWhenClosed(ctx context.Context, log *slog.Logger, conns ...*nats.Conn) (_ context.Context, stop context.CancelFunc) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	var once sync.Once
	fail := func(nc *nats.Conn, name string) {
		// ctx itself too: a watcher of ctx may close nc before ctx's end reaches fctx.
		if ctx.Err() != nil || fctx.Err() != nil {
			return
		}
		once.Do(func() {
			cause := nc.LastError()
			if cause == nil {
				cause = nats.ErrConnectionClosed
			}
			err := &ClosedError{Name: name, Err: cause}
			log.Error("NATS connection closed for good: stopping, so that the process is started again", "conn", name, "err", cause)
			cancel(err)
		})
	}
	for _, nc := range conns {
		name := nc.Opts.Name
		prev := nc.ClosedHandler()
		nc.SetClosedHandler(func(nc *nats.Conn) {
			if prev != nil {
				prev(nc)
			}
			fail(nc, name)
		})
		// Closed before the handler was in place: nats.go calls it no more.
		if nc.IsClosed() {
			fail(nc, name)
		}
	}
	return fctx, func() { cancel(context.Canceled) }
}

// ClosedCause returns the *ClosedError that ended ctx, a context of FailWhenClosed or one
// derived from it; nil when ctx has not ended or ended otherwise.
func ClosedCause(ctx context.Context) error {
	var ce *ClosedError
	if errors.As(context.Cause(ctx), &ce) {
		return ce
	}
	return nil
}
