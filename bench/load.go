package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Phase names.
const (
	phaseBare     = "bare"
	phaseAgentbus = "agentbus"
)

// drainGrace bounds how long requests still in flight when the measured window ends may take
// before they are cancelled (and counted as errors).
const drainGrace = 5 * time.Second

// options configure one phase.
type options struct {
	Duration   time.Duration
	Warmup     time.Duration
	Clients    int
	Instances  int
	Partitions int
	Body       []byte
	// OnMeasure, when set, is called as the measured window starts; the function it returns is
	// called as the window ends.
	OnMeasure func() (end func())
}

func (o options) validate() error {
	switch {
	case o.Duration <= 0:
		return errors.New("-duration must be positive")
	case o.Warmup < 0:
		return errors.New("-warmup must not be negative")
	case o.Clients < 1:
		return errors.New("-clients must be at least 1")
	case o.Instances < 1:
		return errors.New("-instances must be at least 1")
	case o.Partitions < 1 || o.Partitions > 1024:
		return errors.New("-partitions must be from 1 to 1024")
	}
	return nil
}

// newClient returns the HTTP client shared by all phases: keep-alive connections to loopback,
// enough idle connections per host that no client goroutine has to dial again.
func newClient(clients int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil, // load targets only 127.0.0.1
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2*clients + 16,
		MaxIdleConnsPerHost: clients + 16,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		DisableKeepAlives:   false,
		ForceAttemptHTTP2:   false,
	}}
}

// runTarget starts the phase's server, runs the load against it and stops the server.
func runTarget(ctx context.Context, phase string, o options, client *http.Client) (result, error) {
	if err := o.validate(); err != nil {
		return result{Phase: phase}, err
	}
	var (
		urls []string
		stop func() error
		err  error
	)
	switch phase {
	case phaseBare:
		urls, stop, err = startBare(o)
	case phaseAgentbus:
		urls, stop, err = startAgentbus(ctx, o)
	default:
		return result{Phase: phase}, fmt.Errorf("unknown phase %q", phase)
	}
	if err != nil {
		return result{Phase: phase}, err
	}
	res := runPhase(ctx, phase, o, client, urls)
	// Connections to this server are useless from now on; close them before the server stops.
	client.CloseIdleConnections()
	if err := stop(); err != nil {
		return res, fmt.Errorf("stopping %s: %w", phase, err)
	}
	if res.Requests == 0 {
		return res, errNoRequests
	}
	return res, nil
}

// result is what one phase measured.
type result struct {
	Phase              string
	Requests           int // measured requests, errors included
	Errors             int
	Elapsed            time.Duration // length of the measured window
	P50, P90, P99, Max time.Duration // latencies of successful requests
	RespBytes          int64         // response body bytes of successful requests
	Interrupted        bool          // the measured window was cut short
	errs               map[string]int
}

// RPS is successful requests per second: requests started in the measured window over its length.
func (r result) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Errors) / r.Elapsed.Seconds()
}

// AvgRespBytes is the average response body size of successful requests.
func (r result) AvgRespBytes() float64 {
	if ok := r.Requests - r.Errors; ok > 0 {
		return float64(r.RespBytes) / float64(ok)
	}
	return 0
}

type errCount struct {
	msg string
	n   int
}

// topErrors returns the most frequent distinct errors.
func (r result) topErrors(n int) []errCount {
	out := make([]errCount, 0, len(r.errs))
	for msg, c := range r.errs {
		out = append(out, errCount{msg, c})
	}
	slices.SortFunc(out, func(a, b errCount) int {
		return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.msg, b.msg))
	})
	return out[:min(n, len(out))]
}

// clientStats is what one client goroutine measured; only it writes to it.
type clientStats struct {
	lat       []time.Duration
	errors    int
	respBytes int64
	errs      map[string]int
	_         [64]byte // keep neighbours' counters off this cache line
}

// runPhase sends POSTs of o.Body to urls, round-robin, from o.Clients goroutines: o.Warmup
// unmeasured, then o.Duration measured. Requests in flight when the window ends get drainGrace
// to finish. It returns once every client goroutine has returned.
func runPhase(ctx context.Context, phase string, o options, client *http.Client, urls []string) result {
	start := time.Now()
	measureStart := start.Add(o.Warmup)
	measureEnd := measureStart.Add(o.Duration)
	parent := ctx
	ctx, cancel := context.WithDeadline(ctx, measureEnd.Add(drainGrace))
	defer cancel()

	// Preallocate room for a generous per-client share of the expected requests.
	perClient := min(int(o.Duration.Seconds()*100_000)/o.Clients+1024, 1<<20)
	stats := make([]clientStats, o.Clients)
	var next atomic.Uint64
	var wg sync.WaitGroup
	for c := range stats {
		s := &stats[c]
		s.lat = make([]time.Duration, 0, perClient)
		wg.Go(func() {
			for {
				t0 := time.Now()
				if !t0.Before(measureEnd) || ctx.Err() != nil {
					return
				}
				target := urls[(next.Add(1)-1)%uint64(len(urls))]
				n, err := post(ctx, client, target, o.Body)
				d := time.Since(t0)
				if t0.Before(measureStart) || (err != nil && parent.Err() != nil) {
					continue // warm-up, or cut short by an interrupt
				}
				if err != nil {
					s.errors++
					if s.errs == nil {
						s.errs = map[string]int{}
					}
					s.errs[err.Error()]++
					continue
				}
				s.lat = append(s.lat, d)
				s.respBytes += n
			}
		})
	}

	if o.OnMeasure != nil {
		if sleepUntil(ctx, measureStart) {
			end := o.OnMeasure()
			sleepUntil(ctx, measureEnd)
			end()
		}
	}
	wg.Wait()

	res := result{Phase: phase, Elapsed: o.Duration, errs: map[string]int{}}
	if now := time.Now(); now.Before(measureEnd) {
		res.Interrupted = true
		res.Elapsed = max(now.Sub(measureStart), 0)
	}
	var all []time.Duration
	for i := range stats {
		s := &stats[i]
		all = append(all, s.lat...)
		res.Errors += s.errors
		res.RespBytes += s.respBytes
		for msg, n := range s.errs {
			res.errs[msg] += n
		}
	}
	res.Requests = len(all) + res.Errors
	slices.Sort(all)
	res.P50, res.P90, res.P99 = percentile(all, 0.50), percentile(all, 0.90), percentile(all, 0.99)
	if len(all) > 0 {
		res.Max = all[len(all)-1]
	}
	return res
}

// post sends one request and reads the whole response; any answer but a 200 is an error.
func post(ctx context.Context, client *http.Client, target string, body []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the wrapper repeats the URL, key included
		}
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, fmt.Errorf("reading body: %w", err)
	}
	return n, nil
}

// percentile of sorted latencies (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
