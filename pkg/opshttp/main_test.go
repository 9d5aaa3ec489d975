package opshttp_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops the servers it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
