package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/metrics"
)

func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	newVec := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"})
	}
	first, err := metrics.Register(reg, newVec())
	require.NoError(t, err)
	second, err := metrics.Register(reg, newVec())
	require.NoError(t, err)
	assert.Same(t, first, second)
	second.WithLabelValues("v").Inc()
	assert.Equal(t, 1.0, testutil.ToFloat64(first.WithLabelValues("v")))

	_, err = metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"other"}))
	assert.Error(t, err, "a collector of the same name with other labels is not the same")
}

func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "agentbus_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "agentbus_test_total 3")
}
