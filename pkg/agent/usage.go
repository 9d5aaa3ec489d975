package agent

import (
	"context"

	"github.com/agentbus/agentbus/pkg/usage"
)

// meterUsage makes the host count what it stores for each tenant (package usage): the history
// records it appends, the large replies it stores by claim check (and the request claims it
// deletes), the dead letters it keeps, the timers it sets and cancels, and the instances it
// creates. It never refuses a write: a request that reached the host was accepted, and the ingress
// bounds what a tenant gets accepted (docs/limits.md). The meter is the process's
// (HostConfig.Meter), else the host's own, which runUsage publishes.
func (h *Host) meterUsage() error {
	m := h.cfg.Meter
	if m == nil {
		var err error
		if m, err = usage.NewMeter(h.cfg.Conn, h.log); err != nil {
			return err
		}
	}
	h.usage = m
	h.claims.Meter(m)
	h.dead.Meter(m)
	h.timers.Meter(m)
	h.history.Meter(m)
	h.live.store.Meter(m)
	return nil
}

// runUsage publishes the counts of the host's own meter every usage.FlushInterval until ctx
// ends, and then, once the handlers are done, the last ones, unless the stop has given up on
// the bus.
func (h *Host) runUsage(ctx context.Context) {
	h.usage.Run(ctx)
	h.usage.FlushLast(h.bctx)
}
