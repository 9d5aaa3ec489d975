package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// ensureWaits creates or updates the stream of waiting requests (agent.Wait): one subject per
// wait, holding the parked request and the requests of its conversation held behind it, at most
// subject.MaxHeld of them (a request held beyond is refused). A wait's subject is purged once it
// resumes; the age limit, as long as a request may wait in the inbox, removes what a host that
// died at the wrong moment left.
func ensureWaits(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	return ensureStream(ctx, js, jetstream.StreamConfig{
		Name:                 subject.WaitsStream,
		Description:          "agentbus requests waiting for an event, and the requests of their conversations held behind them",
		Subjects:             []string{subject.WaitsSubjects()},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             cfg.Replicas,
		MaxAge:               cfg.InboxMaxAge,
		MaxMsgsPerSubject:    1 + subject.MaxHeld,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           cfg.DedupeWindow,
		// A wait's requests are read from the stream's leader: a replica may lag.
		AllowDirect: false,
	})
}
