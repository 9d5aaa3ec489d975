package natstest

import "go.uber.org/goleak"

// IgnoredLeaks are the goroutines that goleak.VerifyTestMain must not count in a package whose
// tests use NATS, each for a reason outside this project.
//
// nats.go v1.55's jetstream starts resetPendingAcksOnReconnect on a connection's first
// asynchronous publish (the object store publishes a file's chunks that way) and it ends when
// the connection reports CLOSED. Its listener is registered after the reply subscription, with
// no check that the connection is still open, so a publish racing the connection's Close (a
// test ending while a request still stores a file) registers it after CLOSED was sent and the
// goroutine waits forever (seen once in twelve runs of pkg/ingress). A connection left open is
// still caught: its read and flush loops leak with it.
func IgnoredLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	}
}
