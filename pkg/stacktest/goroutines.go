package stacktest

import (
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/gostack"
)

// Goroutines returns the stacks of the goroutines running now whose stack names one of the
// given strings (a package path, a function), for the log of a test that waited in vain: what
// the hosts and their NATS connections were doing when it gave up.
func Goroutines(naming ...string) string {
	all := gostack.All()
	kept := gostack.Filter(all, naming...)
	return fmt.Sprintf("%d of %d goroutines:\n%s", len(kept), len(all), strings.Join(kept, "\n\n"))
}
