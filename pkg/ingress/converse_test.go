package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

func TestConverse(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	status, _, b := converse(t, s, q("workflow", "Echo", "type", "Chat", "participantId", "Bob", "text", "hi there"), "", bearerHeader(s.Key)...)
	a := answerOf(t, status, b)
	resp, ok := decode(t, b)["response"].(map[string]any)
	require.True(t, ok, "chat answer without response: %s", b)
	assert.Equal(t, "You said: hi there", resp["text"], "chat answer %s", b)
	assert.Equal(t, 0.0, resp["messageType"], "chat answer %s", b)
	assert.NotEmpty(t, a.RequestID, "chat answer %s", b)
	assert.NotEmpty(t, a.ThreadID, "chat answer %s", b)
	assert.Contains(t, resp, "data", "chat answer has no data field (must be null): %s", b)
	assert.Nil(t, resp["data"], "chat answer %s", b)

	status, _, b = converse(t, s, q("workflow", "Echo:Conversational", "type", "Data", "text", "sum", "apikey", s.Key), `{"values":[1,2,3.5]}`)
	require.Equal(t, http.StatusOK, status, "data answer %s", b)
	resp, ok = decode(t, b)["response"].(map[string]any)
	require.True(t, ok, "data answer without response: %s", b)
	assert.Nil(t, resp["text"], "data answer %s", b)
	assert.Equal(t, 1.0, resp["messageType"], "data answer %s", b)
	assert.Equal(t, map[string]any{"sum": 6.5}, resp["data"], "data answer %s", b)

	for _, tc := range []struct {
		name  string
		query url.Values
		body  string
		want  int
	}{
		{"no key", q("workflow", "Echo", "type", "Chat", "text", "x"), "", 401},
		{"missing workflow", q("type", "Chat", "text", "x", "apikey", s.Key), "", 400},
		{"missing text", q("workflow", "Echo", "type", "Chat", "apikey", s.Key), "", 400},
		{"bad type", q("workflow", "Echo", "type", "File", "text", "x", "apikey", s.Key), "", 400},
		{"unknown method", q("workflow", "Echo", "type", "Data", "text", "nope", "apikey", s.Key), "{}", 404},
		{"bad params", q("workflow", "Echo", "type", "Data", "text", "sum", "apikey", s.Key), `{"values":"x"}`, 400},
		{"body not an object", q("workflow", "Echo", "type", "Data", "text", "sum", "apikey", s.Key), `[1]`, 400},
		{"fail", q("workflow", "Echo", "type", "Data", "text", "fail", "apikey", s.Key), `{"status":409,"message":"busy"}`, 409},
		{"other tenant's workflow", q("workflow", "other:Echo:Supervisor Workflow:default", "type", "Chat", "text", "x", "apikey", s.Key), "", 403},
		{"timeout out of range", q("workflow", "Echo", "type", "Chat", "text", "x", "apikey", s.Key, "timeoutSeconds", "301"), "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := converse(t, s, tc.query, tc.body)
			problemOf(t, status, ct, b, tc.want)
		})
	}
}

// Data methods keep the instance's state across calls and across a restart of the host.
func TestConverseCountSurvivesHostRestart(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	count := func() float64 {
		t.Helper()
		status, _, b := converse(t, s, q("workflow", "Echo", "type", "Data", "text", "COUNT", "apikey", s.Key), "")
		a := answerOf(t, status, b)
		var c struct{ Count float64 }
		require.NoError(t, json.Unmarshal(a.Response.Data, &c), "%s", a.Response.Data)
		return c.Count
	}
	require.Equal(t, 1.0, count(), "first count")
	require.Equal(t, 2.0, count(), "count does not persist across calls")
	require.NoError(t, s.StopHost())
	stop, err := s.AddHost(context.Background(), "second")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	require.NoError(t, s.WaitLive(context.Background(), "Echo"))
	assert.Equal(t, 3.0, count(), "count after the host restarted")
}

// A method's own error is answered as a problem and kept in the thread's history too.
func TestConverseErrorStoredInHistory(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	status, ct, b := converse(t, s, q("workflow", "Echo", "type", "Data", "text", "fail", "participantId", "erin", "apikey", s.Key), `{"status":422,"message":"cannot do that"}`)
	problemOf(t, status, ct, b, 422)
	status, _, b = converse(t, s, q("workflow", "Echo", "type", "Data", "text", "history", "participantId", "erin", "apikey", s.Key), `{"size":5}`)
	a := answerOf(t, status, b)
	var got struct {
		Messages []struct {
			Direction int             `json:"direction"`
			Text      *string         `json:"text"`
			Data      json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(a.Response.Data, &got), "history %s", a.Response.Data)
	require.Len(t, got.Messages, 2, "history %s", a.Response.Data)
	out := got.Messages[0]
	assert.Equal(t, 1, out.Direction, "stored error %s", a.Response.Data)
	require.NotNil(t, out.Text, "stored error %s", a.Response.Data)
	assert.Equal(t, "cannot do that", *out.Text, "stored error %s", a.Response.Data)
	assert.Contains(t, string(out.Data), `"status":422`, "stored error %s", a.Response.Data)
}
