package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// Every test stops what it starts: stacks, servers, the load's clients.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}
