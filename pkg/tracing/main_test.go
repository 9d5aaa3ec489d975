package tracing

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops the exporters and servers it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
