package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
	"github.com/agentbus/agentbus/pkg/usage"
)

// ShareWatches gives hc, where it names none, a directory of the agents and hosts
// (HostConfig.Directory), a cache of the tenants' limits (HostConfig.TenantLimits), a follower
// of the load reports and slot grants (HostConfig.Caps), one of the instance notices
// (HostConfig.Notices), a subscription to Agent2Agent replies (HostConfig.Replies), a relay
// of fired timers (HostConfig.TimerRelay), a usage meter (HostConfig.Meter), a budget for
// idle instance copies (HostConfig.IdleBudget) and a window of the requests acknowledged
// (HostConfig.Acked), for every host of the process made from hc to share: each watch of the
// hosts bucket reads every heartbeat of every host, each cache holds every tenant's record,
// each subscription receives every host's load report or every notice, each relay waits at
// the one relay consumer, each meter publishes its counts every second, each budget and window
// is memory the process holds, and each subscription costs the server and the process.
// closeAll closes what it made; call it once those hosts stopped. It is never nil: on an error,
// what could be made is in hc all the same.
func ShareWatches(ctx context.Context, res *bus.Resources, hc *HostConfig, log *slog.Logger) (closeAll func() error, err error) {
	var errs []error
	var toClose []func() error
	closeAll = func() error {
		var cerrs []error
		for _, c := range toClose {
			cerrs = append(cerrs, c())
		}
		return errors.Join(cerrs...)
	}
	if hc.Directory == nil {
		// Without the methods' schemas, which hosts never read: an ingress that shares the
		// hosts' directory (pkg/stack) gives them one with the schemas.
		if dir, err := registry.NewDirectory(ctx, res.Registry, res.Hosts, log, registry.WithoutSchemas()); err != nil {
			errs = append(errs, fmt.Errorf("a directory for the hosts to share: %w", err))
		} else {
			hc.Directory, toClose = dir, append(toClose, dir.Close)
		}
	}
	if hc.TenantLimits == nil {
		if limits, err := tenantlimits.Watch(ctx, res.TenantLimits, nil, log); err != nil {
			errs = append(errs, fmt.Errorf("tenant limits for the hosts to share: %w", err))
		} else {
			hc.TenantLimits, toClose = limits, append(toClose, limits.Close)
		}
	}
	if hc.Notices == nil {
		if notices, err := FollowNotices(res.JS.Conn()); err != nil {
			errs = append(errs, fmt.Errorf("instance notices for the hosts to share: %w", err))
		} else {
			hc.Notices, toClose = notices, append(toClose, notices.Close)
		}
	}
	if hc.Replies == nil {
		if replies, err := bus.NewReplies(res.JS.Conn(), "hosts-"+uuid.NewString(), log); err != nil {
			errs = append(errs, fmt.Errorf("a subscription to Agent2Agent replies for the hosts to share: %w", err))
		} else {
			hc.Replies, toClose = replies, append(toClose, replies.Close)
		}
	}
	if hc.IdleBudget == nil {
		hc.IdleBudget = NewIdleBudget(liveKeepBytes)
	}
	if hc.Acked == nil {
		hc.Acked = NewAckedWindow()
	}
	var closeMeter func() error
	if hc.Meter == nil {
		if m, err := usage.NewMeter(res.JS.Conn(), log); err != nil {
			errs = append(errs, fmt.Errorf("a usage meter for the hosts to share: %w", err))
		} else {
			mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
			var done sync.WaitGroup
			done.Go(func() { m.Run(mctx) })
			hc.Meter, closeMeter = m, func() error {
				stop()
				done.Wait()
				m.FlushLast(context.Background())
				return nil
			}
		}
	}
	if hc.TimerRelay == nil {
		hc.TimerRelay = RelayTimers(ctx, res, hc.Meter, log)
		toClose = append(toClose, hc.TimerRelay.Close)
	}
	if hc.Caps == nil {
		if caps, err := WatchCaps(ctx, res.JS.Conn(), res.SlotGrants); err != nil {
			errs = append(errs, fmt.Errorf("load reports and slot grants for the hosts to share: %w", err))
		} else {
			hc.Caps, toClose = caps, append(toClose, caps.Close)
		}
	}
	if closeMeter != nil {
		toClose = append(toClose, closeMeter) // last: the relay counts into it
	}
	return closeAll, errors.Join(errs...)
}

// TimerRelay moves fired timers to the agents' inboxes (schedule.Store.Relay) for the hosts of a
// process that share it (HostConfig.TimerRelay).
type TimerRelay struct {
	stop context.CancelFunc
	done sync.WaitGroup
	// meter is the relay's own meter, which Close publishes last (nil: none, or the process's).
	meter *usage.Meter
}

// RelayTimers relays the fired timers of every agent until Close, starting again a second after
// a failure; ctx's values are kept, not its end. It counts off the one-time timers that fired in
// their tenants' usage with m, the process's meter (HostConfig.Meter), which its owner runs;
// nil makes one of its own that the relay publishes until Close.
func RelayTimers(ctx context.Context, res *bus.Resources, m *usage.Meter, log *slog.Logger) *TimerRelay {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r := &TimerRelay{stop: stop}
	timers := schedule.NewStore(res.JS, res)
	if m == nil {
		var err error
		if m, err = usage.NewMeter(res.JS.Conn(), log); err != nil {
			log.Error("fired timers will not be counted off their tenants' usage", "err", err)
		} else {
			r.meter = m
			r.done.Go(func() { m.Run(rctx) })
		}
	}
	timers.Meter(m)
	r.done.Go(func() { relayTimers(rctx, timers, log) })
	return r
}

// Close stops the relay and returns once it stopped; a fired timer it took and did not move
// comes back to a relay.
func (r *TimerRelay) Close() error {
	r.stop()
	r.done.Wait()
	r.meter.FlushLast(context.Background())
	return nil
}
