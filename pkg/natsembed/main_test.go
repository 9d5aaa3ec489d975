package natsembed_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// Every test stops the servers and clusters it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}
