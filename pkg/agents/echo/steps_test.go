package echo_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// stepsAnswer is the answer of Echo's steps method.
type stepsAnswer struct {
	Steps   int `json:"steps"`
	Attempt int `json:"attempt"`
	Ran     []struct {
		Attempt int    `json:"attempt"`
		HostID  string `json:"hostId"`
	} `json:"ran"`
}

// sendSteps calls Echo's Data method steps on an instance with the admin send endpoint, waiting
// for the reply, and returns the status and the body.
func sendSteps(t *testing.T, s *stacktest.Stack, activation string, params any) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"agentName": echo.Name, "activationName": activation, "participantId": "ada",
		"type": "Data", "text": "steps", "data": params})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// echoState reads an Echo instance's state with the webhook state.
func echoState(t *testing.T, s *stacktest.Stack, activation string) echo.State {
	t.Helper()
	u := s.URL + "/api/user/webhooks/" + url.PathEscape("default:Echo:Supervisor Workflow:"+activation) + "/state?apikey=" + url.QueryEscape(s.Key)
	resp, err := http.Post(u, "", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "reading the state")
	var out struct {
		State echo.State `json:"state"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.State
}

// Echo's steps makes its steps one after another, each counted in the state once per run, and
// answers which attempt and host ran each; bad parameters are refused before any step runs.
func TestEchoSteps(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})

	status, body := sendSteps(t, s, "steps", map[string]any{"n": 3, "sleepMs": 5})
	require.Equal(t, http.StatusOK, status, "%s", body)
	var reply struct {
		Response struct {
			Data stepsAnswer `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(body, &reply))
	got := reply.Response.Data
	assert.Equal(t, 3, got.Steps)
	assert.Equal(t, 1, got.Attempt)
	require.Len(t, got.Ran, 3)
	for i, r := range got.Ran {
		assert.Equal(t, 1, r.Attempt, "step %d", i+1)
		assert.NotEmpty(t, r.HostID, "step %d", i+1)
	}
	assert.Equal(t, []int{1, 1, 1}, echoState(t, s, "steps").Steps)

	status, body = sendSteps(t, s, "steps", map[string]any{"n": 2})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Equal(t, []int{2, 2, 1}, echoState(t, s, "steps").Steps, "a new request runs its steps again")

	for _, bad := range []map[string]any{
		{"n": 0}, {"n": 101}, {"n": 1, "sleepMs": -1}, {"n": 1, "sleepMs": 60001}, {"n": 6, "sleepMs": 60000},
	} {
		status, body := sendSteps(t, s, "steps", bad)
		assert.Equal(t, http.StatusBadRequest, status, "%v: %s", bad, body)
		assert.Contains(t, string(body), "steps needs n from 1 to 100", "%v", bad)
	}
	status, body = sendSteps(t, s, "steps", map[string]any{"sleepMs": 1})
	assert.Equal(t, http.StatusBadRequest, status, "%s", body)
	assert.Contains(t, string(body), "invalid-method-parameters")
	assert.Equal(t, []int{2, 2, 1}, echoState(t, s, "steps").Steps, "refused calls ran no step")
}
