package conformance_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// Every test stops what it starts: stacks, servers, clients.
func TestMain(m *testing.M) {
	// The suite echoes bodies of up to 32 MiB.
	stacktest.ClearShadowInPlace()
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}
