package stacktest

import (
	"fmt"
	"runtime"
	"strings"
)

// Goroutines returns the stacks of the goroutines running now whose stack names one of the
// given strings (a package path, a function), for the log of a test that waited in vain: what
// the hosts and their NATS connections were doing when it gave up.
func Goroutines(naming ...string) string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var kept []string
	all := strings.Split(string(buf), "\n\n")
	for _, g := range all {
		for _, s := range naming {
			if strings.Contains(g, s) {
				kept = append(kept, g)
				break
			}
		}
	}
	return fmt.Sprintf("%d of %d goroutines:\n%s", len(kept), len(all), strings.Join(kept, "\n\n"))
}
