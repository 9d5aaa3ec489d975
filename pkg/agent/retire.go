package agent

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// adoptInactiveThreshold gives the host's ConsumerInactiveThreshold to every partition consumer
// of the inbox that has none, whatever its agent: consumers made by a version of agentbus that
// set no threshold would otherwise stay for good once no host of their agent runs, since no host
// makes them again. It runs once, at the host's start; consumers it cannot update are logged
// and left for the next host that starts.
func (h *Host) adoptInactiveThreshold(ctx context.Context) {
	var without []jetstream.ConsumerConfig
	list := h.res.Inbox.ListConsumers(ctx)
	for info := range list.Info() { // read to the end: the lister's goroutine waits for each read
		if info.Config.InactiveThreshold == 0 && subject.IsPartitionConsumer(info.Config.Durable) {
			without = append(without, info.Config)
		}
	}
	if err := list.Err(); err != nil {
		if ctx.Err() == nil {
			h.log.Warn("listing the inbox consumers", "err", err)
		}
		return
	}
	adopted := 0
	for _, cfg := range without {
		cfg.InactiveThreshold = h.cfg.ConsumerInactiveThreshold
		if _, err := h.res.Inbox.UpdateConsumer(ctx, cfg); err != nil {
			if ctx.Err() == nil {
				h.log.Warn("setting the inactive threshold of an inbox consumer", "consumer", cfg.Durable, "err", err)
			}
			break
		}
		adopted++
	}
	if adopted > 0 {
		h.log.Info("set the inactive threshold of inbox consumers that had none", "consumers", adopted, "threshold", h.cfg.ConsumerInactiveThreshold)
	}
}
