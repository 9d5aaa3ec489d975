package agent_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// droppingServer is an in-process server whose connections drop, while drop is set, the messages
// the server sends them on subjects that begin with prefix: a watch of those subjects then lags,
// as one does while nats.go makes its consumer again after a NATS node died.
type droppingServer struct {
	srv    interface{ InProcessConn() (net.Conn, error) }
	prefix []byte
	drop   atomic.Bool
}

func (p *droppingServer) InProcessConn() (net.Conn, error) {
	real, err := p.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	client, mine := net.Pipe()
	go func() { _, _ = io.Copy(real, mine); _ = real.Close() }()
	go func() { p.filter(mine, real); _ = mine.Close() }()
	return client, nil
}

// filter copies the server's protocol to dst, leaving out the MSG and HMSG operations whose
// subject begins with prefix while drop is set. Both end with the length of what follows them.
func (p *droppingServer) filter(dst io.Writer, src io.Reader) {
	r := bufio.NewReaderSize(src, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		out := append([]byte(nil), line...)
		if bytes.HasPrefix(line, []byte("MSG ")) || bytes.HasPrefix(line, []byte("HMSG ")) {
			f := bytes.Fields(line)
			n, err := strconv.Atoi(string(f[len(f)-1]))
			if err != nil {
				return
			}
			body := make([]byte, n+2) // and its CRLF
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if p.drop.Load() && bytes.HasPrefix(f[1], p.prefix) {
				continue
			}
			out = append(out, body...)
		}
		if _, err := dst.Write(out); err != nil {
			return
		}
	}
}

// A host whose watch of the heartbeats lags behind the bucket takes nothing over from a host
// its watch shows as silent, even when that host is paused; once the watch has caught up it
// does, and the paused host, back, is fenced: the request changes the state once.
func TestLaggingWatchTakesNothingOver(t *testing.T) {
	fa := newIncAgent("Lag")
	const ackWait = 30 * time.Second
	s := stacktest.Start(t, stacktest.Options{Partitions: 1}) // no host of its own

	ds := &droppingServer{srv: s.NATS.Server, prefix: []byte("$KV." + subject.HostsBucket + ".")}
	startHost(t, s, agent.HostConfig{ID: "taker", Conn: connectVia(t, ds, "taker"), Agents: []*agent.Agent{fa.agent()}, AckWait: ackWait})
	g := newGate()
	id := idOwning("Lag", 1, 0, "taker")
	fa.paused.Store(id)
	h, _, _ := startHost(t, s, agent.HostConfig{ID: id, Conn: connectVia(t, gatedServer{s.NATS.Server, g}, id),
		Agents: []*agent.Agent{fa.agent()}, AckWait: ackWait, ShutdownGrace: time.Second})
	waitFor(t, 10*time.Second, "the holder owns the partition", func() bool {
		return len(h.Partitions()["Lag"]) == 1 && settled(t, s, "Lag", 1, []string{"taker", id})
	})
	wf := enqueueInc(t, s, "Lag", "l", "inc-1")
	waitFor(t, 5*time.Second, "the holder starts the request", func() bool { return fa.runs(id) == 1 })
	takeovers := func() string { // the partition's takeover count
		e, err := s.Res.Tenures.Get(t.Context(), subject.TenureKey("Lag", 0))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return "0"
		}
		require.NoError(t, err)
		return string(e.Value())
	}

	// The taker's watch stops delivering heartbeats, and the holder pauses: the taker's
	// directory reads the bucket when no heartbeat arrives (its own, written, is fresh there),
	// and counts the holder, whose heartbeats stopped, dead.
	ds.drop.Store(true)
	g.set(true)
	paused := time.Now()
	time.Sleep(3*time.Second + 3*time.Second)
	assert.Equal(t, "0", takeovers(), "a takeover counted while the watch lagged")
	assert.Zero(t, fa.runs("taker"), "the request ran on the taker while its watch lagged")

	// The watch catches up: the holder's last heartbeat is old, and the taker takes over.
	ds.drop.Store(false)
	took := waitFor(t, 8*time.Second, "the taker runs the request", func() bool { return fa.runs("taker") == 1 })
	t.Logf("the taker ran the request %v after the watch caught up (%v after the pause)", took.Round(time.Millisecond),
		time.Since(paused).Round(time.Millisecond))
	assert.Equal(t, "1", takeovers())

	close(fa.release)
	g.set(false) // the holder comes back: its late write is refused
	waitFor(t, 10*time.Second, "the holder's late write is refused", func() bool { return fa.late() != nil })
	time.Sleep(time.Second)
	assert.Equal(t, 1, stateCount(t, s, wf), "the request changed the state more than once")
}
