package ingress_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// contractSubscriptions: a subscription created, read, its undelivered events (the receiver is
// down for the stack's one-second retry period) replayed and discarded, and deleted.
func contractSubscriptions(c *contractClient) {
	t := c.t
	key := c.key
	var down atomic.Bool
	down.Store(true)
	var got atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()

	const p = "/api/v1/admin/tenants/default/subscriptions"
	sub := c.want(http.StatusCreated, http.MethodPost, p, key,
		map[string]any{"url": rcv.URL + "/hooks", "events": []string{"message.incoming", "message.outgoing"}, "agents": []string{"Echo"}, "description": "contract"})
	id := sub["id"].(string)
	assert.True(t, strings.HasPrefix(sub["secret"].(string), "whsec_"))
	c.want(http.StatusBadRequest, http.MethodPost, p, key, map[string]any{"url": rcv.URL, "events": []string{"message.sent"}})
	c.want(http.StatusBadRequest, http.MethodPost, p, key, map[string]any{"url": rcv.URL, "events": []string{"message.incoming"}, "surprise": 1})
	c.want(http.StatusUnprocessableEntity, http.MethodPost, p, key, map[string]any{"url": "http://169.254.169.254/latest", "events": []string{"message.incoming"}})
	c.want(http.StatusRequestEntityTooLarge, http.MethodPost, p, key, map[string]any{"url": rcv.URL, "events": []string{"message.incoming"}, "description": strings.Repeat("x", 1<<20)})
	second := c.want(http.StatusCreated, http.MethodPost, p, key, map[string]any{"url": rcv.URL, "events": []string{"deadletter.created"}})
	c.want(http.StatusConflict, http.MethodPost, p, key, map[string]any{"url": rcv.URL, "events": []string{"deadletter.created"}})
	c.want(http.StatusNoContent, http.MethodDelete, p+"/"+second["id"].(string), key, nil)
	c.want(http.StatusUnauthorized, http.MethodPost, p, "", nil)
	c.want(http.StatusForbidden, http.MethodPost, "/api/v1/admin/tenants/other/subscriptions", key, map[string]any{"url": rcv.URL, "events": []string{"message.incoming"}})
	c.want(http.StatusNotFound, http.MethodPost, "/api/v1/admin/tenants/nosuch/subscriptions", systemKey, map[string]any{"url": rcv.URL, "events": []string{"message.incoming"}})

	list := c.want(http.StatusOK, http.MethodGet, p, key, nil)
	require.Len(t, list["subscriptions"], 1)
	assert.NotContains(t, list["subscriptions"].([]any)[0], "secret", "a list shows no secret")
	c.want(http.StatusBadRequest, http.MethodGet, p, key, nil, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodGet, p, "", nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/subscriptions", key, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nosuch/subscriptions", systemKey, nil)

	one := c.want(http.StatusOK, http.MethodGet, p+"/"+id, key, nil)
	assert.NotContains(t, one, "secret")
	c.want(http.StatusNotFound, http.MethodGet, p+"/sub_00000000000000000000", key, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/other/subscriptions/"+id, c.other, nil)
	c.want(http.StatusBadRequest, http.MethodGet, p+"/"+id, key, nil, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodGet, p+"/"+id, "", nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/subscriptions/"+id, key, nil)

	// A call to Echo: its request and reply are two events the receiver refuses until both are
	// kept as undelivered.
	c.want(http.StatusOK, http.MethodPost, "/api/v1/admin/tenants/default/messaging/send?wait=true", key,
		map[string]any{"agentName": "Echo", "activationName": "contract-events", "participantId": "ada", "type": "Chat", "text": "hello"})
	u := p + "/" + id + "/undelivered"
	var events []any
	require.Eventually(t, func() bool {
		_, _, b := c.do(http.MethodGet, u, key, nil)
		m := decode(t, b)
		events, _ = m["events"].([]any)
		return len(events) == 2
	}, 15*time.Second, 50*time.Millisecond, "both events kept as undelivered")
	page := c.want(http.StatusOK, http.MethodGet, u+"?limit=1", key, nil)
	require.Len(t, page["events"], 1)
	assert.NotZero(t, page["next"])
	c.want(http.StatusOK, http.MethodGet, u+fmt.Sprintf("?after=%v", page["next"]), key, nil)
	c.want(http.StatusBadRequest, http.MethodGet, u+"?limit=500", key, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, u, "", nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/subscriptions/"+id+"/undelivered", key, nil)
	c.want(http.StatusNotFound, http.MethodGet, p+"/sub_00000000000000000000/undelivered", key, nil)

	first := fmt.Sprint(events[0].(map[string]any)["id"])
	c.want(http.StatusBadGateway, http.MethodPost, u+"/"+first+"/replay", key, nil)
	down.Store(false)
	replayed := c.want(http.StatusOK, http.MethodPost, u+"/"+first+"/replay", key, nil)
	assert.Equal(t, true, replayed["delivered"])
	assert.Equal(t, int64(1), got.Load())
	c.want(http.StatusNotFound, http.MethodPost, u+"/"+first+"/replay", key, nil)
	c.want(http.StatusBadRequest, http.MethodPost, u+"/abc/replay", key, nil)
	c.want(http.StatusUnauthorized, http.MethodPost, u+"/"+first+"/replay", "", nil)
	c.want(http.StatusForbidden, http.MethodPost, "/api/v1/admin/tenants/other/subscriptions/"+id+"/undelivered/"+first+"/replay", key, nil)

	second2 := fmt.Sprint(events[1].(map[string]any)["id"])
	c.want(http.StatusNoContent, http.MethodDelete, u+"/"+second2, key, nil)
	c.want(http.StatusNotFound, http.MethodDelete, u+"/"+second2, key, nil)
	c.want(http.StatusBadRequest, http.MethodDelete, u+"/0", key, nil)
	c.want(http.StatusUnauthorized, http.MethodDelete, u+"/"+second2, "", nil)
	c.want(http.StatusForbidden, http.MethodDelete, "/api/v1/admin/tenants/other/subscriptions/"+id+"/undelivered/"+second2, key, nil)

	c.want(http.StatusBadRequest, http.MethodDelete, p+"/"+id, key, nil, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodDelete, p+"/"+id, "", nil)
	c.want(http.StatusForbidden, http.MethodDelete, "/api/v1/admin/tenants/other/subscriptions/"+id, key, nil)
	c.want(http.StatusNoContent, http.MethodDelete, p+"/"+id, key, nil)
	c.want(http.StatusNotFound, http.MethodDelete, p+"/"+id, key, nil)
}

// contractRemoteAgents: remote agents registered, read, replaced and removed, the system's and
// a tenant's.
func contractRemoteAgents(c *contractClient) {
	key := c.key
	big := strings.Repeat("x", 1<<20)
	body := func(name, url string) map[string]any {
		return map[string]any{"name": name, "url": url, "chat": true, "methods": []map[string]any{{"name": "m", "description": "a method"}}}
	}
	for _, p := range []struct {
		base, key, other string
		tenant           bool
	}{
		{"/api/v1/admin/agents", systemKey, key, false},
		{"/api/v1/admin/tenants/default/agents", key, c.other, true},
	} {
		name := "ContractSystem"
		if p.tenant {
			name = "ContractTenant"
		}
		one := p.base + "/" + name
		c.want(http.StatusCreated, http.MethodPost, p.base, p.key, body(name, "http://127.0.0.1:9/agent"))
		c.want(http.StatusConflict, http.MethodPost, p.base, p.key, body(name, "http://127.0.0.1:9/agent"))
		c.want(http.StatusBadRequest, http.MethodPost, p.base, p.key, map[string]any{"name": "Idle", "url": "http://127.0.0.1:9/agent"})
		c.want(http.StatusRequestEntityTooLarge, http.MethodPost, p.base, p.key, body(big, "http://127.0.0.1:9/agent"))
		c.want(http.StatusUnauthorized, http.MethodPost, p.base, "", nil)
		c.want(http.StatusForbidden, http.MethodPost, p.base, p.other, body("Other", "http://127.0.0.1:9/agent"))

		c.want(http.StatusOK, http.MethodGet, p.base, p.key, nil)
		c.want(http.StatusBadRequest, http.MethodGet, p.base, p.key, nil, "X-Tenant-Id", "other")
		c.want(http.StatusUnauthorized, http.MethodGet, p.base, "", nil)
		c.want(http.StatusForbidden, http.MethodGet, p.base, p.other, nil)

		c.want(http.StatusOK, http.MethodGet, one, p.key, nil)
		c.want(http.StatusNotFound, http.MethodGet, p.base+"/Nobody", p.key, nil)
		c.want(http.StatusBadRequest, http.MethodGet, one, p.key, nil, "X-Tenant-Id", "other")
		c.want(http.StatusUnauthorized, http.MethodGet, one, "", nil)
		c.want(http.StatusForbidden, http.MethodGet, one, p.other, nil)

		c.want(http.StatusOK, http.MethodPut, one, p.key, map[string]any{"url": "http://127.0.0.1:10/agent", "chat": true})
		c.want(http.StatusNotFound, http.MethodPut, p.base+"/Nobody", p.key, map[string]any{"url": "http://127.0.0.1:10/agent", "chat": true})
		c.want(http.StatusBadRequest, http.MethodPut, one, p.key, body("Renamed", "http://127.0.0.1:10/agent"))
		c.want(http.StatusRequestEntityTooLarge, http.MethodPut, one, p.key, body(big, "http://127.0.0.1:9/agent"))
		c.want(http.StatusUnauthorized, http.MethodPut, one, "", nil)
		c.want(http.StatusForbidden, http.MethodPut, one, p.other, body(name, "http://127.0.0.1:9/agent"))

		if p.tenant {
			c.want(http.StatusUnprocessableEntity, http.MethodPost, p.base, p.key, body("Inside", "http://10.1.2.3/agent"))
			c.want(http.StatusUnprocessableEntity, http.MethodPut, one, p.key, body(name, "http://10.1.2.3/agent"))
			c.want(http.StatusNotFound, http.MethodPost, "/api/v1/admin/tenants/nosuch/agents", systemKey, body("Nowhere", "http://127.0.0.1:9/agent"))
			c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nosuch/agents", systemKey, nil)
		}

		c.want(http.StatusBadRequest, http.MethodDelete, one, p.key, nil, "X-Tenant-Id", "other")
		c.want(http.StatusUnauthorized, http.MethodDelete, one, "", nil)
		c.want(http.StatusForbidden, http.MethodDelete, one, p.other, nil)
		c.want(http.StatusNoContent, http.MethodDelete, one, p.key, nil)
		c.want(http.StatusNotFound, http.MethodDelete, one, p.key, nil)
	}
}
