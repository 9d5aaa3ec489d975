package agent

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// A wait's subject takes the parked request and subject.MaxHeld held ones; the next is refused
// with the error heldFull tells, and other errors are not taken for it.
func TestHeldFull(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t, t.TempDir())
	js := natstest.JetStream(t, srv)
	_, err := bus.Ensure(t.Context(), js, bus.Config{})
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

// eventOf: a Chat message ends a wait for chat, a Data call one for its method (whatever its
// case), a signal one for its name; a File, a webhook call, or a message a timer sent ends none.
func TestEventOf(t *testing.T) {
	t.Parallel()
	w := &instance.Wait{Chat: true, Methods: []string{"approve"}, Signals: []string{"go"}}
	for _, c := range []struct {
		name string
		req  *agentbusv1.Request
		ends bool
		ev   Event
	}{
		{"chat", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_CHAT, Text: "yes"}, true, Event{Type: EventChat, Text: "yes"}},
		{"data", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_DATA, Method: "Approve", Data: []byte(`{"ok":true}`)}, true,
			Event{Type: EventData, Method: "Approve", Data: json.RawMessage(`{"ok":true}`)}},
		{"other method", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_DATA, Method: "reject"}, false, Event{}},
		{"signal", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_DATA, Signal: "go"}, true, Event{Type: EventSignal, Method: "go"}},
		{"file", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_FILE, Text: "a.txt"}, false, Event{}},
		{"webhook", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_WEBHOOK, Method: "approve"}, false, Event{}},
		{"timer's chat", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_CHAT, Text: "tick", Timer: "t1"}, false, Event{}},
		{"timer's data", &agentbusv1.Request{Kind: agentbusv1.Kind_KIND_DATA, Method: "approve", Timer: "t1"}, false, Event{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, ends := eventOf(c.req, w)
			assert.Equal(t, c.ends, ends)
			if ends {
				ev.At = time.Time{}
				assert.Equal(t, c.ev, ev)
			}
		})
	}
	assert.Equal(t, msgkind.Chat.Event, EventChat, "the table's name of a chat event")
	assert.Equal(t, msgkind.Data.Event, EventData, "the table's name of a data event")
}
