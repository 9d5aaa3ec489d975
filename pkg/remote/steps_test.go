package remote_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// A remote agent's steps and waits: each step the agent asks to record is sent back in the
// journal of the next send of the same request; a recorded error is sent as one; a wait parks
// the request (202), and the signal that ends it sends the request again with the event last in
// its journal, whose answer the signal's caller gets.
func TestRemoteAgentStepsAndWaits(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ep := newEndpoint(t)
	var reg remote.Registration
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey,
		map[string]any{"name": "Stepper", "url": ep.URL + "/agentbus", "methods": []map[string]any{{"name": "twosteps"}, {"name": "callread"}}}, &reg)
	require.Equal(t, http.StatusCreated, status)
	ep.secret.Store(reg.Secret)
	require.NoError(t, s.WaitLive(t.Context(), "Stepper"))

	status, ans := send(t, s, "Stepper", "a", "twosteps")
	require.Equal(t, http.StatusAccepted, status, "%v", ans)
	assert.Contains(t, mustJSON(t, ans), `"waiting":{`)
	assert.Contains(t, mustJSON(t, ans), `"signals":["go"]`)

	var sig map[string]any
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/signal", s.Key,
		map[string]any{"agentName": "Stepper", "activationName": "a", "participantId": "ada", "name": "go", "data": map[string]any{"by": "ops"}}, &sig)
	require.Equal(t, http.StatusOK, status, "%v", sig)
	var got struct {
		Response struct {
			Data struct {
				Journal []remote.JournalEntry `json:"journal"`
			} `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustJSON(t, sig)), &got))
	j := got.Response.Data.Journal
	require.Len(t, j, 3, "%v", sig)
	assert.Equal(t, remote.JournalEntry{Name: "a", Result: json.RawMessage("1")}, j[0])
	assert.Equal(t, remote.JournalEntry{Name: "b", Error: &remote.StepError{Status: 409, Message: "b is taken"}}, j[1])
	assert.Equal(t, "go", j[2].Name)
	var ev map[string]any
	require.NoError(t, json.Unmarshal(j[2].Result, &ev))
	assert.Equal(t, "signal", ev["type"])
	assert.Equal(t, "go", ev["method"])
	assert.Equal(t, map[string]any{"by": "ops"}, ev["data"])
	assert.EqualValues(t, 1, ep.stepRuns.Load(), "the first step ran again")

	// The sends: journals of 0, 1, 2 entries before the wait; 3 after it.
	ep.mu.Lock()
	var lens []int
	for _, r := range ep.requests {
		if r.Message != nil && r.Message.Method == "twosteps" {
			lens = append(lens, len(r.Journal))
		}
	}
	ep.mu.Unlock()
	assert.Equal(t, []int{0, 1, 2, 3}, lens)

	// A call and a read of the thread, as steps the host makes: the callee's result, a call's
	// failure, and the thread's messages before the request, in the journal.
	status, ans = send(t, s, "Stepper", "a", "callread")
	require.Equal(t, http.StatusOK, status, "%v", ans)
	require.NoError(t, json.Unmarshal([]byte(mustJSON(t, ans)), &got))
	j = got.Response.Data.Journal
	require.Len(t, j, 3, "%v", ans)
	assert.JSONEq(t, `{"sum":5}`, string(j[0].Result))
	require.NotNil(t, j[1].Error, "%v", j[1])
	assert.Equal(t, http.StatusBadRequest, j[1].Error.Status)
	var read struct {
		Messages []struct {
			Text *string `json:"text"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(j[2].Result, &read), "%s", j[2].Result)
	require.NotEmpty(t, read.Messages, "the thread before the request")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
