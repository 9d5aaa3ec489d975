package pages_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
)

// The browser tests stop what they start: the stacks, the browsers and chromedp's goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}
