package natstest

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// RouteCut carries every route connection of a cluster's last server, to the others and from
// them, through proxies on loopback, which Cut stops: the server is then cut off from the rest
// of the cluster (a network partition) while it and the clients connected to it go on.
type RouteCut struct {
	mu     sync.Mutex
	cond   *sync.Cond
	cut    bool
	closed bool
	lns    []net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newRouteCut(t testing.TB) *RouteCut {
	r := &RouteCut{conns: map[net.Conn]struct{}{}}
	r.cond = sync.NewCond(&r.mu)
	t.Cleanup(r.close)
	return r
}

// Cut stops passing anything between the server and the rest of the cluster, both ways, until
// Restore. What was in flight waits in the proxies.
func (r *RouteCut) Cut() {
	r.mu.Lock()
	r.cut = true
	r.mu.Unlock()
}

// Restore passes the routes' traffic again.
func (r *RouteCut) Restore() {
	r.mu.Lock()
	r.cut = false
	r.mu.Unlock()
	r.cond.Broadcast()
}

// proxy listens on a loopback port and passes each connection to it on to target's port; it
// returns the address it listens on.
func (r *RouteCut) proxy(t testing.TB, target int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listening for routes")
	r.mu.Lock()
	r.lns = append(r.lns, l)
	r.mu.Unlock()
	r.wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			r.wg.Go(func() { r.serve(in, target) })
		}
	})
	return l.Addr().String()
}

// serve passes one connection on to target, both ways, until either side closes it.
func (r *RouteCut) serve(in net.Conn, target int) {
	out, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", target))
	if err != nil {
		_ = in.Close()
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_, _ = in.Close(), out.Close()
		return
	}
	r.conns[in], r.conns[out] = struct{}{}, struct{}{}
	r.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { r.pump(out, in); _, _ = in.Close(), out.Close() })
	both.Go(func() { r.pump(in, out); _, _ = in.Close(), out.Close() })
	both.Wait()
	r.mu.Lock()
	delete(r.conns, in)
	delete(r.conns, out)
	r.mu.Unlock()
}

// pump copies src to dst, holding what it read while the routes are cut.
func (r *RouteCut) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !r.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait returns once the routes are not cut: true, or false when the proxies are closing.
func (r *RouteCut) wait() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.cut && !r.closed {
		r.cond.Wait()
	}
	return !r.closed
}

// close stops the proxies and waits for their goroutines.
func (r *RouteCut) close() {
	r.mu.Lock()
	r.closed = true
	for _, l := range r.lns {
		_ = l.Close()
	}
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.cond.Broadcast()
	r.wg.Wait()
}
