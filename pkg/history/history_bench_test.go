package history_test

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
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Layout of the benchmark stream: benchTotal messages, of which every tenth (i%10 == 3) is the
// big thread's, one in 10,000 (i%10000 == 5000) the small thread's, and the rest belong to
// thread other-(i%10000): 8,999 threads of 100 messages. Both measured threads are interleaved
// with everything else.
const (
	benchTotal  = 1_000_000
	bigThread   = "big"
	smallThread = "small"
)

func benchThread(i int) string {
	switch {
	case i%10000 == 5000:
		return smallThread
	case i%10 == 3:
		return bigThread
	}
	return "other-" + strconv.Itoa(i%10000)
}

// BenchmarkNewestPage measures reading the newest page of 20 of a 100-message and a
// 100,000-message thread in a stream of 1,000,000 messages, and the page after it, in-process and
// over loopback TCP. The stream is filled once per run, before the sub-benchmarks (about 30 s on
// two cores); a run takes about a minute.
//
//	go test ./pkg/history -run '^$' -bench NewestPage -benchtime 2000x
func BenchmarkNewestPage(b *testing.B) {
	ctx := context.Background()
	srv := natstest.Server(b, "")
	nc := natstest.Conn(b, srv)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	require.NoError(b, err)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(b, err)
	start := time.Now()
	counts := fillBench(b, js)
	info, err := res.Messages.Info(ctx)
	require.NoError(b, err)
	b.Logf("filled %d messages (%d MB, %d subjects; thread %q has %d, %q %d) in %s",
		info.State.Msgs, info.State.Bytes>>20, info.State.NumSubjects,
		bigThread, counts[bigThread], smallThread, counts[smallThread], time.Since(start).Round(time.Millisecond))

	runtime.GC() // the fill's garbage is not the reads'

	// The embedded server is read both in-process (net.Pipe, as the tests and the standalone
	// binary do) and over loopback TCP (as services next to a NATS server do).
	tcp, err := nats.Connect(srv.ClientURL())
	require.NoError(b, err)
	defer tcp.Close()
	tcpJS, err := jetstream.New(tcp)
	require.NoError(b, err)
	tcpStream, err := tcpJS.Stream(ctx, subject.MessagesStream)
	require.NoError(b, err)
	stores := []struct {
		name  string
		store *history.Store
	}{
		{"inprocess", history.NewStore(res.Messages, res.Topics, js)},
		{"tcp", history.NewStore(tcpStream, res.Topics, tcpJS)},
	}
	for _, th := range []string{smallThread, bigThread} {
		first, next, err := stores[0].store.Page(ctx, tenant, wf, th, history.PageOptions{})
		require.NoError(b, err, "newest page of %s", th)
		require.Len(b, first, 20, "newest page of %s", th)
		require.NotZero(b, next, "newest page of %s: next", th)
		for i, m := range first {
			require.Equal(b, fmt.Sprintf("%s-%d", th, counts[th]-1-i), m.ID, "newest page of %s at %d", th, i)
		}
		for _, st := range stores {
			for _, bm := range []struct {
				name   string
				before uint64
			}{{"newest", 0}, {"older", next}} {
				b.Run(fmt.Sprintf("thread=%d/page=%s/conn=%s", counts[th], bm.name, st.name), func(b *testing.B) {
					benchPage(b, st.store, th, history.PageOptions{Before: bm.before})
				})
			}
		}
	}
}

// benchPage reads one page of a thread b.N times and reports its latency quantiles.
func benchPage(b *testing.B, store *history.Store, thread string, opt history.PageOptions) {
	ctx := context.Background()
	for range 20 { // warm the server's caches of these blocks
		_, _, err := store.Page(ctx, tenant, wf, thread, opt)
		require.NoError(b, err, "warming: page of %s", thread)
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		page, _, err := store.Page(ctx, tenant, wf, thread, opt)
		lat = append(lat, time.Since(t0))
		// Checked before asserting: testify's bookkeeping would add to every measured read.
		if err != nil || len(page) != 20 {
			require.NoError(b, err, "page of %s", thread)
			require.Len(b, page, 20, "page of %s", thread)
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// fillBench publishes benchTotal messages asynchronously with the headers Append would write.
// The stream is new and has no other writer, so message i gets sequence i+1; every ack is
// checked against that.
func fillBench(b *testing.B, js jetstream.JetStream) map[string]int {
	b.Helper()
	counts := map[string]int{}
	cursors := map[string]*history.Cursor{}
	const chunk = 20_000
	futures := make([]jetstream.PubAckFuture, 0, chunk)
	text := "a message of a typical chat length, about as long as one sentence"
	hdr := make([]byte, 0, 12*history.PrevDepth)
	for i := range benchTotal {
		th := benchThread(i)
		n := counts[th]
		counts[th]++
		cur := cursors[th]
		if cur == nil {
			cur = &history.Cursor{}
			cursors[th] = cur
		}
		body, err := json.Marshal(history.Message{
			ID: fmt.Sprintf("%s-%d", th, n), CreatedAt: time.Now(), MessageType: history.Chat, Text: &text,
			RequestID: "r-" + strconv.Itoa(i), ParticipantID: th, WorkflowID: wf,
		})
		require.NoError(b, err)
		m := &nats.Msg{Subject: subject.Thread(tenant, wf, th), Data: body, Header: nats.Header{}}
		if cur.LastSeq != 0 {
			hdr = strconv.AppendUint(hdr[:0], cur.LastSeq, 10)
			for _, p := range cur.Prev[:min(len(cur.Prev), history.PrevDepth-1)] {
				hdr = strconv.AppendUint(append(hdr, ','), p, 10)
			}
			m.Header.Set(subject.HeaderPrev, string(hdr))
		}
		f, err := js.PublishMsgAsync(m)
		require.NoError(b, err, "publishing message %d", i)
		futures = append(futures, f)
		seq := uint64(i + 1)
		if cur.LastSeq != 0 {
			cur.Prev = append([]uint64{cur.LastSeq}, cur.Prev[:min(len(cur.Prev), history.PrevDepth-1)]...)
		}
		cur.LastSeq = seq
		if len(futures) == chunk || i == benchTotal-1 {
			first := seq - uint64(len(futures)) + 1
			for j, f := range futures {
				select {
				case ack := <-f.Ok():
					require.Equal(b, first+uint64(j), ack.Sequence, "sequence of message %d", first+uint64(j)-1)
				case err := <-f.Err():
					require.Fail(b, "publishing", "message %d: %v", first+uint64(j)-1, err)
				}
			}
			futures = futures[:0]
		}
	}
	return counts
}
