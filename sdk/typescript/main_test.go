package typescript_test

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

func TestMain(m *testing.M) {
	// The conformance suite echoes bodies of up to 32 MiB through the TypeScript Echo.
	stacktest.ClearShadowInPlace()
	m.Run()
}
