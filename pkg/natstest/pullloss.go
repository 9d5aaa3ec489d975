package natstest

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
)

// PullLoss is agentbus's bus on a new server twice: over a connection that loses nothing, and
// over one that loses a request for a consumer's next messages on its way to the server.
type PullLoss struct {
	// Res is the bus over the connection that loses nothing.
	Res *bus.Resources
	// Lossy is the bus over Proxy's connection, which drops its nth request for next messages
	// (of a stream's consumers, when one is named).
	Lossy *bus.Resources
	Proxy *Proxy
	// Requests counts the requests for next messages that Lossy's connection sent (of the
	// stream named).
	Requests atomic.Int64
}

// LosePullRequest starts a server for the test and returns the bus over a plain connection and
// over one, named name, whose nth request for a consumer's next messages is dropped: of any
// consumer, or of a consumer of stream when it is not empty.
func LosePullRequest(t testing.TB, name, stream string, nth int64) *PullLoss {
	t.Helper()
	srv := Server(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ensure := func(js jetstream.JetStream, err error) *bus.Resources {
		t.Helper()
		require.NoError(t, err, "creating a JetStream context")
		res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
		require.NoError(t, err, "creating agentbus resources")
		return res
	}
	l := &PullLoss{Res: ensure(jetstream.New(Conn(t, srv)))}
	next := []byte("$JS.API.CONSUMER.MSG.NEXT.")
	if stream != "" {
		next = append(next, stream+"."...)
	}
	l.Proxy = &Proxy{Server: srv.Server, Drop: func(toServer bool, subj []byte) bool {
		return toServer && bytes.HasPrefix(subj, next) && l.Requests.Add(1) == nth
	}}
	l.Lossy = ensure(jetstream.New(l.Proxy.Connect(t, name)))
	return l
}
