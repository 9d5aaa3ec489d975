package subscription_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subscription"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// receiver is a test endpoint that records what it accepted and answers fail() with 500.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []delivery
	attempts atomic.Int64
	fail     func() bool
	// refuse, when set, decides an attempt the receiver did not fail: it gets the event's type and
	// which attempt of the event (by webhook-id) this is, counting from 1, and returns the status
	// to refuse it with, or 0 to accept it.
	refuse func(typ string, attempt int) int
	// tries counts the attempts of each event by webhook-id; types holds each one's type.
	tries  map[string]int
	types  map[string]string
	secret string
}

type delivery struct {
	id, typ, thread, text string
	verifyErr             error
	body                  []byte
}

func newReceiver(t *testing.T, fail func() bool) *receiver {
	return startReceiver(t, &receiver{fail: fail})
}

// newRefusingReceiver returns a receiver that refuses the attempts refuse names.
func newRefusingReceiver(t *testing.T, refuse func(typ string, attempt int) int) *receiver {
	return startReceiver(t, &receiver{refuse: refuse})
}

func startReceiver(t *testing.T, r *receiver) *receiver {
	r.tries, r.types = map[string]int{}, map[string]string{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.attempts.Add(1)
		body, _ := io.ReadAll(req.Body)
		var ev struct {
			Type string `json:"type"`
			Data struct {
				Message    history.Message `json:"message"`
				AgentName  string          `json:"agentName"`
				DeadLetter json.RawMessage `json:"deadLetter"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &ev))
		r.mu.Lock()
		defer r.mu.Unlock()
		id := req.Header.Get("Webhook-Id")
		r.tries[id]++
		r.types[id] = ev.Type
		if r.fail != nil && r.fail() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if r.refuse != nil {
			if code := r.refuse(ev.Type, r.tries[id]); code != 0 {
				w.WriteHeader(code)
				return
			}
		}
		hdr := map[string]string{}
		for k := range req.Header {
			hdr[k] = req.Header.Get(k)
		}
		d := delivery{id: id, typ: ev.Type,
			thread:    ev.Data.Message.WorkflowID + "/" + ev.Data.Message.ParticipantID,
			verifyErr: webhooksig.Standard{Secret: r.secret}.Verify(hdr, body), body: body}
		if ev.Data.Message.Text != nil {
			d.text = *ev.Data.Message.Text
		}
		r.got = append(r.got, d)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// triesOf returns the attempts the receiver got of each event of a type, by webhook-id.
func (r *receiver) triesOf(typ string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for id, n := range r.tries {
		if r.types[id] == typ {
			out[id] = n
		}
	}
	return out
}

type fixture struct {
	res   *bus.Resources
	store *subscription.Store
	hist  *history.Store
	// cfg is the store's configuration, for another host's store (host).
	cfg subscription.Config
}

func newFixture(t testing.TB, cfg subscription.Config) *fixture {
	res := natstest.Bus(t, bus.Config{})
	if cfg.Allow == nil {
		var err error
		cfg.Allow, err = outbound.ParseAllowList("http://127.0.0.1:*")
		require.NoError(t, err)
	}
	return &fixture{res: res, store: subscription.NewStore(res, cfg), hist: history.NewStore(res.Messages, res.Topics, res.JS), cfg: cfg}
}

// deliver runs Deliver until the test ends.
func (f *fixture) deliver(t *testing.T) { deliverOn(t, f.store) }

// host returns the store of another workflow host on the same bus.
func (f *fixture) host() *subscription.Store { return subscription.NewStore(f.res, f.cfg) }

// deliverOn runs the store's Deliver until the test ends.
func deliverOn(t *testing.T, store *subscription.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); store.Deliver(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// say stores an incoming message and the agent's reply in a thread of agent Echo.
func (f *fixture) say(t testing.TB, tenant, activation, participant, text string) {
	ctx := context.Background()
	wf := tenant + ":Echo:Default:" + activation
	cur, err := f.hist.Cursor(ctx, tenant, wf, participant)
	require.NoError(t, err)
	in, out := "in "+text, "out "+text
	require.NoError(t, f.hist.Append(ctx, tenant, wf, participant, &cur,
		&history.Message{Direction: history.In, Text: &in, ParticipantID: participant, WorkflowID: wf, RequestID: text},
		&history.Message{Direction: history.Out, Text: &out, ParticipantID: participant, WorkflowID: wf, RequestID: text}))
}

func TestDeliveryRetriesInOrderUntilTheReceiverRecovers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, subscription.Config{MaxBackoff: 200 * time.Millisecond})
	var down atomic.Bool
	down.Store(true)
	rcv := newReceiver(t, down.Load)
	ctx := context.Background()
	sub, err := f.store.Create(ctx, "acme", subscription.New{URL: rcv.URL + "/hook", Events: []string{subscription.MessageIncoming, subscription.MessageOutgoing}})
	require.NoError(t, err)
	rcv.secret = sub.Secret
	f.deliver(t)

	const threads, per = 3, 5
	for i := range per {
		for th := range threads {
			f.say(t, "acme", fmt.Sprint("a", th), "alice", fmt.Sprintf("%d-%d", th, i))
		}
	}
	f.say(t, "other", "a0", "alice", "not acme's") // another tenant's: never delivered
	require.Eventually(t, func() bool { return rcv.attempts.Load() >= 3 }, 10*time.Second, 10*time.Millisecond)
	down.Store(false)
	require.Eventually(t, func() bool { return len(rcv.deliveries()) >= threads*per*2 }, 20*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond)

	got := rcv.deliveries()
	require.Len(t, got, threads*per*2, "every event once once the receiver is up")
	ids := map[string]bool{}
	next := map[string]int{}
	for _, d := range got {
		require.NoError(t, d.verifyErr, "the signature verifies")
		assert.False(t, ids[d.id], "webhook-id %s delivered twice", d.id)
		ids[d.id] = true
		th := d.thread
		i := next[th]
		want := fmt.Sprintf("in %s-%d", th[len("acme:Echo:Default:a"):len("acme:Echo:Default:a")+1], i/2)
		if i%2 == 1 {
			want = "out" + want[2:]
		}
		assert.Equal(t, want, d.text, "thread %s in order", th)
		next[th]++
		assert.True(t, strings.HasPrefix(d.id, "msg_"))
	}
}

// An event's timestamp is its message's createdAt, both in the one form of every time (package
// timefmt): UTC, exactly three fractional digits, a whole second included.
func TestEventTimestampIsTheMessagesCreatedAt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, subscription.Config{})
	rcv := newReceiver(t, nil)
	ctx := context.Background()
	sub, err := f.store.Create(ctx, "acme", subscription.New{URL: rcv.URL, Events: []string{subscription.MessageIncoming, subscription.MessageOutgoing}})
	require.NoError(t, err)
	rcv.secret = sub.Secret
	f.deliver(t)

	wf := "acme:Echo:Default:times"
	cur, err := f.hist.Cursor(ctx, "acme", wf, "ada")
	require.NoError(t, err)
	in, out := "a whole second", "nanoseconds in another zone"
	require.NoError(t, f.hist.Append(ctx, "acme", wf, "ada", &cur,
		&history.Message{Direction: history.In, Text: &in, ParticipantID: "ada", WorkflowID: wf, RequestID: "r1",
			CreatedAt: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)},
		&history.Message{Direction: history.Out, Text: &out, ParticipantID: "ada", WorkflowID: wf, RequestID: "r1",
			CreatedAt: time.Date(2026, 3, 4, 6, 6, 7, 340_999_999, time.FixedZone("CET", 3600))}))
	want := map[string]string{in: "2026-03-04T05:06:07.000Z", out: "2026-03-04T05:06:07.340Z"}

	require.Eventually(t, func() bool { return len(rcv.deliveries()) == 2 }, 10*time.Second, 10*time.Millisecond)
	for _, d := range rcv.deliveries() {
		var ev struct {
			Timestamp string `json:"timestamp"`
			Data      struct {
				Message struct {
					CreatedAt string `json:"createdAt"`
				} `json:"message"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(d.body, &ev), "%s", d.body)
		assert.Equal(t, want[d.text], ev.Timestamp, "%s", d.body)
		assert.Equal(t, ev.Timestamp, ev.Data.Message.CreatedAt, "%s", d.body)
		assert.Regexp(t, timefmt.Pattern, ev.Timestamp)
	}
}

func TestDeliveryGivesUpAndReplays(t *testing.T) {
	t.Parallel()
	f := newFixture(t, subscription.Config{RetryFor: time.Second, MaxBackoff: 100 * time.Millisecond})
	var down atomic.Bool
	down.Store(true)
	rcv := newReceiver(t, down.Load)
	ctx := context.Background()
	sub, err := f.store.Create(ctx, "acme", subscription.New{URL: rcv.URL, Events: []string{subscription.MessageOutgoing}, Agents: []string{"Echo"}})
	require.NoError(t, err)
	rcv.secret = sub.Secret
	f.deliver(t)
	f.say(t, "acme", "a", "bob", "lost")

	var und []subscription.Undelivered
	require.Eventually(t, func() bool {
		und, _, err = f.store.ListUndelivered(ctx, "acme", sub.ID, 0, 0)
		require.NoError(t, err)
		return len(und) == 1
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, subscription.MessageOutgoing, und[0].Type)
	assert.Contains(t, und[0].Error, "500")
	assert.GreaterOrEqual(t, und[0].Attempts, 2)

	_, err = f.store.Replay(ctx, "acme", sub.ID, und[0].ID)
	var se *subscription.StatusError
	require.ErrorAs(t, err, &se, "a replay to a receiver that still fails")
	assert.Equal(t, 500, se.Code)

	down.Store(false)
	_, err = f.store.Replay(ctx, "acme", sub.ID, und[0].ID)
	require.NoError(t, err)
	got := rcv.deliveries()
	require.Len(t, got, 1)
	assert.Equal(t, und[0].EventID, got[0].id, "the replay keeps the webhook-id")
	require.NoError(t, got[0].verifyErr)
	_, err = f.store.Replay(ctx, "acme", sub.ID, und[0].ID)
	require.ErrorIs(t, err, subscription.ErrEventNotFound, "a replayed event is gone")

	other, err := f.store.Create(ctx, "beta", subscription.New{URL: rcv.URL, Events: []string{subscription.DeadLetterCreated}})
	require.NoError(t, err)
	require.ErrorIs(t, f.store.Discard(ctx, "acme", other.ID, 1), subscription.ErrNotFound, "another tenant's subscription")
}

func TestCreateValidatesAndLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, subscription.Config{MaxPerTenant: 2})
	ctx := context.Background()
	for _, n := range []subscription.New{
		{Events: []string{"message.outgoing"}},
		{URL: "http://127.0.0.1:9/x"},
		{URL: "http://127.0.0.1:9/x", Events: []string{"message.sent"}},
		{URL: "http://127.0.0.1:9/x", Events: []string{"message.outgoing"}, Secret: "whsec_c2hvcnQ="},
		{URL: "http://127.0.0.1:9/x", Events: []string{"message.outgoing"}, Agents: []string{"a:b"}},
		{URL: "not a url", Events: []string{"message.outgoing"}},
	} {
		_, err := f.store.Create(ctx, "acme", n)
		require.ErrorIs(t, err, subscription.ErrInvalid, "%+v", n)
	}
	for _, u := range []string{"https://example.com/x", "http://10.0.0.1/x", "http://169.254.169.254/latest", "http://localhost:80/"} {
		_, err := f.store.Create(ctx, "acme", subscription.New{URL: u, Events: []string{"message.outgoing"}})
		require.ErrorIs(t, err, outbound.ErrURLNotAllowed, u)
	}
	a, err := f.store.Create(ctx, "acme", subscription.New{URL: "http://127.0.0.1:9/a", Events: []string{"message.outgoing", "deadletter.created"}})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(a.Secret, "whsec_"))
	_, err = f.store.Create(ctx, "acme", subscription.New{URL: "http://127.0.0.1:9/b", Events: []string{"message.incoming"}})
	require.NoError(t, err)
	_, err = f.store.Create(ctx, "acme", subscription.New{URL: "http://127.0.0.1:9/c", Events: []string{"message.incoming"}})
	require.ErrorIs(t, err, subscription.ErrLimit)

	consumers := func() int {
		n := 0
		for range f.res.Messages.ListConsumers(ctx).Info() {
			n++
		}
		for range f.res.DeadLetters.ListConsumers(ctx).Info() {
			n++
		}
		return n
	}
	assert.Equal(t, 3, consumers())
	require.NoError(t, f.store.Delete(ctx, "acme", a.ID))
	assert.Equal(t, 1, consumers(), "a deleted subscription's consumers are gone")
	_, err = f.store.Get(ctx, "acme", a.ID)
	require.ErrorIs(t, err, subscription.ErrNotFound)
	list, err := f.store.List(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// TestDeletedSubscriptionStopsQuietly: a deleted subscription's deliveries end without a
// warning, though its consumers go right after its record, often before the watch of the records
// ends the runs pulling from them.
func TestDeletedSubscriptionStopsQuietly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, subscription.Config{Logger: stacktest.Logger(t)})
	f.deliver(t)
	ctx := context.Background()
	for range 5 {
		sub, err := f.store.Create(ctx, "acme", subscription.New{URL: "http://127.0.0.1:9/a", Events: []string{"message.incoming", "deadletter.created"}})
		require.NoError(t, err)
		time.Sleep(200 * time.Millisecond) // its runs pull
		require.NoError(t, f.store.Delete(ctx, "acme", sub.ID))
	}
	time.Sleep(1500 * time.Millisecond) // a run that met its consumer gone starts again after 1 s
	assert.False(t, stacktest.Logged(t, "starting again"), "a deleted subscription's delivery logged a failure")
}

// A request for the next event that never reaches the server (here: dropped on its way) holds
// delivery up only until the missing heartbeats tell the deliverer to ask again: a few seconds,
// not the request's expiry of 30 s.
func TestLostRequestForTheNextEvent(t *testing.T) {
	t.Parallel()
	// The deliverer's connection loses its third request for the next event.
	loss := natstest.LosePullRequest(t, "deliverer", "", 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := loss.Res
	hist := history.NewStore(res.Messages, res.Topics, res.JS)
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	require.NoError(t, err)
	cfg := subscription.Config{Allow: allow}
	setup := subscription.NewStore(res, cfg)
	f := &fixture{res: loss.Lossy, store: subscription.NewStore(loss.Lossy, cfg), hist: hist}

	rcv := newReceiver(t, nil)
	sub, err := setup.Create(ctx, "acme", subscription.New{URL: rcv.URL + "/hook", Events: []string{subscription.MessageIncoming}})
	require.NoError(t, err)
	rcv.secret = sub.Secret
	f.deliver(t)
	const n = 5
	for i := range n {
		f.say(t, "acme", "shop", "ada", fmt.Sprint("m", i))
	}
	start := time.Now()
	require.Eventually(t, func() bool { return len(rcv.deliveries()) == n }, 15*time.Second, 20*time.Millisecond,
		"every event delivered, though a request for one was lost")
	t.Logf("%d events delivered in %v; %d requests for the next event, %d dropped", n,
		time.Since(start).Round(time.Millisecond), loss.Requests.Load(), loss.Proxy.Dropped.Load())
	assert.EqualValues(t, 1, loss.Proxy.Dropped.Load(), "the third request was dropped")
	for i, d := range rcv.deliveries() {
		assert.Equal(t, fmt.Sprint("in m", i), d.text, "in order")
	}
}
