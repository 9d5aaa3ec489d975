package ingress_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestAdminListsAndCancelsTimers: a timer an agent set (Echo's tick) is listed by the admin API
// and cancelled by it, after which it neither lists nor cancels again.
func TestAdminListsAndCancelsTimers(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	status, _, b := send(t, s, "default", "wait=true", map[string]any{"agentName": "Echo", "activationName": "clock",
		"participantId": "ada", "type": "Data", "text": "tick", "data": map[string]any{"seconds": 60}}, "Authorization", "Bearer "+s.Key)
	require.Equal(t, http.StatusOK, status, "%s", b)

	instance := url.Values{"agentName": {"Echo"}, "activationName": {"clock"}}.Encode()
	list := "/api/v1/admin/tenants/default/schedules?" + instance
	var got struct {
		WorkflowID string `json:"workflowId"`
		Schedules  []struct {
			Name, Schedule, ParticipantID, Type, Method string
		} `json:"schedules"`
	}
	adminOK(t, s, http.MethodGet, list, s.Key, nil, http.StatusOK, &got)
	assert.Equal(t, "default:Echo:Supervisor Workflow:clock", got.WorkflowID)
	require.Len(t, got.Schedules, 1)
	assert.Equal(t, "tick", got.Schedules[0].Name)
	assert.Equal(t, "@every 1m0s", got.Schedules[0].Schedule)
	assert.Equal(t, "Data", got.Schedules[0].Type)
	assert.Equal(t, "tick", got.Schedules[0].Method)
	assert.Equal(t, "ada", got.Schedules[0].ParticipantID)

	// Another instance has none; a user key may not look.
	userSecret, _ := storeKey(t, s, "default", keys.RoleUser, "a-user")
	adminOK(t, s, http.MethodGet, "/api/v1/admin/tenants/default/schedules?workflowId="+url.QueryEscape("default:Echo:Supervisor Workflow:other"), s.Key, nil, http.StatusOK, &got)
	assert.Empty(t, got.Schedules)
	status, _, b = adminReq(t, s, http.MethodGet, list, userSecret, nil)
	problemOf(t, status, "application/problem+json", b, http.StatusForbidden)

	cancel := "/api/v1/admin/tenants/default/schedules/tick?" + instance
	adminOK(t, s, http.MethodDelete, cancel, s.Key, nil, http.StatusNoContent, nil)
	status, h, b := adminReq(t, s, http.MethodDelete, cancel, s.Key, nil)
	p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
	assert.Equal(t, "urn:agentbus:problem:schedule-not-found", p["type"])
	adminOK(t, s, http.MethodGet, list, s.Key, nil, http.StatusOK, &got)
	assert.Empty(t, got.Schedules)
	// A waiting request's deadline ends with its wait only.
	status, h, b = adminReq(t, s, http.MethodDelete, "/api/v1/admin/tenants/default/schedules/agentbus:wait:x.1?"+instance, s.Key, nil)
	p = problemOf(t, status, h.Get("Content-Type"), b, http.StatusBadRequest)
	assert.Equal(t, "urn:agentbus:problem:invalid-path", p["type"])

	// The instance is named as history names it: both forms at once are refused.
	status, h, b = adminReq(t, s, http.MethodGet, list+"&workflowId=x", s.Key, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusBadRequest)
}
