package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect dials a NATS server or cluster (comma-separated URLs) for a long-running service: it
// retries the first connection and reconnects forever, logging connection changes.
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
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "server", nc.ConnectedUrlRedacted()) }),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	return nc, nil
}
