package natstest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Proxy connects clients in process to a NATS server through a filter of their protocol, for
// tests of what a client does when messages are lost or its connection stalls. It passes the
// protocol on operation by operation: while paused nothing passes either way (a client cut off
// from NATS, or stopped with SIGSTOP), and a message Drop reports is left out.
//
// Each way holds up to bufferedOps operations read and not yet passed on, as a socket's buffers
// do: a writer blocks only once they are full, not while its reader is busy. (net.Pipe, which
// the in-process connections are, holds nothing: a client's write blocks until the server reads
// it, and nats.go writes holding its connection's lock, which its reader needs to answer a PING,
// so a client and a server each writing to the other could wait on each other.)
// When either way ends, both ends close, as a socket's do.
type Proxy struct {
	// Server is where the connections go: a NATS server (*server.Server), or another Proxy.
	Server nats.InProcessConnProvider
	// Drop, when set, is asked about every message: those the client publishes (toServer, PUB
	// and HPUB) and those the server delivers to it (MSG and HMSG), by subject. A message it
	// reports true for is not passed on, and counted in Dropped.
	Drop func(toServer bool, subject []byte) bool
	// Dropped counts the messages left out.
	Dropped atomic.Int64

	mu     sync.Mutex
	paused bool
	cond   *sync.Cond
	// closers close the connections through p that are open, by their end on p's side.
	closers map[net.Conn]func()
}

// LoseFirst is a Proxy to server that leaves out the first message a client publishes on a
// subject that begins with prefix, as a NATS cluster electing its leaders may lose a request:
// its reply never comes. Everything else passes; Dropped counts the one left out.
func LoseFirst(server nats.InProcessConnProvider, prefix string) *Proxy {
	var lost atomic.Bool
	want := []byte(prefix)
	return &Proxy{Server: server, Drop: func(toServer bool, subj []byte) bool {
		return toServer && bytes.HasPrefix(subj, want) && lost.CompareAndSwap(false, true)
	}}
}

// Connect connects to the server through p; the connection is closed when the test ends. It
// reconnects as a service's connection does (bus.Connect): forever, bus.ReconnectWait apart.
func (p *Proxy) Connect(t testing.TB, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("", nats.Name(name), nats.InProcessServer(p), nats.MaxReconnects(-1),
		nats.ReconnectWait(bus.ReconnectWait))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// Cut closes every connection through p, as a NATS server that dies closes its clients'
// connections: what was on its way is lost, and the clients connect again (through p).
func (p *Proxy) Cut() {
	p.mu.Lock()
	closers := p.closers
	p.closers = nil
	p.mu.Unlock()
	for _, closeBoth := range closers {
		closeBoth()
	}
}

// Pause stops all traffic through p, both ways, until Resume.
func (p *Proxy) Pause() { p.set(true) }

// Resume lets traffic through p again.
func (p *Proxy) Resume() { p.set(false) }

func (p *Proxy) set(paused bool) {
	p.mu.Lock()
	p.init()
	p.paused = paused
	p.mu.Unlock()
	p.cond.Broadcast()
}

// init makes the condition variable; p.mu is held.
func (p *Proxy) init() {
	if p.cond == nil {
		p.cond = sync.NewCond(&p.mu)
	}
}

// wait returns once p is not paused.
func (p *Proxy) wait() {
	p.mu.Lock()
	p.init()
	for p.paused {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// InProcessConn implements nats.InProcessConnProvider.
func (p *Proxy) InProcessConn() (net.Conn, error) {
	server, err := p.Server.InProcessConn()
	if err != nil {
		return nil, err
	}
	client, mine := net.Pipe()
	closeBoth := sync.OnceFunc(func() {
		_ = server.Close()
		_ = mine.Close()
		p.mu.Lock()
		delete(p.closers, mine)
		p.mu.Unlock()
	})
	p.mu.Lock()
	if p.closers == nil {
		p.closers = make(map[net.Conn]func())
	}
	p.closers[mine] = closeBoth
	p.mu.Unlock()
	go func() { p.pass(server, mine, true); closeBoth() }()
	go func() { p.pass(mine, server, false); closeBoth() }()
	return client, nil
}

// bufferedOps is how many operations each way of a connection holds read and not passed on.
const bufferedOps = 256

// pass copies src's protocol to dst an operation at a time, while p is not paused. Another
// goroutine reads the operations ahead, up to bufferedOps of them. It returns once src ends or
// dst fails.
func (p *Proxy) pass(dst io.Writer, src io.Reader, toServer bool) {
	ops := make(chan []byte, bufferedOps)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(ops)
		p.read(src, toServer, func(op []byte) bool {
			select {
			case ops <- op:
				return true
			case <-done:
				return false
			}
		})
	}()
	for op := range ops {
		p.wait()
		if _, err := dst.Write(op); err != nil {
			return
		}
	}
}

// read hands each operation of src's protocol to emit, leaving out the messages Drop reports,
// until src ends or emit returns false. A message's control line ends with the length of the
// payload that follows it.
func (p *Proxy) read(src io.Reader, toServer bool, emit func(op []byte) bool) {
	r := bufio.NewReaderSize(src, 64<<10)
	msgOps := [][]byte{[]byte("MSG "), []byte("HMSG ")}
	if toServer {
		msgOps = [][]byte{[]byte("PUB "), []byte("HPUB ")}
	}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		op := append([]byte(nil), line...) // line is r's buffer, which reading the payload reuses
		drop := false
		if bytes.HasPrefix(op, msgOps[0]) || bytes.HasPrefix(op, msgOps[1]) {
			f := bytes.Fields(op)
			if len(f) < 3 {
				return
			}
			n, err := strconv.Atoi(string(f[len(f)-1]))
			if err != nil {
				return
			}
			body := make([]byte, n+2) // and its CRLF
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			drop = p.Drop != nil && p.Drop(toServer, f[1])
			op = append(op, body...)
		}
		if drop {
			p.Dropped.Add(1)
			continue
		}
		if !emit(op) {
			return
		}
	}
}
