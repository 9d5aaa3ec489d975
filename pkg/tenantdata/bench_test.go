package tenantdata_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tenantdata"
)

// BenchmarkErase erases a tenant whose conversations hold AGENTBUS_BENCH_ERASE_MESSAGES history
// records (100,000 by default) over 1,000 threads, beside another tenant with as many, and
// reports how long the erasure took, the wait for the usage meters' flush (a little over a
// second, usage.EraseTenant) included. Each iteration stores them again first, untimed.
//
//	go test ./pkg/tenantdata -run '^$' -bench Erase -benchtime 3x
func BenchmarkErase(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("AGENTBUS_BENCH_ERASE_MESSAGES")); err == nil && v > 0 {
		n = v
	}
	res := natstest.Bus(b, bus.Config{})
	ctx := context.Background()
	fill := func(tenant string) {
		futures := make([]jetstream.PubAckFuture, 0, 4096)
		wait := func() {
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					require.NoError(b, err)
				}
			}
			futures = futures[:0]
		}
		for i := range n {
			f, err := res.JS.PublishAsync(subject.Thread(tenant, fmt.Sprintf("%s:Echo:wf:%d", tenant, i%1000), "ada"), make([]byte, 200))
			require.NoError(b, err)
			futures = append(futures, f)
			if len(futures) == cap(futures) {
				wait()
			}
		}
		wait()
	}
	fill("other")
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		fill("acme")
		b.StartTimer()
		start := time.Now()
		require.NoError(b, tenantdata.Erase(ctx, res, "acme"))
		took += time.Since(start)
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "s/erasure")
}
