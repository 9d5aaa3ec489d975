package idle_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
