package natstest

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// APIErrors counts, by error code, the JetStream API errors that servers answer requests with,
// as seen on the requesters' reply subjects: a test that sets writers racing can tell whether
// the race met the answer it is about, whatever the code under test makes of it.
type APIErrors struct {
	mu     sync.Mutex
	counts map[jetstream.ErrorCode]int
}

// WatchAPIErrors starts counting the API errors answered to requests whose reply subject is a
// default inbox (_INBOX.>, as nats.go's requests use), with a connection of its own to urls. It
// stops when the test ends.
func WatchAPIErrors(t testing.TB, urls string) *APIErrors {
	t.Helper()
	nc, err := nats.Connect(urls, nats.Name(t.Name()+" API errors"))
	require.NoError(t, err, "connecting to NATS")
	t.Cleanup(nc.Close)
	return WatchAPIErrorsOn(t, nc)
}

// WatchAPIErrorsOn is WatchAPIErrors on a connection the test has, such as the one of a
// Bus, which sees the answers to every connection's requests. It unsubscribes when the test
// ends.
func WatchAPIErrorsOn(t testing.TB, nc *nats.Conn) *APIErrors {
	t.Helper()
	a := &APIErrors{counts: make(map[jetstream.ErrorCode]int)}
	errCode := []byte(`"err_code"`)
	sub, err := nc.Subscribe(nats.InboxPrefix+">", func(m *nats.Msg) {
		if !bytes.Contains(m.Data, errCode) {
			return
		}
		var resp struct {
			Error *jetstream.APIError `json:"error"`
		}
		if json.Unmarshal(m.Data, &resp) != nil || resp.Error == nil {
			return
		}
		a.mu.Lock()
		a.counts[resp.Error.ErrorCode]++
		a.mu.Unlock()
	})
	require.NoError(t, err, "subscribing to replies")
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush(), "subscribing to replies")
	return a
}

// Count returns how many answers carried the error code so far.
func (a *APIErrors) Count(code jetstream.ErrorCode) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counts[code]
}
