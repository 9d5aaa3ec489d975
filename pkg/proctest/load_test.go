package proctest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countLoad keeps calling Echo's count method on a set of instances, each instance's calls one
// after another, each call with an Idempotency-Key of its own that it is retried with until it
// is answered 200: after a 5xx or a connection error, as a careful client does.
type countLoad struct {
	sys  *system
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	counts   map[string][]int // per instance, the count each accepted call answered
	failures []time.Time      // attempts that failed
	reasons  map[string]int   // why they failed: a status, or the connection error
	broken   []string         // calls that never got a 200
}

// startCountLoad starts workers clients over instances named prefix-0 … prefix-(n-1).
func startCountLoad(sys *system, prefix string, n, workers int) *countLoad {
	l := &countLoad{sys: sys, stop: make(chan struct{}), counts: map[string][]int{}, reasons: map[string]int{}}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	for w := range workers {
		l.wg.Go(func() {
			for seq := 0; ; seq++ {
				for i := w; i < n; i += workers {
					select {
					case <-l.stop:
						return
					default:
					}
					a := fmt.Sprintf("%s-%d", prefix, i)
					l.call(a, fmt.Sprintf("%s-%s-%s-%d", prefix, run, a, seq))
				}
			}
		})
	}
	return l
}

// call makes one accepted count call, retrying it with its key.
func (l *countLoad) call(activation, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deadLettered := 0
	for {
		status, b, err := l.sys.webhook(ctx, activation, "count", nil, "Idempotency-Key", key)
		if err == nil && status == http.StatusOK {
			var r struct {
				Count int `json:"count"`
			}
			if json.Unmarshal(b, &r) == nil {
				l.mu.Lock()
				l.counts[activation] = append(l.counts[activation], r.Count)
				l.mu.Unlock()
				return
			}
		}
		l.mu.Lock()
		l.failures = append(l.failures, time.Now())
		l.reasons[reason(status, b, err)]++
		l.mu.Unlock()
		if err == nil && status == http.StatusInternalServerError {
			// A dead letter's answer is kept for the key and will not change.
			if deadLettered++; deadLettered == 3 {
				l.fail(fmt.Sprintf("%s %s: %d %s", activation, key, status, b))
				return
			}
		}
		if err == nil && status < 500 {
			l.fail(fmt.Sprintf("%s %s: %d %s", activation, key, status, b))
			return
		}
		if ctx.Err() != nil {
			l.fail(fmt.Sprintf("%s %s: no answer in 3 minutes (last %d %v)", activation, key, status, err))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reason names why an attempt failed: the connection error, or the status with the problem's
// title and type (which tells the 503s apart).
func reason(status int, body []byte, err error) string {
	if err != nil {
		return "connection: " + err.Error()
	}
	var p struct {
		Type  string `json:"type"`
		Title string `json:"title"`
	}
	_ = json.Unmarshal(body, &p)
	return fmt.Sprintf("%d %s (%s)", status, p.Title, p.Type)
}

// failureReasons returns how many attempts failed for each reason, most frequent first.
func (l *countLoad) failureReasons() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type kv struct {
		reason string
		n      int
	}
	var all []kv
	for r, n := range l.reasons {
		all = append(all, kv{r, n})
	}
	slices.SortFunc(all, func(a, b kv) int { return b.n - a.n })
	var out []string
	for _, r := range all {
		out = append(out, fmt.Sprintf("%d× %s", r.n, r.reason))
	}
	return strings.Join(out, "; ")
}

func (l *countLoad) fail(what string) {
	l.mu.Lock()
	l.broken = append(l.broken, what)
	l.mu.Unlock()
}

// finish stops the load once every call in flight is accepted.
func (l *countLoad) finish() {
	close(l.stop)
	l.wg.Wait()
}

// accepted returns how many calls were answered 200.
func (l *countLoad) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.counts {
		n += len(c)
	}
	return n
}

// failedBetween returns how many attempts failed between a and b, and the last one's time.
func (l *countLoad) failedBetween(a, b time.Time) (int, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, last := 0, time.Time{}
	for _, f := range l.failures {
		if !f.Before(a) && f.Before(b) {
			n++
			last = f
		}
	}
	return n, last
}

// verify checks that every instance counted exactly its accepted calls: the answers carry each
// value 1..n once, and the instance's state is n. Nothing was lost or run twice.
func (l *countLoad) verify(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.Empty(t, l.broken, "calls that never got their answer")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for a, got := range l.counts {
		sorted := slices.Clone(got)
		sort.Ints(sorted)
		for i, c := range sorted {
			if c != i+1 {
				assert.Fail(t, "counts are not 1..n", "instance %s: answered counts %v", a, sorted)
				break
			}
		}
		// Read as the load's clients call: again after a 5xx or a connection error, which a
		// cluster that has just elected leaders may still answer.
		status, b, err := l.sys.webhook(ctx, a, "state", nil)
		for (err != nil || status >= 500) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			status, b, err = l.sys.webhook(ctx, a, "state", nil)
		}
		require.NoError(t, err, "reading %s's state", a)
		require.Equal(t, http.StatusOK, status, "reading %s's state: %s", a, b)
		var st struct {
			State struct {
				Count int `json:"count"`
			} `json:"state"`
		}
		require.NoError(t, json.Unmarshal(b, &st))
		assert.Equal(t, len(got), st.State.Count, "instance %s counted %d calls, %d were accepted", a, st.State.Count, len(got))
	}
}

// drainCall is one webhook call made while an ingress drains.
type drainCall struct {
	start, end time.Time
	status     int
	err        error
	body       []byte
}

// drainLoad keeps making slow and quick webhook calls to Echo, and records every call with
// when it started and ended and what it got.
type drainLoad struct {
	ctx  context.Context
	sys  *system
	stop chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	calls []drainCall
}

// startDrainLoad starts workers clients, half of them calling sleep (2 s) and half count, each
// on an instance of its own, and all of them again as soon as a call ends.
func startDrainLoad(ctx context.Context, sys *system, workers int) *drainLoad {
	l := &drainLoad{ctx: ctx, sys: sys, stop: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() { l.work(w) })
	}
	return l
}

// work makes worker w's calls until the load stops. Each worker has an instance of its own, so
// that the sleeps run side by side, and the sleepers start apart, so that some are far from
// done when a signal comes.
func (l *drainLoad) work(w int) {
	activation := fmt.Sprintf("drain-%d", w)
	time.Sleep(time.Duration(w/2) * 500 * time.Millisecond)
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return
		default:
		}
		c := drainCall{start: time.Now()}
		if w%2 == 0 {
			c.status, c.body, c.err = l.sys.webhook(l.ctx, activation, "sleep", url.Values{"ms": {"2000"}})
		} else {
			c.status, c.body, c.err = l.sys.webhook(l.ctx, activation, "count", nil, "Idempotency-Key", fmt.Sprintf("%s-%d", activation, seq))
		}
		c.end = time.Now()
		l.mu.Lock()
		l.calls = append(l.calls, c)
		l.mu.Unlock()
		if c.err != nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// finish stops the load, waits for the calls under way and returns every call made.
func (l *drainLoad) finish() []drainCall {
	close(l.stop)
	l.wg.Wait()
	return l.calls
}

// observation is one answer of Echo's host method: which host served the instance, when.
type observation struct {
	start, end time.Time
	host       string
}

// hostOfLoad keeps asking which host serves each of a set of instances, each instance from one
// client at a time, and records every answer.
type hostOfLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	seen map[string][]observation // per instance, its answers
}

// startHostOfLoad starts clients clients over instances named spread-0 … spread-(n-1), each
// instance called by one client only. A call that fails fails the test.
func startHostOfLoad(ctx context.Context, t *testing.T, sys *system, n, clients int) *hostOfLoad {
	l := &hostOfLoad{stop: make(chan struct{}), seen: map[string][]observation{}}
	for c := range clients {
		l.wg.Go(func() {
			for {
				for i := c; i < n; i += clients {
					select {
					case <-l.stop:
						return
					default:
					}
					a := fmt.Sprintf("spread-%d", i)
					start := time.Now()
					h, err := sys.hostOf(ctx, a)
					if !assert.NoError(t, err, "host of %s during the join", a) {
						continue
					}
					l.mu.Lock()
					l.seen[a] = append(l.seen[a], observation{start, time.Now(), h})
					l.mu.Unlock()
				}
			}
		})
	}
	return l
}

// finish stops the load, waits for the calls under way and returns every answer, by instance.
func (l *hostOfLoad) finish() map[string][]observation {
	close(l.stop)
	l.wg.Wait()
	return l.seen
}

// orderLoad sends, to each of a set of conversations, Data count messages through the send
// endpoint (answered 202 before they run, so that several wait in the inbox at once), one after
// another, each with a requestId of its own that it is retried with until it is accepted.
type orderLoad struct {
	sys  *system
	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	sent map[string][]string // per activation, the requestIds accepted, in order
}

func startOrderLoad(sys *system, prefix string, n int, every time.Duration) *orderLoad {
	l := &orderLoad{sys: sys, stop: make(chan struct{}), sent: map[string][]string{}}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	for i := range n {
		a := fmt.Sprintf("%s-%d", prefix, i)
		l.wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for seq := 0; ; seq++ {
				select {
				case <-l.stop:
					return
				case <-t.C:
				}
				id := fmt.Sprintf("%s-%s-%d", a, run, seq)
				l.send(a, id)
			}
		})
	}
	return l
}

func (l *orderLoad) send(activation, requestID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body := map[string]any{"agentName": "Echo", "activationName": activation, "participantId": "p", "type": "Data", "text": "count", "requestId": requestID}
	for ctx.Err() == nil {
		status, _, err := l.sys.send(ctx, body)
		if err == nil && status == http.StatusAccepted {
			l.mu.Lock()
			l.sent[activation] = append(l.sent[activation], requestID)
			l.mu.Unlock()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *orderLoad) finish() {
	close(l.stop)
	l.wg.Wait()
}

// verify waits until every conversation's history holds all its messages and checks that it
// shows them in the order they were sent, each once, each answered with the next count.
func (l *orderLoad) verify(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute)
	for a, sent := range l.sent {
		var msgs []threadMessage
		for {
			msgs = l.sys.thread(t, echoWF+a, "p")
			if countReplies(msgs) >= len(sent) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		var in []string
		var counts []int
		for _, m := range msgs {
			switch m.Direction {
			case 0:
				in = append(in, m.RequestID)
			case 1:
				var d struct {
					Count int `json:"count"`
				}
				_ = json.Unmarshal(m.Data, &d)
				counts = append(counts, d.Count)
			}
		}
		assert.Equal(t, sent, in, "conversation %s: history does not show the requests in send order, each once", a)
		want := make([]int, len(sent))
		for i := range want {
			want[i] = i + 1
		}
		assert.Equal(t, want, counts, "conversation %s: replies are not counts 1..n in order", a)
	}
}

func countReplies(msgs []threadMessage) int {
	n := 0
	for _, m := range msgs {
		if m.Direction == 1 {
			n++
		}
	}
	return n
}

// threadMessage is a history message as the history endpoint shows it.
type threadMessage struct {
	Direction int             `json:"direction"`
	RequestID string          `json:"requestId"`
	Data      json.RawMessage `json:"data"`
}

// thread reads a whole conversation thread, oldest first.
func (s *system) thread(t *testing.T, workflowID, participant string) []threadMessage {
	t.Helper()
	ctx := context.Background()
	var all []threadMessage
	before := ""
	for {
		q := url.Values{"workflowId": {workflowID}, "participantId": {participant}, "pageSize": {"100"}}
		if before != "" {
			q.Set("before", before)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.ingress.URL+"/api/v1/admin/tenants/default/messaging/history?"+q.Encode(), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.key)
		resp, err := s.client.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		var page struct {
			Messages []threadMessage `json:"messages"`
			Next     string          `json:"next"`
		}
		require.NoError(t, json.Unmarshal(b, &page))
		all = append(all, page.Messages...)
		if page.Next == "" {
			break
		}
		before = page.Next
	}
	slices.Reverse(all) // pages are newest first
	return all
}
