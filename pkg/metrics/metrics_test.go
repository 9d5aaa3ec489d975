package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/metrics"
)

func TestBoundedLabel(t *testing.T) {
	b := metrics.NewBoundedLabel(2)
	assert.Equal(t, "a", b.Value("a"))
	assert.Equal(t, "b", b.Value("b"))
	assert.Equal(t, metrics.Other, b.Value("c"))
	assert.Equal(t, "a", b.Value("a"), "a name seen before the limit keeps its value")
	assert.Equal(t, metrics.Other, b.Value("d"))
}

func TestBoundedLabelConcurrent(t *testing.T) {
	const limit = 10
	b := metrics.NewBoundedLabel(limit)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		kept = make(map[string]bool)
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				name := fmt.Sprintf("n%d", (g*7+i)%50)
				if v := b.Value(name); v != metrics.Other {
					assert.Equal(t, name, v)
					mu.Lock()
					kept[v] = true
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	assert.Len(t, kept, limit)
}

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
