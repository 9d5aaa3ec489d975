package opshttp_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/opshttp"
	"github.com/agentbus/agentbus/pkg/problem"
)

func TestHealthHandler(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		path        string
		status      nats.Status
		notReady    string // what the host's Readiness reports; empty: ready
		metrics     bool   // serve a registry with agentbus_test_total on /metrics
		wantCode    int
		wantBody    string
		wantProblem bool
	}{
		{name: "live while connected", path: "/healthz", status: nats.CONNECTED, wantCode: 200, wantBody: `{"status":"ok"}`},
		{name: "live does not wait for ready", path: "/healthz", notReady: "starting", status: nats.CONNECTED, wantCode: 200, wantBody: `{"status":"ok"}`},
		{name: "not live while reconnecting", path: "/healthz", status: nats.RECONNECTING, wantCode: 503, wantBody: `{"status":"nats disconnected"}`},
		{name: "not live when closed", path: "/healthz", status: nats.CLOSED, wantCode: 503, wantBody: `{"status":"nats disconnected"}`},
		{name: "ready", path: "/readyz", status: nats.CONNECTED, wantCode: 200, wantBody: `{"status":"ready"}`},
		{name: "starting", path: "/readyz", notReady: "starting", status: nats.CONNECTED, wantCode: 503, wantBody: `{"status":"starting"}`},
		{name: "starting and disconnected", path: "/readyz", notReady: "starting", status: nats.RECONNECTING, wantCode: 503, wantBody: `{"status":"starting"}`},
		{name: "ready but disconnected", path: "/readyz", status: nats.RECONNECTING, wantCode: 503, wantBody: `{"status":"nats disconnected"}`},
		{name: "ready but closed", path: "/readyz", status: nats.CLOSED, wantCode: 503, wantBody: `{"status":"nats disconnected"}`},
		{name: "HEAD", method: http.MethodHead, path: "/readyz", status: nats.CONNECTED, wantCode: 200},
		{name: "stopping", path: "/readyz", notReady: "stopping", status: nats.CONNECTED, wantCode: 503, wantBody: `{"status":"stopping"}`},
		{name: "partition not consumed", path: "/readyz", notReady: "partition 3 of Echo not consumed", status: nats.CONNECTED, wantCode: 503, wantBody: `{"status":"partition 3 of Echo not consumed"}`},
		{name: "live while not ready", path: "/healthz", notReady: "stopping", status: nats.CONNECTED, wantCode: 200, wantBody: `{"status":"ok"}`},
		{name: "unknown path", path: "/other", status: nats.CONNECTED, wantCode: 404, wantProblem: true},
		{name: "metrics not served", path: "/metrics", status: nats.CONNECTED, wantCode: 404, wantProblem: true},
		{name: "metrics", path: "/metrics", metrics: true, status: nats.CONNECTED, wantCode: 200, wantBody: "agentbus_test_total 1"},
		{name: "POST metrics", method: http.MethodPost, path: "/metrics", metrics: true, status: nats.CONNECTED, wantCode: 405, wantProblem: true},
		{name: "root", path: "/", status: nats.CONNECTED, wantCode: 404, wantProblem: true},
		{name: "POST", method: http.MethodPost, path: "/healthz", status: nats.CONNECTED, wantCode: 405, wantProblem: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readiness := func() error {
				if tt.notReady != "" {
					return errors.New(tt.notReady)
				}
				return nil
			}
			var mh http.Handler
			if tt.metrics {
				reg := prometheus.NewRegistry()
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "agentbus_test_total", Help: "test"})
				reg.MustRegister(c)
				c.Inc()
				mh = metrics.Handler(reg)
			}
			h := opshttp.Handler(func() nats.Status { return tt.status }, readiness, mh)
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, tt.path, nil))

			assert.Equal(t, tt.wantCode, rec.Code)
			if tt.wantProblem {
				assert.Equal(t, problem.ContentType, rec.Header().Get("Content-Type"))
				assert.Contains(t, rec.Body.String(), fmt.Sprintf(`"status":%d`, tt.wantCode))
				assert.Contains(t, rec.Body.String(), problem.TypePrefix)
				return
			}
			if tt.metrics {
				assert.Contains(t, rec.Header().Get("Content-Type"), "text/plain")
				assert.Contains(t, rec.Body.String(), tt.wantBody)
				return
			}
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
			if tt.wantBody != "" {
				assert.JSONEq(t, tt.wantBody, rec.Body.String())
			}
		})
	}
}

// ServePprof serves Go's profiling index and endpoints, and nothing once stopped.
func TestServePprof(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	stop, err := opshttp.ServePprof(addr, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err, path)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
	stop()
	_, err = http.Get("http://" + addr + "/debug/pprof/")
	assert.Error(t, err, "served after stop")
}
