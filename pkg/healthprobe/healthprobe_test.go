package healthprobe_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/healthprobe"
)

func TestLocalURL(t *testing.T) {
	tests := []struct {
		name, addr, path string
		want             string
		wantErr          bool
	}{
		{name: "every IPv4 interface", addr: "0.0.0.0:8080", path: "/healthz", want: "http://127.0.0.1:8080/healthz"},
		{name: "empty host", addr: ":9090", path: "/readyz", want: "http://127.0.0.1:9090/readyz"},
		{name: "every IPv6 interface", addr: "[::]:9090", path: "/readyz", want: "http://127.0.0.1:9090/readyz"},
		{name: "loopback kept", addr: "127.0.0.1:8080", path: "/healthz", want: "http://127.0.0.1:8080/healthz"},
		{name: "name kept", addr: "localhost:8080", path: "/healthz", want: "http://localhost:8080/healthz"},
		{name: "IPv6 host bracketed", addr: "[::1]:9090", path: "/healthz", want: "http://[::1]:9090/healthz"},
		{name: "path without slash", addr: "127.0.0.1:1", path: "healthz", want: "http://127.0.0.1:1/healthz"},
		{name: "no address", addr: "", path: "/healthz", wantErr: true},
		{name: "no port", addr: "127.0.0.1", path: "/healthz", wantErr: true},
		{name: "any free port", addr: "127.0.0.1:0", path: "/healthz", wantErr: true},
		{name: "port not a number", addr: "127.0.0.1:http", path: "/healthz", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := healthprobe.LocalURL(tt.addr, tt.path)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		case "/starting":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("{\"status\":\"starting\"}\n"))
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)

	tests := []struct {
		name       string
		addr, path string
		timeout    time.Duration
		wantStatus int // 0: no answer expected to be checked
		wantErr    string
	}{
		{name: "200 is healthy", addr: addr, path: "/ok"},
		{name: "wildcard host reaches loopback", addr: "0.0.0.0:" + port, path: "/ok"},
		{name: "503 with its body", addr: addr, path: "/starting", wantStatus: 503, wantErr: `503 Service Unavailable: {"status":"starting"}`},
		{name: "404", addr: addr, path: "/nothing", wantStatus: 404, wantErr: "404 Not Found"},
		{name: "redirect is not followed", addr: addr, path: "/moved", wantStatus: 302},
		{name: "times out", addr: addr, path: "/slow", timeout: 100 * time.Millisecond, wantErr: "context deadline exceeded"},
		{name: "bad address", addr: "nowhere", path: "/ok", wantErr: "listen address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			err := healthprobe.Check(ctx, tt.addr, tt.path)
			if tt.wantStatus == 0 && tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.False(t, strings.Contains(err.Error(), "\n"), "one line: %q", err.Error())
			assert.Contains(t, err.Error(), tt.wantErr)
			var se *healthprobe.StatusError
			if tt.wantStatus != 0 {
				require.True(t, errors.As(err, &se), "want a StatusError, got %v", err)
				assert.Equal(t, tt.wantStatus, se.Status)
			} else {
				assert.False(t, errors.As(err, &se))
			}
		})
	}
}

func TestCheckDefaultTimeout(t *testing.T) {
	// A server that accepts but never answers: without a deadline of its own the check must
	// still end, after Timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 8)
	t.Cleanup(func() {
		_ = ln.Close()
		for {
			select {
			case c := <-conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()

	start := time.Now()
	err = healthprobe.Check(context.Background(), ln.Addr().String(), "/healthz")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), healthprobe.Timeout+2*time.Second)
}
