package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// MaxStepRecord bounds the record of one durable step (agent.Step): its name and its result or
// error, encoded. The steps stream refuses larger messages (with room for their headers).
const MaxStepRecord = 260 << 10

// ensureSteps creates or updates the journal of durable steps: one subject per step of a request
// still being handled (subject.Step). A request's steps are purged once it is answered; the age
// limit, as long as a request may wait in the inbox, removes those of a request whose host died
// between answering it and purging them.
func ensureSteps(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	return ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        subject.StepsStream,
		Description: "agentbus journal of durable steps, one subject per step of a request being handled",
		Subjects:    []string{subject.StepsSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.InboxMaxAge,
		MaxMsgSize:  MaxStepRecord + 1<<10,
		Duplicates:  cfg.DedupeWindow,
		// Whether a step ran is read from the stream's leader (LeaderLast): a replica may lag.
		AllowDirect: false,
	})
}
