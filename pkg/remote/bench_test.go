package remote_test

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// BenchmarkRemoteWebhookEcho calls the webhook echo of the Go Echo and of the Python kit's Echo,
// registered as a remote agent, through the whole stack (16 clients, keep-alive, 100
// conversations), and prints
// each one's rate and p99 and the remote one's rate as a share of Go's, measured in one run.
func BenchmarkRemoteWebhookEcho(b *testing.B) {
	secret := webhooksig.NewStandardSecret()
	reg := startPythonEcho(b, secret)
	s := stacktest.Start(b, stacktest.Options{})
	status, _ := call(b, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil)
	require.Equal(b, http.StatusCreated, status)
	require.NoError(b, s.WaitLive(b.Context(), "EchoPy"))
	const calls, clients = 3000, 16
	goURL := s.URL + "/api/user/webhooks/Echo/echo?apikey=" + s.Key
	pyURL := s.URL + "/api/user/webhooks/EchoPy/echo?apikey=" + s.Key
	measure(b, goURL, calls/3, clients) // warm up
	measure(b, pyURL, calls/3, clients)
	for range b.N {
		goRun := measure(b, goURL, calls, clients)
		pyRun := measure(b, pyURL, calls, clients)
		b.Logf("webhook echo, %d calls over %d clients: Go Echo %.0f/s p50 %v p99 %v; Python Echo (remote) %.0f/s p50 %v p99 %v: %.2f of Go",
			calls, clients, goRun.rate, goRun.p50, goRun.p99, pyRun.rate, pyRun.p50, pyRun.p99, pyRun.rate/goRun.rate)
		b.ReportMetric(pyRun.rate/goRun.rate, "python/go")
	}
}

type run struct {
	p50, p99 time.Duration
	rate     float64
}

// measure makes n POSTs to url over the given clients.
func measure(b *testing.B, url string, n, clients int) run {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := c; i < n; i += clients {
				t0 := time.Now()
				// 100 conversations: one conversation's calls run one at a time.
				resp, err := http.Post(url+"&participantId=c"+strconv.Itoa(i%100), "application/json", bytes.NewReader([]byte(`{"n":1}`)))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("%s answered %d", url, resp.StatusCode)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				all = append(all, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(all)
	return run{p50: all[len(all)/2], p99: all[len(all)*99/100], rate: float64(len(all)) / took.Seconds()}
}
