package agent_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// Every test stops what it starts: NATS servers, hosts, watches and HTTP servers. Each test has
// a NATS server of its own. The tests that mostly wait (for a heartbeat to expire, an ack wait, a
// takeover) run in parallel (t.Parallel); the ones that measure memory or goroutines, or time how
// late a reminder fires or how soon a joining host owns its share, run alone.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}
