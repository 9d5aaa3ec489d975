package gogc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// A memory limit's floor guard (Limit) runs a goroutine until its stop func is called.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
