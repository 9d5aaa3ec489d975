package bus_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestInboxPartitionIsTheServersTransform: subject.InboxPartition names the partition the
// server's inbox transform stores each request in, for workflow ids of every shape.
func TestInboxPartitionIsTheServersTransform(t *testing.T) {
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const partitions = 13
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: partitions})
	require.NoError(t, err)
	inbox, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)

	type sent struct{ tenant, wf string }
	var all []sent
	for i := range 200 {
		tenant := []string{"default", "other", "t-" + strconv.Itoa(i%7)}[i%3]
		wf := fmt.Sprintf("%s:Echo:Supervisor Workflow:act %d.x:é", tenant, i)
		all = append(all, sent{tenant, wf})
		_, err := js.Publish(ctx, subject.Inbox("Echo", tenant, wf, "p"), nil)
		require.NoError(t, err)
	}
	seen := map[int]bool{}
	for i, s := range all {
		raw, err := inbox.GetMsg(ctx, uint64(i+1))
		require.NoError(t, err)
		stored, err := subject.ParseStoredInbox(raw.Subject)
		require.NoError(t, err)
		require.Equal(t, s.wf, stored.WorkflowID)
		want := subject.InboxPartition(s.tenant, s.wf, partitions)
		assert.Equal(t, strconv.Itoa(want), stored.Partition, "workflow %q", s.wf)
		seen[want] = true
	}
	assert.Len(t, seen, partitions, "the requests spread over every partition")
}
