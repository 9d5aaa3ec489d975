//go:build unix

package agent_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// stepCounts are the webhook calls of BenchmarkStep: their handlers make 0, 1 and 10 steps.
var stepCounts = []int{0, 1, 10}

// stepCostAgent's webhook method steps makes k steps (query parameter k) of a function that
// does nothing.
func stepCostAgent() *agent.Agent {
	a := agent.New("StepCost")
	names := make([]string, stepCounts[len(stepCounts)-1])
	for i := range names {
		names[i] = "step " + strconv.Itoa(i+1)
	}
	nothing := func(context.Context) (int, error) { return 1, nil }
	a.WebhookFunc("steps", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		k, err := strconv.Atoi(r.Params["k"])
		if err != nil || k < 0 || k > len(names) {
			return agent.JSON(http.StatusBadRequest, "k: 0 to "+strconv.Itoa(len(names)))
		}
		for _, name := range names[:k] {
			if _, err := agent.Step(ctx, name, nothing); err != nil {
				return agent.Fail(err)
			}
		}
		return agent.JSON(http.StatusOK, k)
	})
	return a
}

// BenchmarkStep measures what a durable step costs through the whole stack (embedded NATS on a
// file store, the ingress over loopback HTTP, one host): webhook calls on one conversation, one at
// a time from an idle stack, whose handler makes 0, 1 or 10 steps of a function that does nothing.
// An op is one call of each, their order turning from op to op. It reports each kind's time per
// call as the caller sees it (µs/call-kN) and the CPU time of this process (the stack and the
// client) per call until the request's journal is purged, and from them the time a step adds:
// µs/step and cpu-µs/step from 10 steps against 1, µs/first-step and cpu-µs/first-step from 1 step
// against none (a request that made steps has its journal purged once it is answered).
//
// Before the timed calls it counts, at the server, 20 calls of each kind: the journal's records
// written, its reads and its purges (as TestNoStepNoJournalWork does) per step or per call, and
// every NATS message per step and per call without steps.
//
// In empty-journal each request's purge empties the journal, as when a request with steps runs
// alone: the file store removes the journal's block file, and the next record writes a new one.
// In shared-journal the journal holds the record of a request that is never answered
// throughout, as when requests with steps overlap.
func BenchmarkStep(b *testing.B) {
	b.Run("empty-journal", func(b *testing.B) { benchmarkStep(b, false) })
	b.Run("shared-journal", func(b *testing.B) { benchmarkStep(b, true) })
}

func benchmarkStep(b *testing.B, shared bool) {
	s := stacktest.Start(b, stacktest.Options{Agents: []*agent.Agent{stepCostAgent()}})
	client := &http.Client{Transport: &http.Transport{}}
	b.Cleanup(client.CloseIdleConnections)
	base := s.URL + "/api/user/webhooks/StepCost/steps?apikey=" + s.Key + "&k="

	// purged receives the purge of each request that made steps, for the CPU of a call to
	// include it.
	purged := make(chan struct{}, 64)
	nc := natstest.Conn(b, s.NATS)
	_, err := nc.Subscribe("$JS.API.STREAM.PURGE."+subject.StepsStream, func(*nats.Msg) { purged <- struct{}{} })
	require.NoError(b, err)
	require.NoError(b, nc.Flush())
	// call makes a call of k steps and returns the time its caller waited. It returns once the
	// request's journal is purged and the stack has been idle a while, for the CPU of the host's
	// work after the answer to count with the call.
	call := func(k int) time.Duration {
		start := time.Now()
		resp, err := client.Post(base+strconv.Itoa(k), "application/json", nil)
		require.NoError(b, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		waited := time.Since(start)
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode, "%s", body)
		if k > 0 {
			select {
			case <-purged:
			case <-time.After(5 * time.Second):
				require.FailNow(b, "the journal of a call with steps was not purged")
			}
		}
		time.Sleep(time.Millisecond)
		return waited
	}

	if shared {
		_, err := s.Res.JS.Publish(b.Context(), subject.Step("default", "unanswered", "unanswered", 1), []byte(`{"name":"x"}`))
		require.NoError(b, err)
	}

	// The bus work of each kind of call, counted; this warms the stack up too.
	const counted = 20
	w := watchJournal(b, s)
	var msgs atomic.Int64
	_, err = w.nc.Subscribe(">", func(m *nats.Msg) {
		// The server sends an advisory of each JetStream API call only while someone listens.
		if !strings.HasPrefix(m.Subject, "$JS.EVENT.") {
			msgs.Add(1)
		}
	})
	require.NoError(b, err)
	require.NoError(b, w.nc.Flush())
	type work struct{ records, reads, purges, msgs float64 }
	counts := map[int]work{}
	for _, k := range stepCounts {
		before := work{float64(w.records.Load()), float64(w.reads.Load()), float64(w.purges.Load()), float64(msgs.Load())}
		for range counted {
			call(k)
		}
		require.NoError(b, w.nc.Flush())
		time.Sleep(50 * time.Millisecond) // the watch's callbacks run behind its connection
		counts[k] = work{(float64(w.records.Load()) - before.records) / counted, (float64(w.reads.Load()) - before.reads) / counted,
			(float64(w.purges.Load()) - before.purges) / counted, (float64(msgs.Load()) - before.msgs) / counted}
	}
	w.nc.Close()

	wall := map[int]time.Duration{}
	cpu := map[int]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		for j := range stepCounts {
			k := stepCounts[(i+j)%len(stepCounts)]
			c := processCPU(b)
			wall[k] += call(k)
			cpu[k] += processCPU(b) - c
		}
	}
	b.StopTimer()

	perCall := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(b.N) }
	for _, k := range stepCounts {
		b.ReportMetric(perCall(wall[k]), "µs/call-k"+strconv.Itoa(k))
	}
	b.ReportMetric(perCall(cpu[0]), "cpu-µs/call-k0")
	b.ReportMetric(perCall(wall[10]-wall[1])/9, "µs/step")
	b.ReportMetric(perCall(cpu[10]-cpu[1])/9, "cpu-µs/step")
	b.ReportMetric(perCall(wall[1]-wall[0]), "µs/first-step")
	b.ReportMetric(perCall(cpu[1]-cpu[0]), "cpu-µs/first-step")
	b.ReportMetric(counts[10].records/10, "writes/step")
	b.ReportMetric(counts[10].reads/10, "reads/step")
	b.ReportMetric(counts[1].purges, "purges/call-k1")
	b.ReportMetric(counts[0].records+counts[0].reads+counts[0].purges, "journal-ops/call-k0")
	b.ReportMetric((counts[10].msgs-counts[1].msgs)/9, "msgs/step")
	b.ReportMetric(counts[0].msgs, "msgs/call-k0")
	b.ReportMetric(0, "ns/op") // an op is three calls: the figures above are per call
}

// processCPU is the CPU time, user and system, this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
