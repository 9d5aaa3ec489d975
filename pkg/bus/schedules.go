package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// ensureTimers creates or updates the stream of one shard of the agents' timers
// (subject.TimerShard). Each timer is a JetStream message schedule (the Nats-Schedule header) on
// its own subject, which the server fires into the same stream when it is due; a host relays the
// fired message to the inbox and removes it. The inbox cannot hold the schedules itself: JetStream schedules need a stream
// that discards old messages and allows roll-ups, and the inbox discards new ones (a full inbox
// refuses requests instead of dropping those it holds).
func ensureTimers(ctx context.Context, js jetstream.JetStream, cfg Config, shard int) (jetstream.Stream, error) {
	return ensureStream(ctx, js, jetstream.StreamConfig{
		Name:              subject.TimerStream(shard),
		Description:       "agentbus timers: one message schedule per subject, and fired messages until relayed",
		Subjects:          []string{subject.TimerSubjects(shard)},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		Duplicates:        cfg.DedupeWindow,
		AllowMsgSchedules: true,
		AllowMsgTTL:       true,
		AllowRollup:       true,
		AllowDirect:       true,
	})
}

// openLegacyTimers opens AGENTBUS_SCHEDULES, the stream of the timers a release before the timer
// shards set, where that release made it; nil where none did (a deployment made since). It is
// not made, so that a deployment without it reads no second stream for every timer it sets: a
// process of that release started later makes it, and processes of this one started before do
// not read it (docs/bus.md#timer-shards).
func openLegacyTimers(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, subject.SchedulesStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", subject.SchedulesStream, err)
	}
	return s, nil
}
