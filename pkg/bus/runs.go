package bus

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// ensureRuns creates or updates the run index (package instance's Index): one small record per
// run started, kept for as long as the instances are (no age limit).
func ensureRuns(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	return ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        subject.RunsStream,
		Description: "agentbus index of workflow runs, one subject per tenant and agent",
		Subjects:    []string{subject.RunsSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
	})
}

// LeaderLast reads the last message of a stream on a subject (wildcards allowed: the newest of
// those matching) from the stream's leader, which has every message stored so far (a direct get
// may be answered by a replica that lags). It answers jetstream.ErrMsgNotFound when the subject
// has none.
func LeaderLast(ctx context.Context, nc *nats.Conn, stream, subj string) (*jetstream.RawStreamMsg, error) {
	return leaderMsgGet(ctx, nc, stream, msgGetRequest{LastBySubj: subj})
}
