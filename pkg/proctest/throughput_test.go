package proctest_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// ratioLine is bench's summary line of one run.
var ratioLine = regexp.MustCompile(`ratio agentbus/bare req/s: ([0-9.]+)`)

// Webhook echo throughput with one, two and three workflow host processes behind one ingress,
// each as a ratio of a bare net/http handler's in the same bench run. On a 2-core machine more
// hosts show their overhead rather than a speed-up; the figures are printed, not asserted.
func TestProcessesThroughputByHosts(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	var ids []string
	for n := 1; n <= 3; n++ {
		id := fmt.Sprintf("host-%d", n)
		sys.startHost(id)
		ids = append(ids, id)
		sys.waitSettled(ids, 30*time.Second)
		sys.waitServing(10 * time.Second)

		ctx := proctest.Context(t, 2*time.Minute)
		cmd := exec.CommandContext(ctx, bins.Bench, "-url", sys.ingress.URL, "-phase", "both",
			"-duration", "4s", "-warmup", "1s", "-clients", "64", "-instances", "1000")
		cmd.Env = append(cmd.Environ(), "AGENTBUS_BENCH_KEY="+sys.key)
		out, err := cmd.Output()
		require.NoError(t, err, "bench: %s", out)
		m := ratioLine.FindStringSubmatch(string(out))
		require.NotNil(t, m, "bench printed no ratio:\n%s", out)
		var rows []string
		for line := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(line, "bare") || strings.HasPrefix(line, "agentbus ") {
				rows = append(rows, strings.Join(strings.Fields(line), " "))
			}
		}
		t.Logf("%d host(s): webhook echo ratio agentbus/bare %s  [%s]", n, m[1], strings.Join(rows, "; "))
	}
}
