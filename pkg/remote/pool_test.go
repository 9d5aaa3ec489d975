package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/outbound"
)

// poolServer is an endpoint that counts the connections it accepted.
type poolServer struct {
	*httptest.Server
	conns atomic.Int64
}

func startPoolServer(t *testing.T, h http.HandlerFunc) *poolServer {
	t.Helper()
	s := &poolServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// poolCall posts body through p and returns the answer's status and body.
func poolCall(t *testing.T, ctx context.Context, p *pool, url, body string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := p.roundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func testPool() *pool { return newPool(outbound.Dialer(5*time.Second, true).DialContext, nil, 4) }

// Calls one after the other share one connection, and each gets its own answer.
func TestPoolKeepsTheConnection(t *testing.T) {
	s := startPoolServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(bytes.ToUpper(b))
	})
	p := testPool()
	defer p.close()
	for i := range 20 {
		status, body, err := poolCall(t, t.Context(), p, s.URL+"/agent", strings.Repeat("x", i))
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, status)
		assert.Equal(t, strings.Repeat("X", i), body)
	}
	assert.EqualValues(t, 1, s.conns.Load(), "connections")
}

// An endpoint that closed an idle connection (a restart, its idle timeout) costs the next call
// nothing: it is sent again on a new connection.
func TestPoolSendsAgainWhenTheIdleConnectionWasClosed(t *testing.T) {
	s := startPoolServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	p := testPool()
	defer p.close()
	_, _, err := poolCall(t, t.Context(), p, s.URL, "a")
	require.NoError(t, err)
	s.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	status, body, err := poolCall(t, t.Context(), p, s.URL, "b")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ok", body)
	assert.EqualValues(t, 2, s.conns.Load(), "connections")
}

// A call whose deadline passes fails then, and its connection is not used again.
func TestPoolCallEndsAtItsDeadline(t *testing.T) {
	release := make(chan struct{})
	s := startPoolServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	defer close(release)
	p := testPool()
	defer p.close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := poolCall(t, ctx, p, s.URL+"/slow", "a")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second, "the call outlived its deadline")

	_, body, err := poolCall(t, t.Context(), p, s.URL+"/fast", "b")
	require.NoError(t, err)
	assert.Equal(t, "ok", body)
	assert.EqualValues(t, 2, s.conns.Load(), "the timed-out connection was used again")
}

// A call whose context is cancelled while it waits for the answer ends at once.
func TestPoolCallEndsWhenCancelled(t *testing.T) {
	release := make(chan struct{})
	s := startPoolServer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	p := testPool()
	defer p.close()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := poolCall(t, ctx, p, s.URL, "a")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// A connection the endpoint asks to close, or whose answer was not read to its end, is closed;
// a streamed (chunked) answer read whole keeps it.
func TestPoolReusesOnlyFinishedConnections(t *testing.T) {
	s := startPoolServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/big":
			_, _ = w.Write(bytes.Repeat([]byte("x"), 64<<10))
		case "/stream":
			w.Header().Set("Content-Type", "application/x-ndjson")
			for i := range 3 {
				_, _ = io.WriteString(w, strings.Repeat("d", i+1)+"\n")
				w.(http.Flusher).Flush()
			}
		}
	})
	p := testPool()
	defer p.close()

	_, body, err := poolCall(t, t.Context(), p, s.URL+"/close", "")
	require.NoError(t, err)
	assert.Equal(t, "bye", body)
	_, body, err = poolCall(t, t.Context(), p, s.URL+"/stream", "")
	require.NoError(t, err)
	assert.Equal(t, "d\ndd\nddd\n", body)
	assert.EqualValues(t, 2, s.conns.Load(), "after a closed connection, a new one")
	_, _, err = poolCall(t, t.Context(), p, s.URL+"/stream", "")
	require.NoError(t, err)
	assert.EqualValues(t, 2, s.conns.Load(), "the streamed answer's connection, used again")

	// An answer left mostly unread: its connection is closed.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/big", nil)
	require.NoError(t, err)
	resp, err := p.roundTrip(req)
	require.NoError(t, err)
	_, _ = resp.Body.Read(make([]byte, 10))
	require.NoError(t, resp.Body.Close())
	_, _, err = poolCall(t, t.Context(), p, s.URL+"/stream", "")
	require.NoError(t, err)
	assert.EqualValues(t, 3, s.conns.Load(), "the unread answer's connection was used again")
}

// A pool for public addresses refuses to dial a loopback one.
func TestPoolRefusesInternalAddresses(t *testing.T) {
	s := startPoolServer(t, func(w http.ResponseWriter, r *http.Request) {})
	p := newPool(outbound.Dialer(5*time.Second, false).DialContext, nil, 4)
	defer p.close()
	_, _, err := poolCall(t, t.Context(), p, s.URL, "a")
	assert.ErrorIs(t, err, outbound.ErrInternalAddress)
	assert.Zero(t, s.conns.Load())
}

// An https endpoint is called over TLS (HTTP/1.1), its certificate verified, on one kept
// connection; one whose certificate does not verify is refused.
func TestPoolSpeaksTLS(t *testing.T) {
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.StartTLS()
	defer s.Close()
	roots := s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	p := newPool(outbound.Dialer(5*time.Second, true).DialContext, &tls.Config{RootCAs: roots}, 4)
	defer p.close()
	for range 3 {
		status, body, err := poolCall(t, t.Context(), p, s.URL, "a")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, status)
		assert.Equal(t, "HTTP/1.1", body)
	}
	assert.EqualValues(t, 1, conns.Load(), "connections")

	untrusting := newPool(outbound.Dialer(5*time.Second, true).DialContext, nil, 4)
	defer untrusting.close()
	_, _, err := poolCall(t, t.Context(), untrusting, s.URL, "a")
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown, "a certificate no root vouches for")
}
