package ingress_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/remote/remotetest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// silentIngress announces an ingress instance on the stack's NATS, as a running one does, that
// never confirms a write: one whose caches do not catch up.
type silentIngress struct {
	nc       *nats.Conn
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

const silentID = "silent"

func startSilentIngress(t *testing.T, s *stacktest.Stack) *silentIngress {
	t.Helper()
	nc, err := s.NATS.Connect("silent ingress")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	si := &silentIngress{nc: nc, stop: make(chan struct{}), done: make(chan struct{})}
	announce := func() { _ = nc.Publish(subject.IngressPresence, []byte(`{"v":1,"instance":"`+silentID+`"}`)) }
	announce()
	go func() {
		defer close(si.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-si.stop:
				return
			case <-tick.C:
				announce()
			}
		}
	}()
	t.Cleanup(si.quiet)
	require.Eventually(t, func() bool { return slices.Contains(s.Ingress.PresentIngresses(), silentID) }, 5*time.Second, 2*time.Millisecond,
		"the ingress never heard of the silent instance")
	return si
}

// quiet stops announcing, as an instance that died does.
func (si *silentIngress) quiet() {
	si.stopOnce.Do(func() { close(si.stop) })
	<-si.done
}

// leave stops announcing and says the instance leaves, as one that stops does.
func (si *silentIngress) leave(t *testing.T) {
	t.Helper()
	si.quiet()
	require.NoError(t, si.nc.Publish(subject.IngressPresence, []byte(`{"v":1,"instance":"`+silentID+`","leaving":true}`)))
	require.NoError(t, si.nc.Flush())
}

// TestUnconfirmedWrites: while an ingress instance that is present does not confirm a write, a
// write that grants (a key, a remote agent) answers 202 with what it made, and a revocation
// (a key, a tenant) answers 503, stored all the same; once the instance leaves, writes answer as
// usual at once, and a revocation repeated answers 204.
func TestUnconfirmedWrites(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, TenantIDHold: -1}) // "parting" is made again at once
	ep := remotetest.New(t, remotetest.Faults{})
	silent := startSilentIngress(t, s)
	s.Ingress.SetConfirmTimeout(300 * time.Millisecond)

	var user, system, rotated newKey
	adminOK(t, s, post, ownKeys, s.Key, map[string]string{"name": "unconfirmed", "role": "user"}, http.StatusAccepted, &user)
	adminOK(t, s, post, sysKeys, systemKey, map[string]string{"name": "unconfirmed", "role": "system-admin"}, http.StatusAccepted, &system)
	assert.Equal(t, http.StatusOK, callEcho(t, s.URL, user.Key), "a key answered 202 works where it is confirmed")
	adminOK(t, s, post, ownKeys+"/"+user.ID+"/rotate", s.Key, nil, http.StatusAccepted, &rotated)
	assert.NotEmpty(t, rotated.Key, "a rotation answered 202 shows the new key")
	adminOK(t, s, post, sysKeys+"/"+system.ID+"/rotate", systemKey, nil, http.StatusAccepted, &newKey{})

	for _, tc := range []adminRefusal{
		{name: "a key's revocation", method: del, path: ownKeys + "/" + rotated.ID, key: s.Key, want: http.StatusServiceUnavailable, slug: "bus-unavailable"},
		{name: "a system key's revocation", method: del, path: sysKeys + "/" + system.ID, key: systemKey, want: http.StatusServiceUnavailable, slug: "bus-unavailable"},
	} {
		checkAdminRefusal(t, s, tc)
	}
	assert.Equal(t, http.StatusUnauthorized, callEcho(t, s.URL, rotated.Key), "a revocation answered 503 is stored")

	adminOK(t, s, post, tenants, systemKey, map[string]string{"id": "parting"}, http.StatusCreated, nil)
	checkAdminRefusal(t, s, adminRefusal{method: del, path: tenants + "/parting", key: systemKey, want: http.StatusServiceUnavailable, slug: "bus-unavailable"})
	status, _, b := adminReq(t, s, get, tenants+"/parting", systemKey, nil)
	assert.Equal(t, http.StatusNotFound, status, "a tenant whose deletion answered 503 is unknown: %s", b)

	for _, path := range []string{"/api/v1/admin/agents", "/api/v1/admin/tenants/default/agents"} {
		key := systemKey
		if path != "/api/v1/admin/agents" {
			key = s.Key
		}
		reg := ep.Registration("Unconfirmed" + map[bool]string{true: "System", false: "Tenant"}[key == systemKey])
		var got map[string]any
		h := adminOK(t, s, post, path, key, reg, http.StatusAccepted, &got)
		assert.Equal(t, reg.Secret, got["secret"], "a registration answered 202 shows the secret")
		assert.Equal(t, path+"/"+reg.Name, h.Get("Location"))
		reg.Secret = ""
		adminOK(t, s, put, path+"/"+reg.Name, key, reg, http.StatusAccepted, &got)
		adminOK(t, s, del, path+"/"+reg.Name, key, nil, http.StatusAccepted, nil)
	}

	silent.leave(t)
	require.Eventually(t, func() bool { return !slices.Contains(s.Ingress.PresentIngresses(), silentID) }, 5*time.Second, 2*time.Millisecond)
	// The writes below wait for this instance's own caches, which a busy machine may hold
	// longer than 300 ms.
	s.Ingress.SetConfirmTimeout(ingress.ConfirmTimeout)
	adminOK(t, s, del, ownKeys+"/"+rotated.ID, s.Key, nil, http.StatusNoContent, nil)
	adminOK(t, s, del, tenants+"/parting", systemKey, nil, http.StatusNoContent, nil)
	adminOK(t, s, post, tenants, systemKey, map[string]string{"id": "parting"}, http.StatusCreated, nil)
	adminOK(t, s, post, ownKeys, s.Key, map[string]string{"name": "confirmed", "role": "user"}, http.StatusCreated, nil)
}

// TestWriteWaitsNoLongerForADeadIngress: an instance that stops announcing itself without
// leaving (it died) is waited for until presence has lapsed, not for the whole timeout.
func TestWriteWaitsNoLongerForADeadIngress(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	silent := startSilentIngress(t, s)
	silent.quiet()
	start := time.Now()
	var k newKey
	adminOK(t, s, post, ownKeys, s.Key, map[string]string{"name": "after a death", "role": "user"}, http.StatusCreated, &k)
	took := time.Since(start)
	t.Logf("a write right after an instance died answered after %v", took.Round(time.Millisecond))
	assert.Less(t, took, 4*time.Second, "waited for the dead instance longer than its presence lasts")
	assert.Equal(t, http.StatusOK, callEcho(t, s.URL, k.Key))
}

// TestConfirmationMessages: an instance answers a confirmation once its caches hold the state
// asked; until then it answers that it waits (pending).
func TestConfirmationMessages(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	nc, err := s.NATS.Connect("asker")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	// ask sends a request and returns the answers that come within the wait, in order.
	ask := func(body string, within time.Duration) []map[string]any {
		t.Helper()
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		require.NoError(t, nc.PublishRequest(subject.IngressConfirm, inbox, []byte(body)))
		var out []map[string]any
		for end := time.Now().Add(within); ; {
			m, err := sub.NextMsg(time.Until(end))
			if err != nil {
				return out
			}
			var a map[string]any
			require.NoError(t, json.Unmarshal(m.Data, &a))
			assert.Equal(t, float64(1), a["v"])
			assert.NotEmpty(t, a["instance"])
			out = append(out, a)
		}
	}
	got := ask(`{"v":1,"from":"asker","id":"1","state":{"keys":1,"live":["Echo"]},"waitMs":1000}`, 300*time.Millisecond)
	require.Len(t, got, 1, "a state the caches hold: %v", got)
	assert.Nil(t, got[0]["pending"], "a state the caches hold")

	for i, state := range []string{`{"keys":1000000}`, `{"live":["Nobody"]}`} {
		got = ask(`{"v":1,"from":"asker","id":"`+strconv.Itoa(2+i)+`","state":`+state+`,"waitMs":200}`, 400*time.Millisecond)
		require.Len(t, got, 1, "a state the caches do not hold, %s: %v", state, got)
		assert.Equal(t, true, got[0]["pending"], "a state the caches do not hold, %s", state)
	}
	assert.Empty(t, ask(`{"v":2,"from":"asker","id":"4","state":{},"waitMs":200}`, 300*time.Millisecond), "answers to another version")
}

// TestNewIngressIsAnswered: an instance heard of for the first time is answered at once with
// the announcements of the others, so that one that starts knows them before the requests
// come, not a second later.
func TestNewIngressIsAnswered(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	nc, err := s.NATS.Connect("newcomer")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	heard := make(chan string, 16)
	sub, err := nc.Subscribe(subject.IngressPresence, func(m *nats.Msg) {
		var p struct{ Instance string }
		if json.Unmarshal(m.Data, &p) == nil && p.Instance != "newcomer" {
			heard <- p.Instance
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	// Past an announcement of its own, which comes every second.
	select {
	case <-heard:
	case <-time.After(2 * time.Second):
		require.Fail(t, "the ingress never announced itself")
	}
	sent := time.Now()
	require.NoError(t, nc.Publish(subject.IngressPresence, []byte(`{"v":1,"instance":"newcomer"}`)))
	select {
	case <-heard:
		assert.Less(t, time.Since(sent), 200*time.Millisecond, "the ingress answered a newcomer with its announcement")
	case <-time.After(2 * time.Second):
		require.Fail(t, "the ingress never announced itself again")
	}
	// Known now: heard again, it is not answered again.
	require.NoError(t, nc.Publish(subject.IngressPresence, []byte(`{"v":1,"instance":"newcomer"}`)))
	select {
	case <-heard:
		assert.Fail(t, "the ingress answered a known instance")
	case <-time.After(100 * time.Millisecond):
	}
}
