package bus

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// GoneAfter is how long a stopping process waits for NATS to be reachable again before it stops
// waiting for anything that needs NATS: the client tries to reconnect every half second, so a
// server that restarts or a connection that moves to another node comes back within it.
const GoneAfter = time.Second

// WhenGone returns a channel that is closed once nc has not been connected for GoneAfter
// without a break (at once when nc is closed), and a func that stops watching. The watch
// starts with the call: a connection lost earlier counts from then.
func WhenGone(nc *nats.Conn) (gone <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var since time.Time
		for {
			switch {
			case nc.IsClosed():
				close(ch)
				return
			case nc.IsConnected():
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			case time.Since(since) >= GoneAfter:
				close(ch)
				return
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return ch, func() { once.Do(func() { close(done) }) }
}

// CloseWhenStopping closes nc, once ctx has ended, as soon as NATS is gone (WhenGone) or bound
// has passed since ctx ended. A process that stops then waits for nothing that needs NATS:
// requests, flushes and the deletion of consumers fail at once instead of waiting for their own
// timeouts, so that it exits within its bound. What it could not tell NATS comes back by
// redelivery. The returned func stops watching; call it before closing nc yourself.
func CloseWhenStopping(ctx context.Context, nc *nats.Conn, bound time.Duration, log *slog.Logger) (stop func()) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		gone, stopWatch := WhenGone(nc)
		defer stopWatch()
		timer := time.NewTimer(bound)
		defer timer.Stop()
		select {
		case <-done:
			return
		case <-gone:
			if !nc.IsClosed() {
				log.Warn("NATS unreachable while stopping: closing the connection; what was not handed over comes back by redelivery",
					"waited", GoneAfter)
			}
		case <-timer.C:
			log.Warn("stop bound reached: closing the NATS connection", "bound", bound)
		}
		nc.Close()
	}()
	return func() {
		select {
		case <-done:
		default:
			close(done)
		}
		<-finished
	}
}
