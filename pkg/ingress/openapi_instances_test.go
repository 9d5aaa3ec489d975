package ingress_test

import (
	"net/http"
	"net/url"

	"github.com/stretchr/testify/assert"
)

// contractInstances: the instance inspector's listing, show, complete and backfill, and their
// refusals.
func contractInstances(c *contractClient) {
	t := c.t
	key := c.key
	wf := "default:Echo:Supervisor Workflow:contract-inspect"
	c.want(http.StatusOK, http.MethodPost, "/api/user/webhooks/"+url.PathEscape(wf)+"/count?apikey="+key, "", nil)
	const list = "/api/v1/admin/tenants/default/agents/Echo/instances"
	m := c.want(http.StatusOK, http.MethodGet, list+"?limit=1", key, nil)
	assert.Len(t, m["instances"], 1)
	c.want(http.StatusOK, http.MethodGet, list+"?status=running&prefix=contract-&activeAfter=2026-01-01T00:00:00Z&activeBefore=2099-01-01T00:00:00Z", key, nil)
	c.want(http.StatusBadRequest, http.MethodGet, list+"?status=asleep", key, nil)
	c.want(http.StatusBadRequest, http.MethodGet, list+"?cursor=none", key, nil)
	c.want(http.StatusForbidden, http.MethodGet, "/api/v1/admin/tenants/other/agents/Echo/instances", key, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, list, "", nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nosuch/agents/Echo/instances", systemKey, nil)

	show := "/api/v1/admin/tenants/default/instances/" + url.PathEscape(wf)
	m = c.want(http.StatusOK, http.MethodGet, show, key, nil)
	assert.Equal(t, wf, m["workflowId"])
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/default/instances/"+url.PathEscape("default:Echo:Supervisor Workflow:none"), key, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/other/instances/"+url.PathEscape(wf), c.other, nil)
	c.want(http.StatusBadRequest, http.MethodGet, "/api/v1/admin/tenants/default/instances/a:b:c", key, nil)
	c.want(http.StatusUnauthorized, http.MethodGet, show, "", nil)

	c.want(http.StatusOK, http.MethodPost, show+"/complete", key, nil)
	c.want(http.StatusConflict, http.MethodPost, show+"/complete", key, nil)
	c.want(http.StatusNotFound, http.MethodPost, "/api/v1/admin/tenants/other/instances/"+url.PathEscape(wf)+"/complete", c.other, nil)
	c.want(http.StatusForbidden, http.MethodPost, "/api/v1/admin/tenants/other/instances/"+url.PathEscape(wf)+"/complete", key, nil)
	c.want(http.StatusBadRequest, http.MethodPost, "/api/v1/admin/tenants/default/instances/a:b:c/complete", key, nil)
	c.want(http.StatusUnauthorized, http.MethodPost, show+"/complete", "", nil)

	m = c.want(http.StatusOK, http.MethodPost, "/api/v1/admin/instances/backfill", systemKey, nil)
	assert.EqualValues(t, 0, m["remaining"])
	c.want(http.StatusForbidden, http.MethodPost, "/api/v1/admin/instances/backfill", key, nil)
	c.want(http.StatusUnauthorized, http.MethodPost, "/api/v1/admin/instances/backfill", "", nil)
}
