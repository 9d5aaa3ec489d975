package ingress_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/remote/remotetest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The tests of this file make an admin write through the stack's ingress and, at once, without
// waiting or polling, the request that needs it through the stack's ingress or through a second
// one on the same NATS (as another process behind a load balancer would be): every admin write
// is seen by the next request on every ingress, or its answer says it is not.

// twoIngresses is a stack with a system-admin key and a second ingress beside its own, to
// which NATS delivers everything secondLag late: its watches lag behind the buckets.
type twoIngresses struct {
	*stacktest.Stack
	second *secondIngress
}

const secondLag = 100 * time.Millisecond

func startTwoIngresses(t *testing.T) twoIngresses {
	t.Helper()
	return startTwoIngressesWith(t, stacktest.Options{})
}

// startTwoIngressesWith is startTwoIngresses with the stack's options (its AdminKey is set).
func startTwoIngressesWith(t *testing.T, opts stacktest.Options) twoIngresses {
	t.Helper()
	opts.AdminKey = systemKey
	s := stacktest.Start(t, opts)
	second := startIngress(t, s, ingress.Config{AdminKey: systemKey})
	second.Lag(secondLag)
	return twoIngresses{Stack: s, second: second}
}

// ingresses names the stack's ingress and the second one, for subtests that do the next request
// on each.
func (s twoIngresses) ingresses() []struct{ name, url string } {
	return []struct{ name, url string }{{"the same ingress", s.URL}, {"another ingress", s.second.URL}}
}

// at sends an admin request with key to the ingress at base and returns status and body.
func at(t *testing.T, base, method, path, key string, body any) (int, []byte) {
	t.Helper()
	status, _, b := doRequest(t, method, base+path, jsonBody(t, body), bearerHeader(key)...)
	return status, b
}

// sendAt sends a Data message to agentName's method with wait=true through the ingress at base.
func sendAt(t *testing.T, base, key, agentName, method string, data any) (int, []byte) {
	t.Helper()
	return at(t, base, http.MethodPost, sendPath+"?wait=true", key,
		map[string]any{"agentName": agentName, "activationName": "a", "participantId": "ada", "type": "Data", "text": method, "data": data})
}

// responseData is the reply data of a send answered with wait=true.
func responseData(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var ans struct {
		Response struct {
			Data map[string]any `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(b, &ans), "%s", b)
	return ans.Response.Data
}

func TestRegisteredRemoteAgentAnswersTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	ep := remotetest.New(t, remotetest.Faults{})
	for i, in := range s.ingresses() {
		t.Run(in.name, func(t *testing.T) {
			name := []string{"Prompt", "Elsewhere"}[i]
			status, b := at(t, s.URL, http.MethodPost, "/api/v1/admin/tenants/default/agents", s.Key, ep.Registration(name))
			require.Equal(t, http.StatusCreated, status, "%s", b)

			status, b = sendAt(t, in.url, s.Key, name, "sum", map[string]any{"values": []float64{2, 3}})
			require.Equal(t, http.StatusOK, status, "a send right after the registration: %s", b)
			assert.EqualValues(t, 5, responseData(t, b)["sum"])

			status, b = at(t, in.url, http.MethodGet, "/api/user/agents", s.Key, nil)
			require.Equal(t, http.StatusOK, status, "%s", b)
			assert.Contains(t, string(b), `"name":"`+name+`"`, "the agent list right after the registration")
		})
	}
}

func TestReplacedRemoteAgentAnswersTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	ep := remotetest.New(t, remotetest.Faults{})
	reg := ep.Registration("Changing")
	sum := reg.Methods[1]
	reg.Methods = reg.Methods[:1] // count only, at first
	status, b := at(t, s.URL, http.MethodPost, "/api/v1/admin/tenants/default/agents", s.Key, reg)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	status, b = sendAt(t, s.second.URL, s.Key, "Changing", "sum", map[string]any{"values": []float64{1}})
	require.Equal(t, http.StatusNotFound, status, "a method the agent does not have yet: %s", b)

	reg.Methods = append(reg.Methods, sum)
	reg.Secret = ""
	status, b = at(t, s.URL, http.MethodPut, "/api/v1/admin/tenants/default/agents/Changing", s.Key, reg)
	require.Equal(t, http.StatusOK, status, "%s", b)
	status, b = sendAt(t, s.second.URL, s.Key, "Changing", "sum", map[string]any{"values": []float64{1, 2}})
	require.Equal(t, http.StatusOK, status, "the method the replacement added, right after it: %s", b)
	assert.EqualValues(t, 3, responseData(t, b)["sum"])
}

func TestRemovedRemoteAgentIsUnknownToTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	ep := remotetest.New(t, remotetest.Faults{})
	status, b := at(t, s.URL, http.MethodPost, "/api/v1/admin/tenants/default/agents", s.Key, ep.Registration("Leaving"))
	require.Equal(t, http.StatusCreated, status, "%s", b)
	status, b = sendAt(t, s.second.URL, s.Key, "Leaving", "count", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", b)

	status, b = at(t, s.URL, http.MethodDelete, "/api/v1/admin/tenants/default/agents/Leaving", s.Key, nil)
	require.Equal(t, http.StatusNoContent, status, "%s", b)
	status, b = sendAt(t, s.second.URL, s.Key, "Leaving", "count", map[string]any{})
	require.Equal(t, http.StatusNotFound, status, "a send right after the removal: %s", b)
	assert.Contains(t, string(b), "unknown-agent")
}

func TestCreatedKeyWorksOnTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	for _, in := range s.ingresses() {
		t.Run(in.name, func(t *testing.T) {
			user := createKey(t, s.Stack, "default", s.Key, "fresh", "user")
			assert.Equal(t, http.StatusOK, callEcho(t, in.url, user.Key), "a tenant's key right after its creation")

			system := createKey(t, s.Stack, "", systemKey, "fresh operator", "system-admin")
			status, b := at(t, in.url, http.MethodGet, tenants, system.Key, nil)
			assert.Equal(t, http.StatusOK, status, "a system key right after its creation: %s", b)
		})
	}
}

func TestRevokedKeyIsRefusedOnTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	for _, in := range s.ingresses() {
		t.Run(in.name, func(t *testing.T) {
			user := createKey(t, s.Stack, "default", s.Key, "doomed", "user")
			require.Equal(t, http.StatusOK, callEcho(t, in.url, user.Key))
			adminOK(t, s.Stack, http.MethodDelete, ownKeys+"/"+user.ID, s.Key, nil, http.StatusNoContent, nil)
			assert.Equal(t, http.StatusUnauthorized, callEcho(t, in.url, user.Key), "a key right after its revocation")

			system := createKey(t, s.Stack, "", systemKey, "doomed operator", "system-admin")
			adminOK(t, s.Stack, http.MethodDelete, sysKeys+"/"+system.ID, systemKey, nil, http.StatusNoContent, nil)
			status, b := at(t, in.url, http.MethodGet, tenants, system.Key, nil)
			assert.Equal(t, http.StatusUnauthorized, status, "a system key right after its revocation: %s", b)
		})
	}
}

func TestRotatedKeyIsReplacedOnTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	for _, in := range s.ingresses() {
		t.Run(in.name, func(t *testing.T) {
			old := createKey(t, s.Stack, "default", s.Key, "rotating", "user")
			require.Equal(t, http.StatusOK, callEcho(t, in.url, old.Key))
			var rotated newKey
			adminOK(t, s.Stack, http.MethodPost, ownKeys+"/"+old.ID+"/rotate", s.Key, nil, http.StatusCreated, &rotated)
			assert.Equal(t, http.StatusUnauthorized, callEcho(t, in.url, old.Key), "the old key right after the rotation")
			assert.Equal(t, http.StatusOK, callEcho(t, in.url, rotated.Key), "the new key right after the rotation")
		})
	}
}

func TestCreatedTenantServesTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	for i, in := range s.ingresses() {
		t.Run(in.name, func(t *testing.T) {
			tenant := []string{"fresh-a", "fresh-b"}[i]
			adminOK(t, s.Stack, http.MethodPost, tenants, systemKey, map[string]string{"id": tenant}, http.StatusCreated, nil)
			status, _, b := call(t, in.url, "Echo", "echo", q("apikey", systemKey, "tenantId", tenant), []byte(`{}`))
			assert.Equal(t, http.StatusOK, status, "a system key's call for the tenant right after its creation: %s", b)
			status, b = at(t, in.url, http.MethodPost, tenants+"/"+tenant+"/keys", systemKey, map[string]string{"name": "first", "role": "user"})
			assert.Equal(t, http.StatusCreated, status, "a key for the tenant right after its creation: %s", b)
		})
	}
}

func TestDeletedTenantIsRefusedOnTheNextCall(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	for i, in := range s.ingresses() {
		t.Run(in.name, func(t *testing.T) {
			tenant := []string{"gone-a", "gone-b"}[i]
			adminOK(t, s.Stack, http.MethodPost, tenants, systemKey, map[string]string{"id": tenant}, http.StatusCreated, nil)
			admin := createKey(t, s.Stack, tenant, systemKey, "ops", "tenant-admin")
			require.Equal(t, http.StatusOK, callEcho(t, in.url, admin.Key))

			adminOK(t, s.Stack, http.MethodDelete, tenants+"/"+tenant, systemKey, nil, http.StatusNoContent, nil)
			assert.Equal(t, http.StatusUnauthorized, callEcho(t, in.url, admin.Key), "the tenant's key right after the deletion")
			status, b := at(t, in.url, http.MethodGet, tenants+"/"+tenant, systemKey, nil)
			assert.Equal(t, http.StatusNotFound, status, "the tenant right after its deletion: %s", b)
			status, _, b = call(t, in.url, "Echo", "echo", q("apikey", systemKey, "tenantId", tenant), []byte(`{}`))
			assert.Equal(t, http.StatusNotFound, status, "a system key's call for the tenant right after its deletion: %s", b)
		})
	}
}

func TestSubscriptionChangesReachTheNextRead(t *testing.T) {
	t.Parallel()
	s := startTwoIngresses(t)
	const path = "/api/v1/admin/tenants/default/subscriptions"
	for _, in := range s.ingresses() {
		t.Run(in.name, func(t *testing.T) {
			var sub struct {
				ID string `json:"id"`
			}
			adminOK(t, s.Stack, http.MethodPost, path, s.Key,
				map[string]any{"url": "http://127.0.0.1:9/hooks", "events": []string{"message.incoming"}}, http.StatusCreated, &sub)
			status, b := at(t, in.url, http.MethodGet, path+"/"+sub.ID, s.Key, nil)
			assert.Equal(t, http.StatusOK, status, "the subscription right after its creation: %s", b)
			status, b = at(t, in.url, http.MethodGet, path, s.Key, nil)
			assert.Equal(t, http.StatusOK, status)
			assert.Contains(t, string(b), sub.ID, "the list right after the creation")

			adminOK(t, s.Stack, http.MethodDelete, path+"/"+sub.ID, s.Key, nil, http.StatusNoContent, nil)
			status, b = at(t, in.url, http.MethodGet, path+"/"+sub.ID, s.Key, nil)
			assert.Equal(t, http.StatusNotFound, status, "the subscription right after its deletion: %s", b)
			status, b = at(t, in.url, http.MethodGet, path, s.Key, nil)
			assert.Equal(t, http.StatusOK, status)
			assert.False(t, strings.Contains(string(b), sub.ID), "the list right after the deletion: %s", b)
		})
	}
}
