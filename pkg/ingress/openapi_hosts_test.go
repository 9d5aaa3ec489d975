package ingress_test

import (
	"net/http"
	"net/url"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// contractHosts: the hosts views, an instance's queue and the retry of a queued request, and
// their refusals.
func contractHosts(c *contractClient) {
	t := c.t
	key, other := c.key, c.other
	// The hosts of the remote agents the step before removed stop a moment after the removal.
	var m map[string]any
	assert.Eventually(t, func() bool {
		m = c.want(http.StatusOK, http.MethodGet, "/api/v1/admin/hosts", systemKey, nil)
		hosts, _ := m["hosts"].([]any)
		agents, _ := m["agents"].([]any)
		return len(hosts) == 1 && len(agents) == 2
	}, 10*time.Second, 50*time.Millisecond, "one host of two agents")
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/hosts", key, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, "/api/v1/admin/hosts", "", nil)
	const tenantHosts = "/api/v1/admin/tenants/default/hosts"
	c.want(http.StatusOK, http.MethodGet, tenantHosts, key, nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/hosts", key, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nobody/hosts", systemKey, nil)
	c.want(http.StatusBadRequest, http.MethodGet, tenantHosts, key, nil, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodGet, tenantHosts, "", nil)

	// A request that sleeps, and one queued behind it.
	const wf = "default:Echo:Supervisor Workflow:contract-queue"
	queue := "/api/v1/admin/tenants/default/instances/" + url.PathEscape(wf) + "/queue"
	for _, r := range []map[string]any{
		msg("activationName", "contract-queue", "participantId", "ada", "type", "Data", "text", "sleep", "data", map[string]any{"ms": 1500}, "requestId", "contract-sleep"),
		msg("activationName", "contract-queue", "participantId", "ada", "type", "Data", "text", "sum", "data", map[string]any{"values": []int{1}}, "requestId", "contract-sum"),
	} {
		c.want(http.StatusAccepted, http.MethodPost, "/api/v1/admin/tenants/default/messaging/send", key, r)
	}
	require.Eventually(t, func() bool {
		m = c.want(http.StatusOK, http.MethodGet, queue, key, nil)
		convs := m["conversations"].([]any)
		return len(convs) == 1 && len(convs[0].(map[string]any)["requests"].([]any)) == 2 &&
			convs[0].(map[string]any)["requests"].([]any)[0].(map[string]any)["state"] == "running"
	}, 10*time.Second, 20*time.Millisecond, "the sleeping request running and the next queued")
	c.want(http.StatusConflict, http.MethodPost, queue+"/contract-sleep/retry", key, nil)
	c.want(http.StatusNotFound, http.MethodPost, queue+"/nobody/retry", key, nil)
	c.want(http.StatusNotFound, http.MethodPost, "/api/v1/admin/tenants/other/instances/"+url.PathEscape(wf)+"/queue/contract-sleep/retry", other, nil)
	c.want(http.StatusForbidden, http.MethodPost, "/api/v1/admin/tenants/other/instances/"+url.PathEscape(wf)+"/queue/contract-sleep/retry", key, nil)
	c.want(http.StatusBadRequest, http.MethodPost, "/api/v1/admin/tenants/default/instances/a:b:c/queue/x/retry", key, nil)
	c.want(http.StatusUnauthorized, http.MethodPost, queue+"/contract-sleep/retry", "", nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/other/instances/"+url.PathEscape(wf)+"/queue", other, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/default/instances/"+url.PathEscape("default:Echo:Supervisor Workflow:none")+"/queue", key, nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/instances/"+url.PathEscape(wf)+"/queue", key, nil)
	c.want(http.StatusBadRequest, http.MethodGet, "/api/v1/admin/tenants/default/instances/a:b:c/queue", key, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, queue, "", nil)
	// Done, the instance is found with nothing waiting.
	require.Eventually(t, func() bool {
		m = c.want(http.StatusOK, http.MethodGet, queue, key, nil)
		return len(m["conversations"].([]any)) == 0
	}, 10*time.Second, 50*time.Millisecond, "the instance's queue empties")
}
