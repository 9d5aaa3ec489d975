package instance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// BenchmarkInstanceListing measures the first page (50) of one agent's instances in one tenant,
// newest run first, with 10,000 and then 1,000,000 instances: the run index and the instance
// records are written straight to an embedded NATS server on a temporary store (about a minute
// for the million on two cores), then the page is read b.N times at each size.
//
//	go test ./pkg/instance -run '^$' -bench InstanceListing -benchtime 200x -timeout 30m
func BenchmarkInstanceListing(b *testing.B) {
	ctx := context.Background()
	srv := natstest.Server(b, "")
	nc := natstest.Conn(b, srv)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	require.NoError(b, err)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(b, err)
	store := instance.NewStore(res.Instances)
	x := instance.NewIndex(js, res.Runs)

	f := &benchFill{js: js, base: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}
	for _, n := range []int{10_000, 1_000_000} {
		start := time.Now()
		f.fillTo(b, n)
		runtime.GC() // the fill's garbage is not the reads'
		b.Logf("filled %d instances in %s", n, time.Since(start).Round(time.Millisecond))
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			for range 20 { // warm the server's caches of these blocks
				_, _, err := x.List(ctx, store, benchTenant, benchAgent, instance.ListOptions{Limit: 50})
				require.NoError(b, err)
			}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				page, next, err := x.List(ctx, store, benchTenant, benchAgent, instance.ListOptions{Limit: 50})
				lat = append(lat, time.Since(t0))
				if err != nil || len(page) != 50 || next == (instance.Cursor{}) || page[0].Entry.WorkflowID != benchWorkflow(n-1) {
					require.NoError(b, err)
					require.Len(b, page, 50)
					require.NotZero(b, next)
					require.Equal(b, benchWorkflow(n-1), page[0].Entry.WorkflowID, "the newest first")
				}
			}
			slices.Sort(lat)
			q := func(p float64) float64 {
				return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1e3
			}
			b.ReportMetric(q(0.50), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
		})
	}
}

const (
	benchTenant = "acme"
	benchAgent  = "Echo"
)

func benchWorkflow(i int) string {
	return benchTenant + ":" + benchAgent + ":Supervisor Workflow:user-" + strconv.Itoa(i)
}

// benchFill writes instances: for instance i an index entry (with the Agentbus-Prev header
// Index.Add writes) and a running record. The index stream is new and has no other writer, so
// entry i gets sequence i+1; every acknowledgement is checked against that.
type benchFill struct {
	js   jetstream.JetStream
	base time.Time
	n    int
	// last and prev are the index subject's newest sequence and those before it.
	last uint64
	prev []uint64
}

func (f *benchFill) fillTo(b *testing.B, n int) {
	b.Helper()
	const chunk = 20_000
	runs := make([]jetstream.PubAckFuture, 0, chunk)
	recs := make([]jetstream.PubAckFuture, 0, chunk)
	hdr := make([]byte, 0, 12*instance.PrevDepth)
	idxSubj := subject.Runs(benchTenant, benchAgent)
	for ; f.n < n; f.n++ {
		i := f.n
		wf := benchWorkflow(i)
		at := f.base.Add(time.Duration(i) * time.Millisecond)
		runID := fmt.Sprintf("run-%08d", i)
		entry, err := json.Marshal(instance.Entry{WorkflowID: wf, RunID: runID, StartedAt: at})
		require.NoError(b, err)
		m := &nats.Msg{Subject: idxSubj, Data: entry, Header: nats.Header{}}
		if f.last != 0 {
			hdr = strconv.AppendUint(hdr[:0], f.last, 10)
			for _, p := range f.prev[:min(len(f.prev), instance.PrevDepth-1)] {
				hdr = strconv.AppendUint(append(hdr, ','), p, 10)
			}
			m.Header.Set(subject.HeaderPrev, string(hdr))
		}
		fut, err := f.js.PublishMsgAsync(m)
		require.NoError(b, err)
		runs = append(runs, fut)
		if f.last != 0 {
			f.prev = append([]uint64{f.last}, f.prev[:min(len(f.prev), instance.PrevDepth-1)]...)
		}
		f.last = uint64(i + 1)

		rec, err := json.Marshal(instance.Record{Tenant: benchTenant, WorkflowID: wf, RunID: runID, Status: instance.Running,
			StartedAt: at, LastActiveAt: at, Events: 3, State: json.RawMessage(`{"count":3}`), Indexed: true})
		require.NoError(b, err)
		fut, err = f.js.PublishAsync(subject.KVKeyPrefix(subject.InstancesBucket)+subject.InstanceKey(benchTenant, wf), rec)
		require.NoError(b, err)
		recs = append(recs, fut)

		if len(runs) == chunk || f.n == n-1 {
			first := f.last - uint64(len(runs)) + 1
			for j, fut := range runs {
				select {
				case ack := <-fut.Ok():
					require.Equal(b, first+uint64(j), ack.Sequence, "sequence of entry %d", first+uint64(j)-1)
				case err := <-fut.Err():
					require.Fail(b, "publishing", "entry %d: %v", first+uint64(j)-1, err)
				}
			}
			for _, fut := range recs {
				select {
				case <-fut.Ok():
				case err := <-fut.Err():
					require.Fail(b, "publishing", "record: %v", err)
				}
			}
			runs, recs = runs[:0], recs[:0]
		}
	}
}
