package remote_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// Every test stops what it starts: NATS servers, stacks, the hosts of remote agents, endpoints.
func TestMain(m *testing.M) {
	// The conformance suite echoes bodies of up to 32 MiB through the remote Echo agents.
	stacktest.ClearShadowInPlace()
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}
