package outbound

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes the servers and the connections it opens.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
