package subscription_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/subscription"
)

// BenchmarkDeliveryRate stores 2,000 exchanges (4,000 events) while a subscription's receiver
// refuses them, lets it accept, and prints how fast the backlog drains to a receiver on this
// machine that answers at once: the rate of one subscription, whose events go one at a time.
func BenchmarkDeliveryRate(b *testing.B) {
	const exchanges = 2000
	for range b.N {
		f := newFixture(b, subscription.Config{MaxBackoff: 50 * time.Millisecond})
		var up atomic.Bool
		var got atomic.Int64
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !up.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			got.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		_, err := f.store.Create(context.Background(), "acme", subscription.New{URL: rcv.URL, Events: subscription.EventTypes})
		require.NoError(b, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); f.store.Deliver(ctx) }()
		for i := range exchanges {
			f.say(b, "acme", fmt.Sprint("a", i%20), "bob", fmt.Sprint(i))
		}
		start := time.Now()
		up.Store(true)
		for got.Load() < 2*exchanges {
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(start)
		cancel()
		<-done
		rcv.Close()
		b.Logf("%d events delivered in order in %v: %.0f events/s to one subscription", 2*exchanges, took.Round(time.Millisecond), float64(2*exchanges)/took.Seconds())
	}
}
