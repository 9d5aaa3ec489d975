package proctest_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
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
// hosts show their overhead rather than a speed-up. A benchmark (its figures are printed, not
// judged), run only when asked for, once:
//
//	AGENTBUS_PROCESS_TEST=1 go test -run '^$' -bench ThroughputByHosts -benchtime 1x ./pkg/proctest
func BenchmarkProcessesThroughputByHosts(b *testing.B) {
	bins := needProcesses(b)
	for range b.N {
		throughputByHosts(b, bins)
	}
}

func throughputByHosts(b *testing.B, bins proctest.Bins) {
	nats := proctest.StartNATS(b, bins, proctest.NATSOptions{})
	sys := newSystem(b, bins, nats.URL)
	var ids []string
	for n := 1; n <= 3; n++ {
		id := fmt.Sprintf("host-%d", n)
		sys.startHost(id)
		ids = append(ids, id)
		sys.waitSettled(ids, 30*time.Second)
		sys.waitServing(10 * time.Second)

		ctx := proctest.Context(b, 2*time.Minute)
		cmd := exec.CommandContext(ctx, bins.Bench, "-url", sys.ingress.URL, "-phase", "both",
			"-duration", "4s", "-warmup", "1s", "-clients", "64", "-instances", "1000")
		cmd.Env = append(cmd.Environ(), "AGENTBUS_BENCH_KEY="+sys.key)
		out, err := cmd.Output()
		require.NoError(b, err, "bench: %s", out)
		m := ratioLine.FindStringSubmatch(string(out))
		require.NotNil(b, m, "bench printed no ratio:\n%s", out)
		var rows []string
		for line := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(line, "bare") || strings.HasPrefix(line, "agentbus ") {
				rows = append(rows, strings.Join(strings.Fields(line), " "))
			}
		}
		b.Logf("%d host(s): webhook echo ratio agentbus/bare %s  [%s]", n, m[1], strings.Join(rows, "; "))
		if r, err := strconv.ParseFloat(m[1], 64); err == nil {
			b.ReportMetric(r, fmt.Sprintf("ratio-%d-hosts", n))
		}
	}
}
