package subscription_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subscription"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// api calls the stack's HTTP API with a key and a JSON body, and decodes a JSON answer into out.
func api(t testing.TB, method, url, key string, body, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(b) > 0 {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
	return resp.StatusCode
}

// event is one delivery a stackReceiver accepted.
type event struct {
	id, typ   string
	direction history.Direction
	requestID string
	thread    string
}

// stackReceiver refuses every delivery with 500 until its down period ends, then records them.
type stackReceiver struct {
	*httptest.Server
	secret  string
	upAt    time.Time
	mu      sync.Mutex
	got     []event
	refused int
	bad     []string
}

func (r *stackReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Now().Before(r.upAt) {
		r.refused++
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	hdr := map[string]string{}
	for k := range req.Header {
		hdr[k] = req.Header.Get(k)
	}
	if err := (webhooksig.Standard{Secret: r.secret}).Verify(hdr, body); err != nil {
		r.bad = append(r.bad, err.Error())
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Message history.Message `json:"message"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		r.bad = append(r.bad, err.Error())
	}
	m := ev.Data.Message
	r.got = append(r.got, event{id: req.Header.Get("Webhook-Id"), typ: ev.Type, direction: m.Direction, requestID: m.RequestID, thread: m.WorkflowID + "|" + m.ParticipantID})
	w.WriteHeader(http.StatusNoContent)
}

// TestSubscriberDownThenUp: a receiver that answers 500 for a while (30 s; AGENTBUS_TEST_DOWN
// sets another duration) and then 204 gets every event of the conversations that went on
// meanwhile, in order per thread, each signed, none missing.
func TestSubscriberDownThenUp(t *testing.T) {
	t.Parallel()
	down := 30 * time.Second
	if v := os.Getenv("AGENTBUS_TEST_DOWN"); v != "" {
		var err error
		down, err = time.ParseDuration(v)
		require.NoError(t, err)
	}
	if testing.Short() {
		down = 3 * time.Second
	}
	s := stacktest.Start(t, stacktest.Options{Subscriptions: subscription.Config{MaxBackoff: 2 * time.Second}})
	rcv := &stackReceiver{upAt: time.Now().Add(down)}
	rcv.Server = httptest.NewServer(rcv)
	defer rcv.Close()

	var sub subscription.Subscription
	require.Equal(t, http.StatusCreated, api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/subscriptions", s.Key,
		map[string]any{"url": rcv.URL + "/hooks", "events": []string{"message.incoming", "message.outgoing"}}, &sub))
	rcv.mu.Lock()
	rcv.secret = sub.Secret
	rcv.mu.Unlock()

	// Four threads, each sent to in order while the receiver is down.
	const threads, per = 4, 10
	sent := make(map[string][]string) // thread -> requestIds in order
	var mu sync.Mutex
	var wg sync.WaitGroup
	for th := range threads {
		wg.Go(func() {
			for i := range per {
				var ans struct {
					RequestID  string `json:"requestId"`
					WorkflowID string `json:"workflowId"`
				}
				status := api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send", s.Key,
					map[string]any{"agentName": "Echo", "activationName": fmt.Sprint("sub-", th), "participantId": "ada", "type": "Chat", "text": fmt.Sprint("m", i)}, &ans)
				if !assert.Equal(t, http.StatusAccepted, status) {
					return
				}
				mu.Lock()
				sent[ans.WorkflowID+"|ada"] = append(sent[ans.WorkflowID+"|ada"], ans.RequestID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	want := threads * per * 2
	// A request for the next event that the server no longer holds stalls delivery until the
	// missing heartbeats are noticed (4 s; 30 s at nats.go's default heartbeat): the bound leaves
	// less than 30 s after the receiver comes back.
	if !assert.Eventually(t, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(uniqueIDs(rcv.got)) >= want
	}, down+20*time.Second, 100*time.Millisecond, "every event delivered within 20 s after the receiver came back") {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		byThread := map[string]int{}
		for _, e := range rcv.got {
			byThread[fmt.Sprint(e.thread, " ", e.direction)]++
		}
		t.Fatalf("%d of %d events after %d refused attempts; deliveries by thread and direction: %v",
			len(uniqueIDs(rcv.got)), want, rcv.refused, byThread)
	}
	upAfter := time.Since(rcv.upAt)

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	assert.Empty(t, rcv.bad, "every signature verifies")
	assert.Positive(t, rcv.refused)
	// In order per thread: each thread's events, first delivery of each id, are its requests'
	// incoming and outgoing messages in the order they were sent.
	seen := map[string]bool{}
	perThread := map[string][]string{}
	for _, e := range rcv.got {
		if seen[e.id] {
			continue
		}
		seen[e.id] = true
		perThread[e.thread] = append(perThread[e.thread], fmt.Sprint(e.direction, ":", e.requestID))
	}
	for thread, reqs := range sent {
		var order []string
		for _, r := range reqs {
			order = append(order, fmt.Sprint(history.In, ":", r), fmt.Sprint(history.Out, ":", r))
		}
		assert.Equal(t, order, perThread[thread], "thread %s in order", thread)
	}
	t.Logf("down %v: refused %d attempts; %d events (%d deliveries) all in %v after the receiver came back",
		down, rcv.refused, len(seen), len(rcv.got), upAfter.Round(10*time.Millisecond))
}

func uniqueIDs(evs []event) []string {
	var ids []string
	for _, e := range evs {
		if !slices.Contains(ids, e.id) {
			ids = append(ids, e.id)
		}
	}
	return ids
}

// TestDeadLetterEvents: a request given up reaches a subscription of deadletter.created events
// of its agent, as the dead letter the admin API shows; another agent's do not.
func TestDeadLetterEvents(t *testing.T) {
	t.Parallel()
	failing := agent.New("Failing")
	failing.WebhookFunc("fail", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Retry(errors.New("always down"))
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(), failing}})
	got := make(chan map[string]any, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var ev map[string]any
		if json.NewDecoder(req.Body).Decode(&ev) == nil {
			ev["webhook-id"] = req.Header.Get("Webhook-Id")
			got <- ev
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	var sub subscription.Subscription
	require.Equal(t, http.StatusCreated, api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/subscriptions", s.Key,
		map[string]any{"url": rcv.URL, "events": []string{"deadletter.created"}, "agents": []string{"Failing"}}, &sub))

	status := api(t, http.MethodPost, s.URL+"/api/user/webhooks/Failing/fail?apikey="+s.Key, "", map[string]any{}, nil)
	require.GreaterOrEqual(t, status, 500)
	var ev map[string]any
	select {
	case ev = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("no deadletter.created event")
	}
	assert.Equal(t, "deadletter.created", ev["type"])
	data := ev["data"].(map[string]any)
	assert.Equal(t, "Failing", data["agentName"])
	dl := data["deadLetter"].(map[string]any)
	assert.Equal(t, "always down", dl["error"])
	// The event's timestamp is the dead letter's deadAt; both are in the one form of every time.
	assert.Equal(t, dl["deadAt"], ev["timestamp"])
	assert.Regexp(t, timefmt.Pattern, ev["timestamp"])
	assert.Regexp(t, timefmt.Pattern, dl["receivedAt"])
	assert.Equal(t, fmt.Sprintf("dl_%v", dl["id"]), ev["webhook-id"])

	var letters struct {
		DeadLetters []map[string]any `json:"deadLetters"`
	}
	require.Equal(t, http.StatusOK, api(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/deadletters", s.Key, nil, &letters))
	require.Len(t, letters.DeadLetters, 1)
	assert.Equal(t, letters.DeadLetters[0]["requestId"], dl["requestId"])
	select {
	case ev := <-got:
		t.Fatalf("a second event: %v", ev)
	case <-time.After(300 * time.Millisecond):
	}
}

// BenchmarkWebhookWithStuckReceiver measures webhook echo calls through the whole stack (16
// clients) without subscriptions, then with a subscription to every message event whose
// receiver never answers, and prints the latencies of both and their ratio: a receiver that
// hangs holds back only its own deliveries.
func BenchmarkWebhookWithStuckReceiver(b *testing.B) {
	s := stacktest.Start(b, stacktest.Options{})
	stuck := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-stuck:
		case <-req.Context().Done():
		}
	}))
	defer rcv.Close()
	defer close(stuck)
	const calls, clients = 4000, 16
	url := s.URL + "/api/user/webhooks/Echo/echo?apikey=" + s.Key
	webhookLatencies(b, url, calls/2, clients) // warm up
	for range b.N {
		before := webhookLatencies(b, url, calls, clients)
		var sub subscription.Subscription
		require.Equal(b, http.StatusCreated, api(b, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/subscriptions", s.Key,
			map[string]any{"url": rcv.URL, "events": []string{"message.incoming", "message.outgoing"}}, &sub))
		with := webhookLatencies(b, url, calls, clients)
		require.Equal(b, http.StatusNoContent, api(b, http.MethodDelete, s.URL+"/api/v1/admin/tenants/default/subscriptions/"+sub.ID, s.Key, nil, nil))
		after := webhookLatencies(b, url, calls, clients)
		base := (before.rate + after.rate) / 2
		b.Logf("webhook echo, %d calls over %d clients: without subscriptions p50 %v p99 %v %.0f/s, and again p50 %v p99 %v %.0f/s; with a receiver that never answers p50 %v p99 %v %.0f/s: %.2f of the throughput without",
			calls, clients, before.p50, before.p99, before.rate, after.p50, after.p99, after.rate, with.p50, with.p99, with.rate, with.rate/base)
		b.ReportMetric(with.rate/base, "throughput-ratio")
	}
}

type latencies struct {
	p50, p99 time.Duration
	rate     float64
}

// webhookLatencies makes n POSTs to url over the given clients and returns their latencies.
func webhookLatencies(b *testing.B, url string, n, clients int) latencies {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := c; i < n; i += clients {
				t0 := time.Now()
				resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(`{"n":1}`)))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("webhook answered %d", resp.StatusCode)
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
	return latencies{p50: all[len(all)/2], p99: all[len(all)*99/100], rate: float64(len(all)) / took.Seconds()}
}
