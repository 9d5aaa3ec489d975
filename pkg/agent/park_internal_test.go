package agent

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A wait's subject takes the parked request and subject.MaxHeld held ones; the next is refused
// with the error heldFull tells, and other errors are not taken for it.
func TestHeldFull(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t, t.TempDir())
	js, err := jetstream.New(natstest.Conn(t, srv))
	require.NoError(t, err)
	_, err = bus.Ensure(t.Context(), js, bus.Config{})
	require.NoError(t, err)

	subj := subject.Wait("t", subject.WaitID("t:A:W:a", "r", 1))
	futures := make([]jetstream.PubAckFuture, 0, subject.MaxHeld+1)
	for i := range subject.MaxHeld + 1 {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			require.NoError(t, err)
		}
	}
	_, err = js.Publish(t.Context(), subj, []byte("one more"))
	require.Error(t, err)
	assert.True(t, heldFull(err), "%v", err)
	// Another wait's subject still takes requests.
	_, err = js.Publish(t.Context(), subject.Wait("t", subject.WaitID("t:A:W:a", "r", 2)), []byte("x"))
	require.NoError(t, err)
	assert.False(t, heldFull(jetstream.ErrMsgNotFound))
}
