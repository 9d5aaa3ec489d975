package service_test

import (
	"context"
	"flag"
	"io"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/gogc"
	"github.com/agentbus/agentbus/pkg/service"
)

// Every test closes the processes it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestStartAndClose: Start reads the settings from flags before the environment, sets the
// garbage collector's target, and serves the profiles on AGENTBUS_PPROF_ADDR until Close.
func TestStartAndClose(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	beforeLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(beforeLimit) })
	addr := freeAddr(t)
	var logs strings.Builder
	p, err := service.Start(t.Context(), "ingress", "agentbus-test", []string{"-log-level", "debug"},
		env(map[string]string{"AGENTBUS_PPROF_ADDR": addr, "AGENTBUS_LOG_LEVEL": "error"}), &logs)
	require.NoError(t, err)
	assert.Equal(t, "400", p.GOGC)
	assert.Equal(t, gogc.Default, debug.SetGCPercent(100), "without GOGC, the default target")
	assert.Equal(t, "256MiB", p.MemoryLimit)
	assert.Equal(t, int64(gogc.DefaultMemoryLimit), debug.SetMemoryLimit(-1), "without GOMEMLIMIT, the default limit")
	assert.True(t, p.Log.Enabled(t.Context(), -4), "the flag's level wins over the environment's")

	res, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	require.NoError(t, res.Body.Close())
	assert.Equal(t, http.StatusOK, res.StatusCode)

	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a stopping process closes with its context ended
	p.Close(ctx)
	_, err = http.Get("http://" + addr + "/debug/pprof/cmdline")
	assert.Error(t, err, "the profiling endpoint is closed")
	assert.Contains(t, logs.String(), "profiling endpoint listening")
}

// TestStartRefuses: help, a bad setting and a profiling address in use are answered as errors,
// and nothing is left running.
func TestStartRefuses(t *testing.T) {
	_, err := service.Start(t.Context(), "ingress", "agentbus-test", []string{"-h"}, env(nil), io.Discard)
	assert.ErrorIs(t, err, flag.ErrHelp)

	_, err = service.Start(t.Context(), "ingress", "agentbus-test", nil, env(map[string]string{"AGENTBUS_PARTITIONS": "many"}), io.Discard)
	assert.ErrorContains(t, err, "AGENTBUS_PARTITIONS")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, err = service.Start(t.Context(), "ingress", "agentbus-test", nil,
		env(map[string]string{"AGENTBUS_PPROF_ADDR": ln.Addr().String(), "GOGC": "100"}), io.Discard)
	assert.ErrorContains(t, err, "for profiling")
}

// TestStartMemoryLimit: AGENTBUS_MEMORY_LIMIT sets the soft memory limit, 0 none, and GOMEMLIMIT
// given wins; Close stops the limit's watch (TestMain checks that no goroutine is left).
func TestStartMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	for _, tt := range []struct {
		env       map[string]string
		inEffect  string
		wantLimit int64
	}{
		{map[string]string{"AGENTBUS_MEMORY_LIMIT": "1GiB"}, "1GiB", 1 << 30},
		{map[string]string{"AGENTBUS_MEMORY_LIMIT": "0"}, "off", math.MaxInt64},
		{map[string]string{"AGENTBUS_MEMORY_LIMIT": "1GiB", "GOMEMLIMIT": "123MiB"}, "GOMEMLIMIT=123MiB", 7 << 40},
	} {
		debug.SetMemoryLimit(7 << 40) // stands for what the runtime took from GOMEMLIMIT
		p, err := service.Start(t.Context(), "workflowhost", "agentbus-test", nil, env(tt.env), io.Discard)
		require.NoError(t, err)
		assert.Equal(t, tt.inEffect, p.MemoryLimit)
		assert.Equal(t, tt.wantLimit, debug.SetMemoryLimit(-1))
		p.Close(t.Context())
	}
}
