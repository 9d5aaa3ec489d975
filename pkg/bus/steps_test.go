package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// The steps journal is a file-stored stream of the configured replicas whose records last as
// long as a request may wait in the inbox, and which refuses a record larger than MaxStepRecord.
func TestEnsureStepsStream(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	res, err := bus.Ensure(ctx, js, bus.Config{InboxMaxAge: time.Hour})
	require.NoError(t, err)
	require.NotNil(t, res.Steps)
	c := res.Steps.CachedInfo().Config
	assert.Equal(t, subject.StepsStream, c.Name)
	assert.Equal(t, []string{subject.StepsSubjects()}, c.Subjects)
	assert.Equal(t, jetstream.FileStorage, c.Storage)
	assert.Equal(t, 1, c.Replicas)
	assert.Equal(t, time.Hour, c.MaxAge)
	assert.Greater(t, c.MaxMsgSize, int32(bus.MaxStepRecord))

	subj := subject.Step("default", "wf", "r-1", 1)
	_, err = js.Publish(ctx, subj, make([]byte, bus.MaxStepRecord))
	require.NoError(t, err, "a record of the largest size")
	_, err = js.Publish(ctx, subject.Step("default", "wf", "r-1", 2), make([]byte, bus.MaxStepRecord+2<<10))
	require.Error(t, err, "a record larger than the largest")

	// A step is recorded only while its subject is empty (agent.Step's records expect it so).
	first := subject.Step("default", "wf", "r-2", 1)
	record := func() error {
		m := nats.NewMsg(first)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		_, err := bus.Publish(ctx, js, m)
		return err
	}
	require.NoError(t, record())
	assert.True(t, bus.IsConflict(record()), "a second record of a step")
}
