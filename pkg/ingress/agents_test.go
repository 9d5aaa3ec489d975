package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// agentList is GET /api/user/agents's answer.
type agentList struct {
	Tenant *string `json:"tenant"`
	Agents []struct {
		registry.Agent
		Live bool `json:"live"`
	} `json:"agents"`
}

func listAgents(t *testing.T, s *stacktest.Stack, hdr ...string) agentList {
	t.Helper()
	status, h, b := doRequest(t, http.MethodGet, s.URL+"/api/user/agents", nil, hdr...)
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	assert.Equal(t, "no-store", h.Get("Cache-Control"))
	var ans agentList
	require.NoError(t, json.Unmarshal(b, &ans), "%s", b)
	return ans
}

func TestListAgents(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// An agent whose hosts are all gone stays registered, and is listed as not live.
	require.NoError(t, registry.Register(ctx, s.Res.Registry, []registry.Agent{{Name: "Archived", WorkflowTypes: []string{"Supervisor Workflow"}, Chat: true}}))
	require.Eventually(t, func() bool { return len(listAgents(t, s, bearerHeader(s.Key)...).Agents) == 2 }, 5*time.Second, 10*time.Millisecond)

	ans := listAgents(t, s, bearerHeader(s.Key)...)
	require.NotNil(t, ans.Tenant)
	assert.Equal(t, "default", *ans.Tenant)
	require.Len(t, ans.Agents, 2)
	archived, echo := ans.Agents[0], ans.Agents[1]
	assert.Equal(t, "Archived", archived.Name)
	assert.False(t, archived.Live)
	assert.True(t, archived.Chat)

	assert.Equal(t, "Echo", echo.Name)
	assert.True(t, echo.Live)
	assert.True(t, echo.Chat)
	assert.True(t, echo.File)
	assert.ElementsMatch(t, []string{"Supervisor Workflow", "Conversational"}, echo.WorkflowTypes)
	assert.Subset(t, echo.Webhooks, []string{"echo", "verify", "ack", "status", "count", "complete"})
	assert.Subset(t, echo.DataMethods, []string{"echo", "sum", "count"})

	// Another tenant sees the same agents (they are registered for the whole bus), under its own
	// name; the key may come as the apikey query parameter too.
	status, _, b := doRequest(t, http.MethodGet, s.URL+"/api/user/agents?apikey="+s.OtherKey, nil)
	require.Equal(t, http.StatusOK, status)
	var other agentList
	require.NoError(t, json.Unmarshal(b, &other))
	require.NotNil(t, other.Tenant)
	assert.Equal(t, "other", *other.Tenant)
	assert.Len(t, other.Agents, 2)
}

func TestListAgentsRefusals(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	for _, tc := range []struct {
		name  string
		query string
		hdr   []string
		want  int
	}{
		{name: "no key", want: http.StatusUnauthorized},
		{name: "wrong key", hdr: bearerHeader("abk_wrong"), want: http.StatusUnauthorized},
		{name: "wrong query key next to a good header", query: "?apikey=abk_wrong", hdr: bearerHeader(s.Key), want: http.StatusUnauthorized},
		{name: "bad query", query: "?x=%zz", hdr: bearerHeader(s.Key), want: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := doCT(t, http.MethodGet, s.URL+"/api/user/agents"+tc.query, nil, tc.hdr...)
			p := problemOf(t, status, ct, b, tc.want)
			assert.NotContains(t, string(b), "abk_wrong", "the answer repeats no key")
			if tc.want == http.StatusUnauthorized {
				assert.Contains(t, p["detail"], "Authorization header")
			}
		})
	}
}
