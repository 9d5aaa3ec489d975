package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// puller keeps one partition of one agent consumed: it creates the partition's durable consumer
// and pulls from it, and when the consumption stops on its own (the consumer was deleted or
// recreated with other settings, the server restarted without it) it creates it again.
type puller struct {
	h     *Host
	js    jetstream.JetStream
	agent string
	p     int
	name  string
}

func (pl *puller) config() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       pl.name,
		FilterSubject: subject.Partition(pl.agent, pl.p),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       pl.h.cfg.AckWait,
		MaxDeliver:    -1, // an accepted request is never dropped
		MaxAckPending: 4096,
		// Only one host pulls a partition at a time, so one conversation is never handled by
		// two hosts at once.
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{priorityGroup},
		PinnedTTL:      pinnedTTL,
		// The inbox is a work queue: acknowledged requests leave the stream, so a consumer that
		// loses its state in a full restart only re-reads what is still unacknowledged. Keeping
		// the state in memory spares a file write per partition ten times a second.
		MemoryStorage: true,
	}
}

// start creates the consumer and begins pulling into the host's dispatcher.
func (pl *puller) start(ctx, hctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := pl.js.CreateOrUpdateConsumer(ctx, subject.InboxStream, pl.config())
	if err != nil {
		return nil, fmt.Errorf("creating consumer of %s partition %d: %w", pl.agent, pl.p, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { pl.h.dispatch(hctx, m) },
		jetstream.PullMaxMessages(128),
		jetstream.PullPriorityGroup(priorityGroup),
		jetstream.PullExpiry(pullExpiry),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				pl.h.log.Warn("consuming inbox", "agent", pl.agent, "partition", pl.p, "err", err)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("consuming %s partition %d: %w", pl.agent, pl.p, err)
	}
	return cc, nil
}

// run pulls until ctx ends, then drains what was pulled. started receives the outcome of the
// first start; after that, failures are retried with backoff.
func (pl *puller) run(ctx, hctx context.Context, started chan<- error) {
	cc, err := pl.start(ctx, hctx)
	started <- err
	if err != nil {
		return
	}
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			cc.Drain()
			<-cc.Closed()
			return
		case <-cc.Closed():
		}
		pl.h.log.Warn("inbox consumption stopped; starting it again", "agent", pl.agent, "partition", pl.p)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if cc, err = pl.start(ctx, hctx); err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			pl.h.log.Warn("restarting inbox consumption", "agent", pl.agent, "partition", pl.p, "err", err)
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}
