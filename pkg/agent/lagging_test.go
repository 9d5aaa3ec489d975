package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
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
	var (
		mu      sync.Mutex
		lateErr error
		ran     = map[string]int{}
	)
	release := make(chan struct{})
	var pausedID atomic.Value
	pausedID.Store("")
	newAgent := func() *agent.Agent {
		a := agent.New("Lag")
		a.WebhookFunc("inc", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
			host := r.Instance().HostID()
			mu.Lock()
			ran[host]++
			mu.Unlock()
			if host == pausedID.Load() {
				<-release
			}
			type state struct{ Count int }
			s, err := agent.UpdateState(ctx, r.Instance(), func(s *state) error { s.Count++; return nil })
			if err != nil {
				mu.Lock()
				lateErr = err
				mu.Unlock()
				return agent.Status(http.StatusInternalServerError)
			}
			return agent.JSON(http.StatusOK, map[string]int{"count": s.Count})
		})
		return a
	}
	const ackWait = 30 * time.Second
	s := stacktest.Start(t, stacktest.Options{Partitions: 1}) // no host of its own

	ds := &droppingServer{srv: s.NATS.Server, prefix: []byte("$KV." + subject.HostsBucket + ".")}
	tnc, err := nats.Connect("", nats.Name("taker"), nats.InProcessServer(ds), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(tnc.Close)
	startHost(t, s, agent.HostConfig{ID: "taker", Conn: tnc, Agents: []*agent.Agent{newAgent()}, AckWait: ackWait})

	g := newGate()
	id := idOwning("Lag", 1, 0, "taker")
	pausedID.Store(id)
	hnc, err := nats.Connect("", nats.Name(id), nats.InProcessServer(gatedServer{s.NATS.Server, g}), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(hnc.Close)
	h, _, _ := startHost(t, s, agent.HostConfig{ID: id, Conn: hnc, Agents: []*agent.Agent{newAgent()}, AckWait: ackWait, ShutdownGrace: time.Second})
	waitFor(t, 10*time.Second, "the holder owns the partition", func() bool {
		return len(h.Partitions()["Lag"]) == 1 && settled(t, s, "Lag", 1, []string{"taker", id})
	})

	js, err := jetstream.New(natstest.Conn(t, s.NATS))
	require.NoError(t, err)
	const wf = "default:Lag:Supervisor Workflow:l"
	enqueue(t, js, &agentbusv1.Request{RequestId: "inc-1", TenantId: "default", WorkflowId: wf, AgentName: "Lag",
		WorkflowType: "Supervisor Workflow", ActivationName: "l", ParticipantId: "p", Kind: agentbusv1.Kind_KIND_WEBHOOK,
		Method: "inc", CreatedAtMs: time.Now().UnixMilli()}, nil)
	waitFor(t, 5*time.Second, "the holder starts the request", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran[id] == 1
	})
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
	mu.Lock()
	assert.Zero(t, ran["taker"], "the request ran on the taker while its watch lagged")
	mu.Unlock()

	// The watch catches up: the holder's last heartbeat is old, and the taker takes over.
	ds.drop.Store(false)
	took := waitFor(t, 8*time.Second, "the taker runs the request", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran["taker"] == 1
	})
	t.Logf("the taker ran the request %v after the watch caught up (%v after the pause)", took.Round(time.Millisecond),
		time.Since(paused).Round(time.Millisecond))
	assert.Equal(t, "1", takeovers())

	close(release)
	g.set(false) // the holder comes back: its late write is refused
	waitFor(t, 10*time.Second, "the holder's late write is refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lateErr != nil
	})
	time.Sleep(time.Second)
	rec, err := instance.NewStore(s.Res.Instances).Get(t.Context(), "default", wf)
	require.NoError(t, err)
	var st struct{ Count int }
	require.NoError(t, json.Unmarshal(rec.State, &st))
	assert.Equal(t, 1, st.Count, "the request changed the state %d times", st.Count)
}
