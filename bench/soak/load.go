package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/sse"
)

// The kinds of request of the load.
const (
	kindWebhookEcho  = "webhook-echo"
	kindWebhookCount = "webhook-count"
	kindSend         = "send"
	kindSendWait     = "send-wait"
	kindConverseChat = "converse-chat"
	kindConverseData = "converse-data"
	kindHistory      = "history"
)

// kinds are the kinds in the order they are printed.
var kinds = []string{kindWebhookEcho, kindWebhookCount, kindSend, kindSendWait, kindConverseChat, kindConverseData, kindHistory}

// cycle is the order the dispatcher sends the kinds in, one per request; its shares are the mix.
var cycle = []string{kindWebhookEcho, kindSend, kindConverseChat, kindWebhookCount, kindWebhookEcho, kindSendWait, kindConverseData, kindHistory}

// maxInFlight bounds the requests in flight: a request due while that many are still waiting is
// not sent, and counted as an error ("behind"), since the processes did not keep up with a rate
// they kept up with before.
const maxInFlight = 256

// load offers the mixed load and keeps the listen streams, and counts what happened.
type load struct {
	d      *deployment
	o      options
	client *http.Client // requests
	listen *http.Client // listen streams: no timeout, connections of their own

	inFlight atomic.Int64
	wg       sync.WaitGroup

	mu        sync.Mutex
	stats     map[string]*kindStats
	interval  []time.Duration // latencies since the last sample, all kinds
	errShown  int
	listeners listenStats
}

type kindStats struct {
	requests, errors int64
	latencies        []time.Duration
}

type listenStats struct {
	open, connects, reconnects, events, errors int64
}

// maxErrorsShown is how many errors are printed as they happen; the rest are only counted.
const maxErrorsShown = 20

func newLoad(d *deployment, o options) *load {
	l := &load{d: d, o: o, stats: map[string]*kindStats{},
		client: &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}},
		listen: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 5 * time.Second}},
	}
	for _, k := range kinds {
		l.stats[k] = &kindStats{}
	}
	return l
}

// mixString says what share of the requests each kind has, in requests a second.
func (l *load) mixString() string {
	var parts []string
	for _, k := range kinds {
		n := 0
		for _, c := range cycle {
			if c == k {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%s %.3g/s", k, l.o.Rate*float64(n)/float64(len(cycle))))
	}
	return strings.Join(parts, ", ")
}

// run offers the load until ctx ends, then waits for the requests in flight and closes the
// listen streams.
func (l *load) run(ctx context.Context) {
	for i := range l.o.Listeners {
		l.wg.Go(func() { l.listenLoop(ctx, i) })
	}
	// Request n is due at n/rate seconds from the start; one that is late (the dispatcher did not
	// run in time) is sent at once, so that the rate holds on a busy machine.
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := map[string]int{}
	for n := 0; ; n++ {
		due := start.Add(time.Duration(float64(n) * float64(time.Second) / l.o.Rate))
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			l.wg.Wait()
			l.client.CloseIdleConnections()
			l.listen.CloseIdleConnections()
			return
		}
		kind := cycle[n%len(cycle)]
		i := next[kind] % l.o.Instances
		next[kind]++
		if l.inFlight.Load() >= maxInFlight {
			l.record(kind, 0, errors.New("behind: the earlier requests had not been answered"))
			continue
		}
		l.inFlight.Add(1)
		l.wg.Go(func() {
			defer l.inFlight.Add(-1)
			// A request runs to its end even when the duration is over: the load stops
			// sending, it does not cut calls off.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
			defer cancel()
			began := time.Now()
			err := l.do(rctx, kind, i, n)
			l.record(kind, time.Since(began), err)
		})
	}
}

// record counts one request of kind that took d and failed with err (nil: it succeeded).
func (l *load) record(kind string, d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats[kind]
	s.requests++
	if err != nil {
		s.errors++
		l.showError(kind, err)
		return
	}
	s.latencies = append(s.latencies, d)
	l.interval = append(l.interval, d)
}

// showError prints one of the first errors as it happens; l.mu is held.
func (l *load) showError(kind string, err error) {
	if l.errShown++; l.errShown <= maxErrorsShown {
		fmt.Printf("error %s %s: %v\n", time.Now().Format("15:04:05.000"), kind, err)
		if l.errShown == maxErrorsShown {
			fmt.Println("(further errors are counted, not shown)")
		}
	}
}

func workflow(i int) string { return fmt.Sprintf("%ssoak-%d", echoWF, i) }

// do sends request n, of kind, to instance i and checks its answer.
func (l *load) do(ctx context.Context, kind string, i, n int) error {
	d := l.d
	switch kind {
	case kindWebhookEcho, kindWebhookCount:
		method := "echo"
		body := fmt.Appendf(nil, `{"soak":%d,"item":"tea","qty":2}`, n)
		if kind == kindWebhookCount {
			method, body = "count", nil
		}
		u := d.ingress.URL + "/api/user/webhooks/" + url.PathEscape(workflow(i)) + "/" + method + "?n=" + fmt.Sprint(n) + "&apikey=" + url.QueryEscape(d.key)
		b, err := l.call(ctx, http.MethodPost, u, false, body, http.StatusOK)
		if err != nil {
			return err
		}
		var r struct {
			Size  *int `json:"size"`
			Count int  `json:"count"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("answer %q: %w", trim(b), err)
		}
		if kind == kindWebhookEcho && (r.Size == nil || *r.Size != len(body)) {
			return fmt.Errorf("echo answered %q for a body of %d bytes", trim(b), len(body))
		}
		if kind == kindWebhookCount && r.Count < 1 {
			return fmt.Errorf("count answered %q", trim(b))
		}
		return nil

	case kindSend, kindSendWait:
		params := fmt.Sprintf(`{"soak":%d}`, n)
		body := fmt.Sprintf(`{"agentName":"Echo","activationName":"soak-%d","participantId":%q,"type":"Data","text":"echo","data":%s}`, i, participant, params)
		u := d.ingress.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/send"
		want := http.StatusAccepted
		if kind == kindSendWait {
			u += "?wait=true"
			want = http.StatusOK
		}
		b, err := l.call(ctx, http.MethodPost, u, true, []byte(body), want)
		if err != nil || kind == kindSend {
			return err
		}
		return checkReply(b, params)

	case kindConverseData:
		params := fmt.Sprintf(`{"soak":%d}`, n)
		u := d.ingress.URL + "/api/user/rest/converse?workflow=" + url.QueryEscape(workflow(i)) + "&type=Data&text=echo&participantId=" + participant
		b, err := l.call(ctx, http.MethodPost, u, true, []byte(params), http.StatusOK)
		if err != nil {
			return err
		}
		return checkReply(b, params)

	case kindConverseChat:
		text := fmt.Sprintf("hello soak %d", n)
		u := d.ingress.URL + "/api/user/rest/converse?workflow=" + url.QueryEscape(workflow(i)) + "&type=Chat&participantId=" + participant + "&text=" + url.QueryEscape(text)
		return l.converseStream(ctx, u, text)

	case kindHistory:
		u := d.ingress.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/history?workflowId=" + url.QueryEscape(workflow(i)) + "&participantId=" + participant + "&pageSize=20"
		b, err := l.call(ctx, http.MethodGet, u, true, nil, http.StatusOK)
		if err != nil {
			return err
		}
		var r struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Messages == nil {
			return fmt.Errorf("history answered %q (%v)", trim(b), err)
		}
		return nil
	}
	return fmt.Errorf("unknown kind %q", kind)
}

// call sends a request, with the key as bearer when bearer is set (a webhook's is in its query),
// and returns the body of an answer with status want; another status is an error.
func (l *load) call(ctx context.Context, method, u string, bearer bool, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if bearer {
		req.Header.Set("Authorization", "Bearer "+l.d.key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	l.idempotencyKey(req)
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, unwrapURL(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("status %d, want %d: %s", resp.StatusCode, want, trim(b))
	}
	return b, nil
}

// checkReply checks that a send-wait or converse answer's response carries params back.
func checkReply(b []byte, params string) error {
	var r struct {
		Response *struct {
			Data json.RawMessage `json:"data"`
		} `json:"response"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Response == nil {
		return fmt.Errorf("answer %q (%v)", trim(b), err)
	}
	var got, want any
	if json.Unmarshal(r.Response.Data, &got) != nil || json.Unmarshal([]byte(params), &want) != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("echo answered data %s, want %s", trim(r.Response.Data), params)
	}
	return nil
}

// idempotencyKey gives a POST its own Idempotency-Key (a new UUID) under -idempotency-keys. A
// streamed converse goes without: one with a key is answered whole, not streamed.
func (l *load) idempotencyKey(req *http.Request) {
	if l.o.IdempotencyKeys && req.Method == http.MethodPost {
		req.Header.Set("Idempotency-Key", uuid.NewString())
	}
}

// converseStream makes a streamed Chat call and checks the stream: some delta events, then one
// message event whose reply is the offline model's "You said: {text}", and no error event.
func (l *load) converseStream(ctx context.Context, u, text string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+l.d.key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := l.client.Do(req)
	if err != nil {
		return unwrapURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), trim(b))
	}
	deltas, messages := 0, 0
	var reply string
	err = readEvents(resp.Body, func(ev sse.Event) bool {
		switch ev.Event {
		case "delta":
			deltas++
		case "message":
			messages++
			var r struct {
				Response *struct {
					Text string `json:"text"`
				} `json:"response"`
			}
			if json.Unmarshal([]byte(ev.Data), &r) == nil && r.Response != nil {
				reply = r.Response.Text
			}
		case "error":
			reply = "error event: " + ev.Data
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	if deltas == 0 || messages != 1 || reply != "You said: "+text {
		return fmt.Errorf("stream of %d deltas and %d message events, reply %q", deltas, messages, trim([]byte(reply)))
	}
	return nil
}

// readEvents reads Server-Sent Events from r (package sse) and calls f for each event and each
// comment line until f returns false or the stream ends.
func readEvents(r io.Reader, f func(sse.Event) bool) error {
	rd := sse.NewReaderSize(r, 4<<20)
	rd.KeepComments = true
	return rd.Each(f)
}

// listenLoop keeps a listen stream open on the thread of instance i until ctx ends, each
// connection for 30 to 90 s, resuming from the last event it received.
func (l *load) listenLoop(ctx context.Context, i int) {
	lastID := ""
	connected := false
	for ctx.Err() == nil {
		hold := 30*time.Second + rand.N(60*time.Second)
		id, err := l.listenOnce(ctx, i, lastID, hold, &connected)
		l.mu.Lock()
		if err != nil && ctx.Err() == nil {
			l.listeners.errors++
			l.showError(fmt.Sprintf("listen soak-%d", i), err)
		}
		l.mu.Unlock()
		if id != "" {
			lastID = id
		}
		if err != nil && ctx.Err() == nil {
			select { // not at once after a failure
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// listenOnce holds one listen stream for hold (or until ctx ends) and returns the id of the last
// message event it received; connected tells whether the listener had a stream before, and is
// set once this one is answered. The server ending the stream first, a resume id it does not find,
// and an overflow are errors.
func (l *load) listenOnce(ctx context.Context, i int, lastID string, hold time.Duration, connected *bool) (string, error) {
	hctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	u := l.d.ingress.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/listen?workflowId=" + url.QueryEscape(workflow(i)) + "&participantId=" + participant
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+l.d.key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := l.listen.Do(req)
	if err != nil {
		return "", unwrapURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, trim(b))
	}
	l.mu.Lock()
	l.listeners.open++
	l.listeners.connects++
	if *connected {
		l.listeners.reconnects++
	}
	*connected = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.listeners.open--
		l.mu.Unlock()
	}()
	var failure error
	got := ""
	err = readEvents(resp.Body, func(ev sse.Event) bool {
		switch {
		case ev.IsComment() && strings.Contains(ev.Comment, "not found"):
			failure = fmt.Errorf("resuming after %s: %s", lastID, ev.Comment)
			return false
		case ev.Event == "message":
			got = ev.ID
			l.mu.Lock()
			l.listeners.events++
			l.mu.Unlock()
		case ev.Event == "overflow" || ev.Event == "error":
			failure = fmt.Errorf("%s event: %s", ev.Event, trim([]byte(ev.Data)))
			return false
		}
		return true
	})
	if failure != nil {
		return got, failure
	}
	if hctx.Err() != nil {
		return got, nil // held as long as it was to be: the client left
	}
	if err == nil {
		err = errors.New("the server ended the stream")
	}
	return got, err
}

// snapshot is the load's counts at a sample.
type snapshot struct {
	requests, errors int64
	p50, p99         time.Duration // of the requests answered since the previous sample
	listeners        listenStats
}

// snapshot returns the counts so far and the latencies since the previous call.
func (l *load) snapshot() snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s snapshot
	for _, k := range l.stats {
		s.requests += k.requests
		s.errors += k.errors
	}
	s.p50, s.p99 = percentile(l.interval, 0.50), percentile(l.interval, 0.99)
	l.interval = l.interval[:0]
	s.listeners = l.listeners
	return s
}

// kindSummary is one kind's counts over the whole run.
type kindSummary struct {
	kind                 string
	requests, errors     int64
	p50, p99, maxLatency time.Duration
}

// loadSummary is the load's counts over the whole run.
type loadSummary struct {
	kinds     []kindSummary
	listeners listenStats
}

func (l *load) summary() loadSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s loadSummary
	for _, k := range kinds {
		st := l.stats[k]
		s.kinds = append(s.kinds, kindSummary{kind: k, requests: st.requests, errors: st.errors,
			p50: percentile(st.latencies, 0.50), p99: percentile(st.latencies, 0.99), maxLatency: percentile(st.latencies, 1)})
	}
	s.listeners = l.listeners
	return s
}

// percentile returns the q-quantile of ds (which it sorts), 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// unwrapURL drops url.Error's wrapper, which repeats the URL and so the key.
func unwrapURL(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// trim shortens an answer for an error message.
func trim(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
