package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subscription"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// hookReceiver is a subscription's receiver: it keeps what it accepted, and answers 500 while
// down.
type hookReceiver struct {
	*httptest.Server
	down atomic.Bool
	mu   sync.Mutex
	got  []hook
}

// hook is one delivery a hookReceiver accepted.
type hook struct {
	header map[string]string
	body   []byte
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if r.down.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		h := hook{header: map[string]string{}, body: body}
		for name := range req.Header {
			h.header[name] = req.Header.Get(name)
		}
		r.mu.Lock()
		r.got = append(r.got, h)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) hooks() []hook {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hook(nil), r.got...)
}

// waitHooks waits until the receiver has accepted n deliveries.
func (r *hookReceiver) waitHooks(t *testing.T, n int) []hook {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(r.hooks()) < n {
		require.False(t, time.Now().After(deadline), "waited for %d deliveries; have %d", n, len(r.hooks()))
		time.Sleep(20 * time.Millisecond)
	}
	return r.hooks()
}

// eventType is the type a delivered body names.
func (h hook) eventType(t *testing.T) string {
	var ev struct {
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(h.body, &ev), "a delivered body: %s", h.body)
	return ev.Type
}

// subscriptions is a stack whose subscriptions may deliver to loopback and give an event up
// after a second, and a receiver, as TestCLISubscriptions's subtests share them.
type subscriptions struct {
	h   *harness
	rcv *hookReceiver
	// id and secret are the subscription of Echo's messages to rcv; others are more
	// subscriptions, of dead letters only.
	id, secret string
	others     []string
	// undelivered are the ids of the two events kept as undelivered, oldest first.
	undelivered []string
}

// TestCLISubscriptions creates subscriptions, sees their events delivered signed, lets two fail
// until they are kept as undelivered, replays one and discards the other, deletes the
// subscriptions, and checks who may, in order on one stack.
func TestCLISubscriptions(t *testing.T) {
	s := startSubscriptions(t)
	t.Run("create", s.testCreate)
	t.Run("list and get", s.testListGet)
	t.Run("delivered", s.testDelivered)
	t.Run("undelivered", s.testUndelivered)
	t.Run("replay", s.testReplay)
	t.Run("discard", s.testDiscard)
	t.Run("delete", s.testDelete)
	t.Run("refusals", s.testRefusals)
	t.Run("no key printed", func(t *testing.T) { s.h.checkNoKeyPrinted(t, 20) })
}

func startSubscriptions(t *testing.T) *subscriptions {
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	require.NoError(t, err)
	st := stacktest.Start(t, stacktest.Options{
		AdminKey:      adminKey,
		Subscriptions: subscription.Config{Allow: allow, RetryFor: time.Second, MaxBackoff: 100 * time.Millisecond},
	})
	h := &harness{t: t, st: st, secrets: []string{adminKey, st.Key, st.OtherKey}}
	return &subscriptions{h: h, rcv: newHookReceiver(t)}
}

var createdSubscription = regexp.MustCompile(`^subscription (sub_[0-9a-f]{20}) created: `)

// create runs subscription create, whose stdout is the secret, and returns the id and the
// secret.
func (s *subscriptions) create(args ...string) (id, secret string) {
	h := s.h
	h.t.Helper()
	r := h.cmd(h.st.Key, true, append([]string{"subscription", "create"}, args...)...)
	require.NoError(h.t, r.err, "subscription create %q\nstderr: %s", args, r.stderr)
	secret = strings.TrimSpace(r.stdout)
	h.addSecret(secret)
	require.True(h.t, strings.HasPrefix(secret, "whsec_"), "subscription create printed %q, want the secret alone", r.stdout)
	require.NotContains(h.t, secret, "\n", "subscription create printed %q, want the secret alone", r.stdout)
	assert.Contains(h.t, r.stderr, "shown only this once", "subscription create stderr: want the once-only warning")
	m := createdSubscription.FindStringSubmatch(r.stderr)
	require.NotNil(h.t, m, "subscription create stderr %q does not name the subscription", r.stderr)
	return m[1], secret
}

// testCreate creates the subscription of Echo's messages, one with a secret of its own, and one
// with -json.
func (s *subscriptions) testCreate(t *testing.T) {
	h := s.h
	h.t = t
	s.id, s.secret = s.create(s.rcv.URL+"/hooks", "--events", "message.incoming,message.outgoing",
		"--agent", "Echo", "--description", "ci receiver")

	own := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	id, secret := s.create(s.rcv.URL+"/dead", "--events", "deadletter.created", "--secret", own)
	assert.Equal(t, own, secret, "subscription create --secret printed")
	s.others = append(s.others, id)

	r := h.cmd(h.st.Key, true, "-json", "subscription", "create", s.rcv.URL+"/json", "--events", "deadletter.created",
		"--agent", "Billing", "--agent", "Ops")
	require.NoError(t, r.err, r.stderr)
	var sub subscription.Subscription
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sub), "subscription create -json printed %q", r.stdout)
	h.addSecret(sub.Secret)
	assert.True(t, strings.HasPrefix(sub.Secret, "whsec_"), "subscription create -json: the secret")
	assert.Equal(t, []string{"Billing", "Ops"}, sub.Agents, "subscription create -json: agents")
	assert.Contains(t, r.stderr, "shown only this once", "subscription create -json stderr")
	s.others = append(s.others, sub.ID)
}

// testListGet lists the subscriptions, as a table and as JSON, and shows one.
func (s *subscriptions) testListGet(t *testing.T) {
	h := s.h
	h.t = t
	r := h.ok(h.st.Key, "subscription", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, "a header and three rows:\n%s", r.stdout)
	assert.Equal(t, []string{"ID", "URL", "EVENTS", "AGENTS", "CREATED", "DESCRIPTION"}, strings.Fields(lines[0]))
	for i, id := range append([]string{s.id}, s.others...) {
		assert.True(t, strings.HasPrefix(lines[i+1], id+" "), "row %d %q is not subscription %s, oldest first", i+1, lines[i+1], id)
	}
	assert.Regexp(t, `/hooks\s+message\.incoming,message\.outgoing\s+Echo\s+\S+ \S+\s+ci receiver$`, lines[1])
	assert.Regexp(t, `/dead\s+deadletter\.created\s+\*\s`, lines[2])
	assert.Regexp(t, `\sBilling,Ops\s`, lines[3])

	r = h.ok(h.st.Key, "-json", "subscription", "list")
	var ans struct {
		Subscriptions []map[string]any `json:"subscriptions"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ans), "subscription list -json printed %q", r.stdout)
	require.Len(t, ans.Subscriptions, 3)
	for _, sub := range ans.Subscriptions {
		assert.NotContains(t, sub, "secret", "subscription list -json")
	}

	r = h.ok(h.st.Key, "subscription", "get", s.id)
	for _, want := range []string{"id:", s.id, "tenant:", "default", "url:", s.rcv.URL + "/hooks",
		"events:", "message.incoming, message.outgoing", "agents:", "Echo", "description:", "ci receiver", "created:"} {
		assert.Contains(t, r.stdout, want)
	}
	r = h.ok(adminKey, "subscription", "show", s.others[0])
	assert.Contains(t, r.stdout, "every agent")
	r = h.ok(h.st.Key, "-json", "subscription", "get", s.id)
	var sub map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sub), r.stdout)
	assert.Equal(t, s.id, sub["id"])
	assert.NotContains(t, sub, "secret")
}

// testDelivered sends Echo a message and checks that the request and the reply reach the
// receiver, signed with the subscription's secret.
func (s *subscriptions) testDelivered(t *testing.T) {
	h := s.h
	h.t = t
	h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "ada", "--text", "hooked", "--wait")
	got := s.rcv.waitHooks(t, 2)
	require.Len(t, got, 2)
	for i, want := range []string{subscription.MessageIncoming, subscription.MessageOutgoing} {
		assert.Equal(t, want, got[i].eventType(t), "delivery %d", i)
		assert.NoError(t, webhooksig.Standard{Secret: s.secret}.Verify(got[i].header, got[i].body), "delivery %d is signed", i)
		assert.True(t, strings.HasPrefix(got[i].header["Webhook-Id"], "msg_"), "delivery %d: webhook-id", i)
	}
}

// testUndelivered lets the receiver fail until the next request and reply are given up, and
// lists them: as a table, by pages and as JSON.
func (s *subscriptions) testUndelivered(t *testing.T) {
	h := s.h
	h.t = t
	s.rcv.down.Store(true)
	h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "ada", "--text", "lost", "--wait")
	deadline := time.Now().Add(30 * time.Second)
	var page subscription.UndeliveredPage
	for len(page.Events) < 2 {
		require.False(t, time.Now().After(deadline), "waited for two undelivered events; have %d", len(page.Events))
		time.Sleep(100 * time.Millisecond)
		r := h.ok(h.st.Key, "-json", "subscription", "undelivered", s.id)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &page), r.stdout)
	}
	require.Len(t, page.Events, 2)
	for _, e := range page.Events {
		s.undelivered = append(s.undelivered, strconv.FormatUint(e.ID, 10))
	}

	r := h.ok(h.st.Key, "subscription", "undelivered", s.id)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, "a header and two rows:\n%s", r.stdout)
	assert.Equal(t, []string{"ID", "FAILED", "EVENT", "TYPE", "ATTEMPTS", "ERROR"}, strings.Fields(lines[0]))
	for i, typ := range []string{subscription.MessageIncoming, subscription.MessageOutgoing} {
		assert.Regexp(t, `^`+s.undelivered[i]+`\s+\S+ \S+\s+msg_\S+\s+`+regexp.QuoteMeta(typ)+`\s+\d+\s+.*500`, lines[i+1])
	}
	assert.Empty(t, r.stderr)

	// Pages: the next page's command is printed on stderr.
	r = h.ok(h.st.Key, "subscription", "undelivered", s.id, "--limit", "1")
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.True(t, strings.HasPrefix(lines[1], s.undelivered[0]+" "), lines[1])
	assert.Equal(t, "more: agentbus subscription undelivered "+s.id+" --after "+s.undelivered[0]+"\n", r.stderr)
	r = h.ok(h.st.Key, "subscription", "undelivered", "--after", s.undelivered[0], s.id)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.True(t, strings.HasPrefix(lines[1], s.undelivered[1]+" "), lines[1])

	h.fails(http.StatusBadRequest, h.st.Key, "subscription", "undelivered", s.id, "--limit", "500")
}

// testReplay replays the first undelivered event while the receiver still fails, then once it
// is back: it arrives with its webhook-id, signed, and is gone.
func (s *subscriptions) testReplay(t *testing.T) {
	h := s.h
	h.t = t
	first := s.undelivered[0]
	r := h.fails(http.StatusBadGateway, h.st.Key, "subscription", "replay", s.id, first)
	assert.Contains(t, r.stderr, "500", "a replay the receiver refused")

	s.rcv.down.Store(false)
	before := len(s.rcv.hooks())
	r = h.ok(h.st.Key, "subscription", "replay", s.id, first)
	m := regexp.MustCompile(`^event ` + first + ` \((msg_\S+), message\.incoming\) delivered and removed\n$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, "subscription replay printed %q", r.stdout)
	got := s.rcv.hooks()
	require.Len(t, got, before+1, "the replay is delivered once")
	assert.Equal(t, m[1], got[before].header["Webhook-Id"], "the replay keeps the webhook-id")
	assert.NoError(t, webhooksig.Standard{Secret: s.secret}.Verify(got[before].header, got[before].body), "the replay is signed")

	h.fails(http.StatusNotFound, h.st.Key, "subscription", "replay", s.id, first)
}

// testDiscard discards the second undelivered event, which is then gone.
func (s *subscriptions) testDiscard(t *testing.T) {
	h := s.h
	h.t = t
	second := s.undelivered[1]
	r := h.ok(h.st.Key, "subscription", "discard", s.id, second)
	assert.Equal(t, "event "+second+" discarded\n", r.stdout)
	h.fails(http.StatusNotFound, h.st.Key, "subscription", "discard", s.id, second)
	r = h.ok(h.st.Key, "-json", "subscription", "undelivered", s.id)
	assert.JSONEq(t, `{"events":[],"next":0}`, r.stdout)
}

// testDelete deletes every subscription; then none is left.
func (s *subscriptions) testDelete(t *testing.T) {
	h := s.h
	h.t = t
	r := h.ok(h.st.Key, "subscription", "delete", s.id)
	assert.Equal(t, "subscription "+s.id+" deleted, with its undelivered events\n", r.stdout)
	h.fails(http.StatusNotFound, h.st.Key, "subscription", "get", s.id)
	h.fails(http.StatusNotFound, h.st.Key, "subscription", "delete", s.id)
	h.fails(http.StatusNotFound, h.st.Key, "subscription", "undelivered", s.id)
	for _, id := range s.others {
		r = h.ok(h.st.Key, "-json", "subscription", "rm", id)
		assert.Empty(t, r.stdout, "subscription delete -json")
	}
	r = h.ok(h.st.Key, "-json", "subscription", "list")
	assert.JSONEq(t, `{"subscriptions":[]}`, r.stdout)
}

// testRefusals checks that a user key and another tenant's key get no subscriptions, that the
// API's refusals of a new subscription are printed, and that the commands given wrongly print
// the usage.
func (s *subscriptions) testRefusals(t *testing.T) {
	h := s.h
	h.t = t
	user, _ := h.newKey("subscriptions", "user")
	h.fails(http.StatusForbidden, user, "subscription", "list")
	h.fails(http.StatusForbidden, h.st.OtherKey, "subscription", "list")
	h.fails(http.StatusForbidden, h.st.Key, "-tenant", "other", "subscription", "list")
	h.fails(http.StatusNotFound, h.st.Key, "subscription", "get", "sub_00000000000000000000")

	r := h.fails(http.StatusUnprocessableEntity, h.st.Key, "subscription", "create", "https://hooks.example.com/x", "--events", "message.incoming")
	assert.Contains(t, r.stderr, "allow-list")
	r = h.fails(http.StatusBadRequest, h.st.Key, "subscription", "create", s.rcv.URL, "--events", "message.deleted")
	assert.Contains(t, r.stderr, "message.deleted")
	h.fails(http.StatusBadRequest, h.st.Key, "subscription", "create", s.rcv.URL, "--events", "message.incoming", "--secret", "whsec_short")

	for _, args := range [][]string{
		{"subscription"}, {"subscription", "frob"}, {"subscription", "create", s.rcv.URL}, {"subscription", "create", "--events", "message.incoming"},
		{"subscription", "create", s.rcv.URL, "x", "--events", "message.incoming"}, {"subscription", "get"}, {"subscription", "list", "x"},
		{"subscription", "undelivered"}, {"subscription", "replay", "sub_x"}, {"subscription", "discard", "sub_x", "1", "2"},
	} {
		r := h.cmd(h.st.Key, false, args...)
		assert.ErrorAs(t, r.err, new(usageError), "agentbus %q", args)
		assert.Contains(t, r.stderr, "usage: agentbus", "agentbus %q", args)
	}
}
