package remote

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// pool keeps the keep-alive HTTP/1.1 connections to an endpoint (http, or https with TLS) and
// makes each call on the goroutine that asks for it: it writes the request and reads the answer
// with net/http's own request writer and response reader, where net/http's Transport hands every
// call to two goroutines of its connection and back (docs/remote-agents.md#performance). A call
// has a connection to itself from its request to the end of its answer's body.
type pool struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	tls  *tls.Config // for https; nil: the system's roots
	max  int         // idle connections kept

	mu     sync.Mutex
	idle   []*poolConn // the most recently used last
	closed bool
}

// poolIdleTimeout is how long an idle connection is kept: less than the kits' 120 s, so that the
// host, not the agent, closes it.
const poolIdleTimeout = 90 * time.Second

// poolConn is one connection of a pool.
type poolConn struct {
	key   string // scheme://host:port
	nc    net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	since time.Time // idle since
}

// newPool returns a pool that dials with dial, verifies https endpoints' certificates with
// tlsConfig (nil: the system's roots) and keeps up to max idle connections.
func newPool(dial func(ctx context.Context, network, addr string) (net.Conn, error), tlsConfig *tls.Config, max int) *pool {
	return &pool{dial: dial, tls: tlsConfig, max: max}
}

// roundTrip sends req, whose URL is http or https, and reads the answer's head. The caller reads
// the body and closes it, which gives the connection back when the body was read to its end. A
// request that fails on a connection the endpoint may have closed while it was idle, before any
// answer, is sent once more on a new connection (the protocol's requests may be sent again).
func (p *pool) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	u := req.URL
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("unsupported scheme %q", u.Scheme)
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(ctx, u.Scheme, addr, u.Hostname())
		if err != nil {
			return nil, err
		}
		if d, ok := ctx.Deadline(); ok {
			_ = c.nc.SetDeadline(d)
		}
		stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
		resp, err := c.exchange(req)
		if err == nil {
			resp.Body = &poolBody{ReadCloser: resp.Body, p: p, c: c, stop: stop, keep: !resp.Close}
			return resp, nil
		}
		stop()
		_ = c.nc.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, errors.Join(ctxErr, err)
		}
		if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
			// The connection's deadline, the context's, ran out before the context noticed.
			return nil, errors.Join(context.DeadlineExceeded, err)
		}
		if !reused || attempt > 0 || !closedWhileIdle(err) || req.GetBody == nil {
			return nil, err
		}
		if req.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
}

// exchange writes req and reads the answer's head.
func (c *poolConn) exchange(req *http.Request) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	return http.ReadResponse(c.br, req)
}

// closedWhileIdle reports whether err is what a connection the other end closed gives: the end
// of the stream before an answer, or a reset or broken pipe.
func closedWhileIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// get returns an idle connection to addr over scheme, or a new one; reused tells which.
func (p *pool) get(ctx context.Context, scheme, addr, host string) (c *poolConn, reused bool, err error) {
	key := scheme + "://" + addr
	now := time.Now()
	p.mu.Lock()
	for len(p.idle) > 0 {
		c = p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.key == key && now.Sub(c.since) < poolIdleTimeout {
			p.mu.Unlock()
			return c, true, nil
		}
		// Idle too long (and the older ones below it too), or another endpoint's.
		_ = c.nc.Close()
		for _, old := range p.idle {
			_ = old.nc.Close()
		}
		p.idle = p.idle[:0]
	}
	p.mu.Unlock()
	nc, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	if scheme == "https" {
		cfg := &tls.Config{}
		if p.tls != nil {
			cfg = p.tls.Clone()
		}
		cfg.ServerName, cfg.NextProtos = host, []string{"http/1.1"}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, false, err
		}
		nc = tc
	}
	return &poolConn{key: key, nc: nc, br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 16<<10)}, false, nil
}

// put gives a connection back, idle from now.
func (p *pool) put(c *poolConn) {
	_ = c.nc.SetDeadline(time.Time{})
	c.since = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.max {
		p.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// close closes the idle connections, and the others as they are given back.
func (p *pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
}

// poolBody is an answer's body: closing it gives the connection back when the body was read to
// its end (or has little left, which is read), and closes it otherwise.
type poolBody struct {
	io.ReadCloser
	p    *pool
	c    *poolConn
	stop func() bool // ends the watch of the call's context
	keep bool        // the endpoint keeps the connection open
	eof  bool
	once sync.Once
}

func (b *poolBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *poolBody) Close() error {
	b.once.Do(func() {
		if !b.eof && b.keep {
			// What a decoder left unread, such as a final newline.
			_, err := io.Copy(io.Discard, io.LimitReader(b.ReadCloser, 4<<10))
			b.eof = err == nil && b.drained()
		}
		_ = b.ReadCloser.Close()
		if b.stop() && b.eof && b.keep {
			b.p.put(b.c)
			return
		}
		_ = b.c.nc.Close()
	})
	return nil
}

// drained reports whether the body has nothing left.
func (b *poolBody) drained() bool {
	n, err := b.ReadCloser.Read(make([]byte, 1))
	return n == 0 && err == io.EOF
}
