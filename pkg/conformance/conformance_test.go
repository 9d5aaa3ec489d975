package conformance_test

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/conformance"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestGoEcho runs the suite against the stack with the Go Echo.
func TestGoEcho(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	conformance.Run(t, conformance.Target{URL: s.URL, Key: s.Key, Tenant: "default"})
}
