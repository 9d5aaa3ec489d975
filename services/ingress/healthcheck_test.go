package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHealthcheck(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(healthy.Close)
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"nats disconnected"}`))
	}))
	t.Cleanup(sick.Close)
	_, healthyPort, err := net.SplitHostPort(healthy.Listener.Addr().String())
	require.NoError(t, err)

	// A port nothing listens on: taken, then given back.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // "" means healthy
	}{
		{name: "healthy", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_HTTP_ADDR": healthy.Listener.Addr().String()}},
		{name: "listening on every interface", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_HTTP_ADDR": "0.0.0.0:" + healthyPort}},
		{name: "flag wins over the variable", args: []string{"healthcheck", "-http-addr", healthy.Listener.Addr().String()}, env: map[string]string{"AGENTBUS_HTTP_ADDR": closed}},
		{name: "503", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_HTTP_ADDR": sick.Listener.Addr().String()}, wantErr: `503 Service Unavailable: {"status":"nats disconnected"}`},
		{name: "nothing listening", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_HTTP_ADDR": closed}, wantErr: "connection refused"},
		{name: "random port cannot be checked", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_HTTP_ADDR": "127.0.0.1:0"}, wantErr: "port"},
		{name: "invalid settings", args: []string{"healthcheck"}, env: map[string]string{"AGENTBUS_HTTP_ADDR": healthy.Listener.Addr().String(), "AGENTBUS_PARTITIONS": "x"}, wantErr: "AGENTBUS_PARTITIONS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			err := run(context.Background(), tt.args, lookup, io.Discard)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.NotContains(t, err.Error(), "\n", "main prints it as one line")
		})
	}
}
