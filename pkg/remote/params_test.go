package remote_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// sendParams sends a Data message with data and waits for the reply.
func sendParams(t *testing.T, s *stacktest.Stack, agentName, activation, method string, data any) (int, map[string]any) {
	t.Helper()
	var ans map[string]any
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
		map[string]any{"agentName": agentName, "activationName": activation, "participantId": "ada", "type": "Data", "text": method, "data": data}, &ans)
	return status, ans
}

// withCountSchema is a registration whose Data method count has schema.
func withCountSchema(url string, schema any) map[string]any {
	return map[string]any{"name": "Strict", "url": url, "methods": []map[string]any{{"name": "count", "schema": schema}}}
}

// A remote agent's registered schema is checked as a Go agent's is: a call whose parameters do
// not match it never reaches the agent and leaves nothing in the thread. A replaced
// registration's schema applies to the calls after it.
func TestRemoteAgentSchemaChecked(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ep := newEndpoint(t)
	byRequired := map[string]any{"type": "object", "properties": map[string]any{"by": map[string]any{"type": "integer", "minimum": 1}}, "required": []string{"by"}}
	var reg remote.Registration
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, withCountSchema(ep.URL, byRequired), &reg)
	require.Equal(t, http.StatusCreated, status)
	ep.secret.Store(reg.Secret)
	require.NoError(t, s.WaitLive(t.Context(), "Strict"))

	for _, tc := range []struct {
		data   any
		detail string
	}{
		{map[string]any{}, "the parameters of count do not match its schema: missing property 'by'"},
		{nil, "the parameters of count do not match its schema: missing property 'by'"},
		{map[string]any{"by": 0}, "the parameters of count do not match its schema: at /by: minimum: got 0, want 1"},
	} {
		status, ans := sendParams(t, s, "Strict", "a", "count", tc.data)
		assert.Equal(t, http.StatusBadRequest, status, "%v", ans)
		assert.Equal(t, "urn:agentbus:problem:invalid-method-parameters", ans["type"])
		assert.Equal(t, tc.detail, ans["detail"])
	}
	ep.mu.Lock()
	assert.Empty(t, ep.requests, "no refused call reached the agent")
	ep.mu.Unlock()
	var page struct {
		Messages []map[string]any `json:"messages"`
	}
	call(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/messaging/history?agentName=Strict&activationName=a&participantId=ada", s.Key, nil, &page)
	assert.Empty(t, page.Messages, "nothing is stored of a refused call")

	status, ans := sendParams(t, s, "Strict", "a", "count", map[string]any{"by": 2})
	require.Equal(t, http.StatusOK, status, "%v", ans)
	assert.EqualValues(t, 1, ans["response"].(map[string]any)["data"].(map[string]any)["count"])

	// Replaced without the requirement, {} is a valid call once the new registration is served.
	status, _ = call(t, http.MethodPut, s.URL+"/api/v1/admin/agents/Strict", systemKey,
		withCountSchema(ep.URL, map[string]any{"type": "object", "properties": map[string]any{"by": map[string]any{"type": "integer"}}}), nil)
	require.Equal(t, http.StatusOK, status)
	require.Eventually(t, func() bool {
		status, _ := sendParams(t, s, "Strict", "a", "count", map[string]any{})
		return status == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "the replaced schema is checked")
}

// A schema that could not check calls is refused at registration, naming the method.
func TestRemoteAgentInvalidSchemaRefused(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	for _, tc := range []struct {
		name   string
		schema any
		detail string
	}{
		{"not a JSON Schema", map[string]any{"type": "object", "required": "by"},
			`invalid registration: method "count": the schema is not a valid JSON Schema: at /required: got string, want array`},
		{"a pattern Go cannot match", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string", "pattern": "^(?!x)"}}},
			"is not valid regex"},
		{"a schema from elsewhere", map[string]any{"$ref": "file:///etc/passwd"}, "schemas are not loaded from anywhere"},
		{"an example the schema refuses", map[string]any{"type": "object", "properties": map[string]any{"by": map[string]any{"type": "integer"}},
			"required": []string{"by"}, "examples": []any{map[string]any{"by": 2}, map[string]any{}}},
			`invalid registration: method "count": examples[1] does not match the schema: missing property 'by'`},
		{"an example that is no object", map[string]any{"type": "object", "examples": []any{"by 2"}},
			`invalid registration: method "count": examples[0] is not a JSON object, which a method's parameters are`},
		{"examples that are no array", map[string]any{"type": "object", "examples": map[string]any{"by": 2}},
			`invalid registration: method "count": the schema is not a valid JSON Schema: at /examples: got object, want array`},
		{"too many examples", map[string]any{"type": "object", "examples": make([]map[string]any, 17)},
			`invalid registration: method "count": the schema gives 17 examples, at most 16`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p map[string]any
			status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, withCountSchema("http://127.0.0.1:1/agentbus", tc.schema), &p)
			assert.Equal(t, http.StatusBadRequest, status, "%v", p)
			assert.Equal(t, "urn:agentbus:problem:invalid-field", p["type"])
			assert.Contains(t, p["detail"], tc.detail)
		})
	}
	// Schemas whose patterns would hold megabytes once compiled, in every process that checks
	// their calls: one alone, and several that are each small enough.
	repeated := func(n int) map[string]any {
		props := map[string]any{}
		for i := range n {
			props[fmt.Sprintf("p%d", i)] = map[string]any{"type": "string", "pattern": "^.{1,1000}$"}
		}
		return map[string]any{"type": "object", "properties": props}
	}
	var p map[string]any
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, withCountSchema("http://127.0.0.1:1/agentbus", repeated(50)), &p)
	assert.Equal(t, http.StatusBadRequest, status, "%v", p)
	assert.Contains(t, p["detail"], `invalid registration: method "count": the schema's patterns are too large`)
	twice := withCountSchema("http://127.0.0.1:1/agentbus", repeated(45))
	twice["methods"] = append(twice["methods"].([]map[string]any), map[string]any{"name": "again", "schema": repeated(45)})
	p = nil
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, twice, &p)
	assert.Equal(t, http.StatusBadRequest, status, "%v", p)
	assert.Contains(t, p["detail"], "invalid registration: the methods' schemas are too large together")

	// Examples the schema takes are kept with it.
	schema := map[string]any{"type": "object", "properties": map[string]any{"by": map[string]any{"type": "integer"}},
		"required": []string{"by"}, "examples": []any{map[string]any{"by": 2}}}
	var reg remote.Registration
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, withCountSchema("http://127.0.0.1:1/agentbus", schema), &reg)
	require.Equal(t, http.StatusCreated, status, "%v", reg)
	require.Len(t, reg.Methods, 1)
	assert.JSONEq(t, `{"type":"object","properties":{"by":{"type":"integer"}},"required":["by"],"examples":[{"by":2}]}`, string(reg.Methods[0].Schema))
}
