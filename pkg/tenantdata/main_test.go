package tenantdata_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// Every test stops what it starts: NATS servers, connections and readers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}
