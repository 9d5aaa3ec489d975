package ingress_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it starts: NATS servers, hosts, watches and HTTP servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
