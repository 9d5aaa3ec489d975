package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect dials a NATS server or cluster (comma-separated URLs) for a long-running service: it
// retries the first connection and reconnects forever, logging connection changes and the
// errors the server reports outside any call (LogAsyncErrors).
func Connect(urls, name string, log *slog.Logger) (*nats.Conn, error) {
	if urls == "" {
		return nil, errors.New("no NATS URL: set AGENTBUS_NATS_URL")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(urls,
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "server", nc.ConnectedUrlRedacted()) }),
		LogAsyncErrors(log),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	return nc, nil
}

// ReconnectWait is how long a connection Connect opened waits before it dials a server again
// that it last dialled less than that ago. It is well inside a workflow host's lease: a host whose
// one NATS server closed its connection reconnects to it before the others take it for dead.
const ReconnectWait = 500 * time.Millisecond

// asyncErrorEvery is how often LogAsyncErrors logs at most.
const asyncErrorEvery = time.Second

// LogAsyncErrors is a connection option that logs the errors NATS reports outside any call, which
// nats.go otherwise drops silently: a subscription too slow to keep up, whose messages (replies,
// deliveries) the client drops, or a permission the server refused. It logs at most one a
// second, with the subscription's subject and how many messages it has dropped so far, since a
// slow subscription reports every message it drops.
func LogAsyncErrors(log *slog.Logger) nats.Option {
	var last atomic.Int64 // when it last logged, in Unix nanoseconds
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		now, prev := time.Now().UnixNano(), last.Load()
		if prev != 0 && now-prev < int64(asyncErrorEvery) || !last.CompareAndSwap(prev, now) {
			return
		}
		attrs := []any{"err", err}
		if sub != nil {
			dropped, _ := sub.Dropped()
			attrs = append(attrs, "subject", sub.Subject, "dropped", dropped)
		}
		log.Warn("NATS reported an error", attrs...)
	})
}
