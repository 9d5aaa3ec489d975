package ingress_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestIngressStartsThroughALostReply: an ingress whose request to begin one of the watches it
// starts with (of the hosts, the agents, the keys, the tenants' limits, the usage counters) goes
// unanswered, as a NATS cluster electing its leaders may leave it, tries again and starts, rather
// than fail its start.
func TestIngressStartsThroughALostReply(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	for _, stream := range []string{subject.KVStream(subject.HostsBucket), subject.KVStream(subject.RegistryBucket),
		subject.KVStream(subject.KeysBucket), subject.KVStream(subject.TenantLimitsBucket), subject.UsageStream} {
		t.Run(stream, func(t *testing.T) {
			t.Parallel()
			lossy := natstest.LoseFirst(s.NATS.Server, "$JS.API.CONSUMER.CREATE."+stream+".")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := ingress.New(ctx, ingress.Config{Conn: lossy.Connect(t, "ingress "+stream), Bus: bus.Config{Partitions: 4},
				Logger: stacktest.Logger(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })
			assert.EqualValues(t, 1, lossy.Dropped.Load(), "requests to begin the watch lost")
			assert.True(t, srv.KeyKnown(s.Key), "the ingress knows the stack's key")
		})
	}
}
