package proctest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
)

// countLoad keeps calling Echo's count method on a set of instances, each instance's calls one
// after another, each call with an Idempotency-Key of its own that it is retried with until it
// is answered 200: after a 5xx or a connection error, as a careful client does. With several
// ingresses (ingresses), a worker calls one of them and, after a failed attempt, retries on the
// next.
type countLoad struct {
	sys       *system
	wf        string        // the instances' workflow id prefix: echoWF, or another agent's
	within    time.Duration // how long a call is retried before it is given up
	ingresses []string      // the ingresses' base URLs; none: the system's ingress
	stop      chan struct{}
	wg        sync.WaitGroup

	mu       sync.Mutex
	counts   map[string][]int       // per instance, the count each accepted call answered
	times    map[string][]time.Time // per instance, when each accepted call was answered
	calls    []span                 // each accepted call, from its first attempt to its answer
	running  map[string]time.Time   // the calls under way, by key, and when each started
	failures []time.Time            // attempts that failed
	reasons  map[string]int         // why they failed: a status, or the connection error
	broken   []string               // calls that never got a 200
	failedOf map[string][]string    // per instance, its last failed attempts (key: reason)
	switched int                    // attempts made on another ingress than the one before
}

// span is when a call started and when it was answered.
type span struct{ start, end time.Time }

// startCountLoad starts workers clients over Echo's instances named prefix-0 … prefix-(n-1).
func startCountLoad(sys *system, prefix string, n, workers int) *countLoad {
	return startCountLoadOn(sys, echoWF, prefix, n, workers, 3*time.Minute)
}

// startCountLoadOn starts workers clients over the instances wf+prefix-0 … wf+prefix-(n-1) of an
// agent with Echo's count and state webhooks, each call retried for at most within.
func startCountLoadOn(sys *system, wf, prefix string, n, workers int, within time.Duration) *countLoad {
	return startCountLoadVia(sys, nil, wf, prefix, n, workers, within)
}

// startCountLoadVia starts the load of startCountLoadOn, its workers spread over ingresses (base
// URLs; none: the system's ingress), each moving to the next ingress after a failed attempt.
func startCountLoadVia(sys *system, ingresses []string, wf, prefix string, n, workers int, within time.Duration) *countLoad {
	l := &countLoad{sys: sys, wf: wf, within: within, ingresses: ingresses, stop: make(chan struct{}),
		counts: map[string][]int{}, times: map[string][]time.Time{}, reasons: map[string]int{}, running: map[string]time.Time{},
		failedOf: map[string][]string{}}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	for w := range workers {
		l.wg.Go(func() {
			via := w
			for seq := 0; ; seq++ {
				for i := w; i < n; i += workers {
					select {
					case <-l.stop:
						return
					default:
					}
					a := fmt.Sprintf("%s-%d", prefix, i)
					l.call(a, fmt.Sprintf("%s-%s-%s-%d", prefix, run, a, seq), &via)
				}
			}
		})
	}
	return l
}

// call makes one accepted count call, retrying it with its key: on the ingress *via names (an
// index into l.ingresses), and after a failed attempt on the next one.
func (l *countLoad) call(activation, key string, via *int) {
	start := time.Now()
	l.mu.Lock()
	l.running[key] = start
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.running, key)
		l.mu.Unlock()
	}()
	b, err := untilAnswered(context.Background(), l.within, func(ctx context.Context) (int, []byte, error) {
		if len(l.ingresses) == 0 {
			return l.sys.webhookOn(ctx, l.wf, activation, "count", nil, "Idempotency-Key", key)
		}
		status, b, err := l.sys.webhookAt(ctx, l.ingresses[*via%len(l.ingresses)], l.wf, activation, "count", nil, "Idempotency-Key", key)
		if err != nil || status >= 500 {
			*via++
			l.mu.Lock()
			l.switched++
			l.mu.Unlock()
		}
		return status, b, err
	}, func(reason string) { l.failed(activation, key, reason) })
	var r struct {
		Count int `json:"count"`
	}
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		l.fail(fmt.Sprintf("%s %s: %v", activation, key, err))
		return
	}
	end := time.Now()
	l.mu.Lock()
	l.counts[activation] = append(l.counts[activation], r.Count)
	l.times[activation] = append(l.times[activation], end)
	l.calls = append(l.calls, span{start, end})
	l.mu.Unlock()
}

// waitRecovered waits until every call under way started less than a second ago: the calls
// slowed by an event are answered and the load runs as usual again. It fails the test after
// within.
func (l *countLoad) waitRecovered(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		oldest := time.Now()
		for _, start := range l.running {
			if start.Before(oldest) {
				oldest = start
			}
		}
		l.mu.Unlock()
		if time.Since(oldest) < time.Second {
			return
		}
		require.True(t, time.Now().Before(deadline), "a call has been under way for %v", time.Since(oldest).Round(time.Millisecond))
		time.Sleep(50 * time.Millisecond)
	}
}

// latency describes the accepted calls' durations: the median of the calls answered in the
// 3 s before at (the usual latency), and of the calls under way at any time between at and
// until, how many there were, the slowest one's duration, and how many took longer than 1 s.
type latency struct {
	usual, slowest time.Duration
	during, slow   int
}

// latencyAround measures the calls around an event at at, until until (latency).
func (l *countLoad) latencyAround(at, until time.Time) latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	var before []time.Duration
	var out latency
	for _, c := range l.calls {
		d := c.end.Sub(c.start)
		if c.end.Before(at) && !c.end.Before(at.Add(-3*time.Second)) {
			before = append(before, d)
		}
		if c.start.Before(until) && c.end.After(at) {
			out.during++
			out.slowest = max(out.slowest, d)
			if d > time.Second {
				out.slow++
			}
		}
	}
	if len(before) > 0 {
		slices.Sort(before)
		out.usual = before[len(before)/2]
	}
	return out
}

// extra is how much longer than usual the slowest call under way took.
func (x latency) extra() time.Duration { return max(x.slowest-x.usual, 0) }

func (x latency) String() string {
	return fmt.Sprintf("%d calls under way, the slowest %v (usually %v: %v extra), %d over 1 s",
		x.during, x.slowest.Round(time.Millisecond), x.usual.Round(time.Millisecond), x.extra().Round(time.Millisecond), x.slow)
}

// failed records an attempt of the call with key to activation that failed, and why.
func (l *countLoad) failed(activation, key, reason string) {
	l.mu.Lock()
	l.failures = append(l.failures, time.Now())
	l.reasons[reason]++
	f := append(l.failedOf[activation], key+": "+reason)
	l.failedOf[activation] = f[max(0, len(f)-20):]
	l.mu.Unlock()
}

// untilAnswered makes a call with attempt until it is answered 200 and returns that answer's
// body, as a careful client with an Idempotency-Key does: again after a 5xx or a connection
// error, not after a 4xx nor after a third 500 (a dead letter's answer is kept for the key and
// will not change), and for at most within, or until ctx ends. failed is told why each failed
// attempt failed; the error says why the call was given up.
func untilAnswered(ctx context.Context, within time.Duration, attempt func(context.Context) (int, []byte, error), failed func(reason string)) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	deadLettered := 0
	for {
		status, b, err := attempt(ctx)
		if err == nil && status == http.StatusOK {
			return b, nil
		}
		failed(reason(status, b, err))
		if err == nil && status == http.StatusInternalServerError {
			if deadLettered++; deadLettered == 3 {
				return nil, fmt.Errorf("%d %s", status, b)
			}
		}
		if err == nil && status < 500 {
			return nil, fmt.Errorf("%d %s", status, b)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer in %v (last %d %v)", within, status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reason names why an attempt failed: the connection error, or the status with the problem's
// title and type (which tells the 503s apart).
func reason(status int, body []byte, err error) string {
	if err != nil {
		// Without the client's own port, which differs on every connection.
		return "connection: " + localEnd.ReplaceAllString(err.Error(), "tcp ")
	}
	var p struct {
		Type  string `json:"type"`
		Title string `json:"title"`
	}
	_ = json.Unmarshal(body, &p)
	return fmt.Sprintf("%d %s (%s)", status, p.Title, p.Type)
}

// localEnd is the local address of a connection in a net.OpError's text ("read tcp A->B: …").
var localEnd = regexp.MustCompile(`tcp [0-9.:\[\]]+->`)

// failureReasons returns how many attempts failed for each reason, most frequent first.
func (l *countLoad) failureReasons() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return formatReasons(l.reasons)
}

// formatReasons lists how many attempts failed for each reason, most frequent first.
func formatReasons(reasons map[string]int) string {
	type kv struct {
		reason string
		n      int
	}
	var all []kv
	for r, n := range reasons {
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
		ok := assertOneToN(t, a, got)
		n := l.sys.counterOn(ctx, t, l.wf, a)
		if !assert.Equal(t, len(got), n, "instance %s counted %d calls, %d were accepted", a, n, len(got)) || !ok {
			l.logThread(t, a, got)
		}
	}
}

// logThread logs, for an instance whose counts are wrong, what its history holds around the
// first count its callers were not answered with (which request each stored answer was for), its
// calls given up and last failed attempts, and the lines its hosts logged of it.
func (l *countLoad) logThread(t *testing.T, activation string, counts []int) {
	t.Helper()
	_, gap := firstGap(counts)
	msgs := l.sys.thread(t, l.wf+activation, "webhook")
	// History keeps a webhook's answer as text: {"statusCode":200,…,"content":"{\"count\":86,…}"}.
	answered := regexp.MustCompile(fmt.Sprintf(`count\\?":%d\b`, gap))
	var lines []string
	shown := 0 // messages before this one are shown already: windows that overlap show once
	for i, m := range msgs {
		if !answered.Match(m.Data) {
			continue
		}
		for _, n := range msgs[max(shown, i-8):min(len(msgs), i+8)] {
			lines = append(lines, fmt.Sprintf("%d %s %.200s", n.Direction, n.RequestID, n.Data))
		}
		shown = min(len(msgs), i+8)
	}
	t.Logf("instance %s: first count not answered %d; its thread (%d messages) around it:\n%s", activation, gap, len(msgs), strings.Join(lines, "\n"))
	var broken []string
	for _, b := range l.broken {
		if strings.HasPrefix(b, activation+" ") {
			broken = append(broken, b)
		}
	}
	t.Logf("instance %s: calls given up %q; last failed attempts %q", activation, broken, l.failedOf[activation])
	// What the hosts logged of the instance (the last lines of each).
	l.sys.mu.Lock()
	hosts := maps.Clone(l.sys.hosts)
	l.sys.mu.Unlock()
	for name, p := range hosts {
		var mine []string
		for line := range strings.Lines(p.Log()) {
			if strings.Contains(line, l.wf+activation+`"`) {
				mine = append(mine, strings.TrimSpace(line))
			}
		}
		t.Logf("%s logged %d lines of instance %s; the last:\n%s", name, len(mine), activation, strings.Join(mine[max(0, len(mine)-30):], "\n"))
	}
}

// assertOneToN checks that the counts an instance answered are 1..n, each once: no call was
// counted twice or answered with another's count.
func assertOneToN(t *testing.T, instance string, counts []int) bool {
	t.Helper()
	sorted, gap := firstGap(counts)
	if gap <= len(sorted) {
		return assert.Fail(t, "counts are not 1..n", "instance %s: answered counts %v", instance, sorted)
	}
	return true
}

// firstGap returns counts sorted and the first n of 1, 2, … not in its place there (len+1 when
// they are 1..len, each once).
func firstGap(counts []int) (sorted []int, gap int) {
	sorted = slices.Clone(counts)
	sort.Ints(sorted)
	for i, c := range sorted {
		if c != i+1 {
			return sorted, i + 1
		}
	}
	return sorted, len(sorted) + 1
}

// counter reads an instance's counter (Echo's state count), as the loads' clients call: again
// after a 5xx or a connection error, which a system that has just lost a process may still
// answer, until ctx ends.
func (s *system) counter(ctx context.Context, t *testing.T, activation string) int {
	t.Helper()
	return s.counterOn(ctx, t, echoWF, activation)
}

// counterOn reads the counter of the instance wf+activation as counter does.
func (s *system) counterOn(ctx context.Context, t *testing.T, wf, activation string) int {
	t.Helper()
	status, b, err := s.webhookOn(ctx, wf, activation, "state", nil)
	for (err != nil || status >= 500) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		status, b, err = s.webhookOn(ctx, wf, activation, "state", nil)
	}
	require.NoError(t, err, "reading %s's state", activation)
	require.Equal(t, http.StatusOK, status, "reading %s's state: %s", activation, b)
	var st struct {
		State struct {
			Count int `json:"count"`
		} `json:"state"`
	}
	require.NoError(t, json.Unmarshal(b, &st), "reading %s's state", activation)
	return st.State.Count
}

// relayLoad sends relays all at once, each from a client of its own: relay i asks caller
// i mod len(callers) to call count on callee (i / len(callers)) mod len(callees) through
// Agent2Agent (Echo's relay), over converse with an Idempotency-Key of its own, retried with it
// until it is answered 200 (untilAnswered). A caller's relays share a conversation, so they run
// one after another and the load lasts while the callers' host is killed.
type relayLoad struct {
	wg    sync.WaitGroup
	total int

	mu       sync.Mutex
	sent     map[string][]string // per callee, the keys of the relays sent to it
	from     map[string][]string // per caller, the keys of the relays it was asked for
	answers  []relayAnswer       // in the order they came
	failures int                 // attempts that failed
	reasons  map[string]int      // why they failed
	broken   []string            // relays that never got a 200
}

// relayAnswer is a relay's answer: when it came, and the count its callee answered.
type relayAnswer struct {
	at     time.Time
	callee string
	count  int
}

// relayParticipant is the participant of the relays: each caller's relays share its thread.
const relayParticipant = "relay"

// relayTimeout is how long one attempt of a relay waits for its answer: shorter than the
// recovery from a kill may take, so that some relays are asked again with their key.
const relayTimeout = 15 * time.Second

// startRelayLoad sends relays relays from callers to callees. Relays still under way when the
// test ends are given up.
func startRelayLoad(t *testing.T, sys *system, callers, callees []string, relays int) *relayLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &relayLoad{total: relays, sent: map[string][]string{}, from: map[string][]string{}, reasons: map[string]int{}}
	t.Cleanup(func() {
		cancel()
		l.wg.Wait()
	})
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	for i := range relays {
		caller, callee := callers[i%len(callers)], callees[(i/len(callers))%len(callees)]
		key := fmt.Sprintf("relay-%s-%d", run, i)
		l.sent[callee] = append(l.sent[callee], key)
		l.from[caller] = append(l.from[caller], key)
		l.wg.Go(func() { l.relay(ctx, sys, caller, callee, key) })
	}
	return l
}

// relay makes one relay, retrying it with its key, and records the callee's count it answered.
func (l *relayLoad) relay(ctx context.Context, sys *system, caller, callee, key string) {
	query := url.Values{"participantId": {relayParticipant}, "timeoutSeconds": {fmt.Sprint(relayTimeout.Seconds())}}
	b, err := untilAnswered(ctx, 2*time.Minute, func(ctx context.Context) (int, []byte, error) {
		return sys.converse(ctx, caller, "relay", map[string]string{"activation": callee, "method": "count"}, query, "Idempotency-Key", key)
	}, l.failed)
	var r struct {
		Response struct {
			Data struct {
				Result struct {
					Count int `json:"count"`
				} `json:"result"`
			} `json:"data"`
		} `json:"response"`
	}
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err == nil && r.Response.Data.Result.Count < 1 {
		err = fmt.Errorf("no count in the answer %s", b)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.broken = append(l.broken, fmt.Sprintf("%s → %s %s: %v", caller, callee, key, err))
		return
	}
	l.answers = append(l.answers, relayAnswer{at: time.Now(), callee: callee, count: r.Response.Data.Result.Count})
}

func (l *relayLoad) failed(reason string) {
	l.mu.Lock()
	l.failures++
	l.reasons[reason]++
	l.mu.Unlock()
}

// failureReasons returns how many attempts failed for each reason, most frequent first.
func (l *relayLoad) failureReasons() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return formatReasons(l.reasons)
}

// answered returns how many relays were answered 200.
func (l *relayLoad) answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answers)
}

// waitAnswered waits until n relays are answered, failing the test after within.
func (l *relayLoad) waitAnswered(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for l.answered() < n {
		require.True(t, time.Now().Before(deadline), "%d of %d relays answered after %v, waiting for %d", l.answered(), l.total, within, n)
		time.Sleep(time.Millisecond)
	}
}

// answersSince returns the answers that came at or after t, in the order they came.
func (l *relayLoad) answersSince(t time.Time) []relayAnswer {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.answers, t, func(a relayAnswer, t time.Time) int { return a.at.Compare(t) })
	return slices.Clone(l.answers[i:])
}

// finish waits until every relay is answered or given up.
func (l *relayLoad) finish() {
	l.wg.Wait()
}

// verify checks that every relay was answered and that every callee counted each relay sent to
// it once: the relays' answers carry its counts 1..n once each, its counter is n, and its
// thread with the callers holds one call of each relay (a request id derived from the relay's
// key) and a reply to each. Every caller's thread holds each of its relays once, each answered.
func (l *relayLoad) verify(t *testing.T, sys *system) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.Empty(t, l.broken, "relays that never got their answer")
	assert.Len(t, l.answers, l.total, "relays answered 200")
	counts := map[string][]int{}
	for _, a := range l.answers {
		counts[a.callee] = append(counts[a.callee], a.count)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for callee, keys := range l.sent {
		sent := len(keys)
		assert.Len(t, counts[callee], sent, "callee %s: answered relays of the %d sent to it", callee, sent)
		assertOneToN(t, callee, counts[callee])
		n := sys.counter(ctx, t, callee)
		assert.Equal(t, sent, n, "callee %s counted %d relays, %d were sent to it", callee, n, sent)

		calls, replies := threadRequests(t, sys, callee, strings.ToLower(agent.CallerPrefix+echo.Name))
		for i, id := range calls {
			calls[i], _, _ = strings.Cut(id, ".") // a call's request id derives from its caller's
		}
		assert.ElementsMatch(t, keys, calls, "callee %s: the calls in its thread are not one per relay sent to it", callee)
		assert.Equal(t, sent, replies, "callee %s: replies in its thread", callee)
	}
	for caller, keys := range l.from {
		relays, replies := threadRequests(t, sys, caller, relayParticipant)
		assert.ElementsMatch(t, keys, relays, "caller %s: the relays in its thread are not one per relay asked of it", caller)
		assert.Equal(t, len(keys), replies, "caller %s: replies in its thread", caller)
	}
}

// threadRequests reads an Echo instance's thread with participant and returns the request ids of
// its incoming messages, oldest first, and how many replies it holds.
func threadRequests(t *testing.T, sys *system, activation, participant string) (requests []string, replies int) {
	t.Helper()
	for _, m := range sys.thread(t, echoWF+activation, participant) {
		if m.Direction == 0 {
			requests = append(requests, m.RequestID)
		} else {
			replies++
		}
	}
	return requests, replies
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
		status, _, err := l.sys.send(ctx, false, body)
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
	Text      *string         `json:"text"`
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
