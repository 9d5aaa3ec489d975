package ingress_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// Every test stops what it starts: NATS servers, hosts, watches and HTTP servers. Every answer
// the tests get is checked against the OpenAPI document (checkedRun).
func TestMain(m *testing.M) {
	// The tests send and receive bodies of up to 32 MiB.
	stacktest.ClearShadowInPlace()
	goleak.VerifyTestMain(checkedRun{m}, natstest.IgnoredLeaks()...)
}

// checkedRun runs the tests with traffic as http.DefaultTransport, then fails the run when an
// answer did not fit the document or, when every test ran, when a documented (operation,
// status) pair was never produced.
type checkedRun struct{ m *testing.M }

func (r checkedRun) Run() int {
	base := http.DefaultTransport.(*http.Transport)
	var err error
	if traffic, err = newTrafficValidator(base); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	http.DefaultTransport = traffic
	code := r.m.Run()
	http.DefaultTransport = base
	// goleak must not find the connections the tests left idle.
	base.CloseIdleConnections()
	if !traffic.report(os.Stderr, wholePackageRan()) && code == 0 {
		code = 1
	}
	return code
}
