package usage

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LevelInterval is how often a Level reads the account's storage.
const LevelInterval = 2 * time.Second

// Level follows how full the JetStream account's file storage is: the bytes it stores (every
// replica counted) against its max storage, read from JetStream's account info every
// LevelInterval. The max is the account's own limit, or that of the tier of its streams'
// replicas (R1, R3); an account without one (JetStream answers -1) is measured against a
// fallback, when one is given, and otherwise not at all.
type Level struct {
	js       jetstream.JetStream
	fallback int64
	tier     string
	log      *slog.Logger

	used, max atomic.Int64
}

// NewLevel returns a Level of the account of js. fallback is the max storage to measure against
// when the account has no limit (0: none); replicas is that of agentbus's streams.
func NewLevel(js jetstream.JetStream, fallback int64, replicas int, log *slog.Logger) *Level {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Level{js: js, fallback: fallback, tier: "R" + strconv.Itoa(max(replicas, 1)), log: log}
}

// Now is the storage used and the max it was last read as; max 0 means no max is known.
func (l *Level) Now() (used, max int64) { return l.used.Load(), l.max.Load() }

// Read reads the account's storage now.
func (l *Level) Read(ctx context.Context) error {
	ai, err := l.js.AccountInfo(ctx)
	if err != nil {
		return fmt.Errorf("reading account info: %w", err)
	}
	used, limit := int64(ai.Store), ai.Limits.MaxStore
	if limit <= 0 {
		if t, ok := ai.Tiers[l.tier]; ok && t.Limits.MaxStore > 0 {
			used, limit = int64(t.Store), t.Limits.MaxStore
		}
	}
	if limit <= 0 {
		limit = l.fallback
	}
	l.used.Store(used)
	l.max.Store(max(limit, 0))
	return nil
}

// Run reads the account's storage every LevelInterval until ctx ends. A read that fails keeps
// the last figures.
func (l *Level) Run(ctx context.Context) {
	t := time.NewTicker(LevelInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, LevelInterval)
		err := l.Read(rctx)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			l.log.Warn("reading the store's level", "err", err)
			failing = true
		case err == nil:
			failing = false
		}
	}
}
