package remote_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// A request whose state changed while the agent worked on it is sent again with the newer state;
// when the agent then asks for a call (or a read of the thread), the request runs again from the
// start, as it does for a step: the call is made and its result reaches the agent, instead of the
// answer that asked for it being taken for the final one.
func TestRemoteAgentCallAfterStateConflict(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	var secret atomic.Value
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hdr := map[string]string{}
		for k := range r.Header {
			hdr[k] = r.Header.Get(k)
		}
		if err := (webhooksig.Standard{Secret: secret.Load().(string)}).Verify(hdr, body); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var req remote.Request
		if err := json.Unmarshal(body, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ans map[string]any
		switch {
		case req.Message.Method == "setstate":
			ans = map[string]any{"state": map[string]int{"v": 2}, "reply": map[string]any{"data": map[string]bool{"set": true}}}
		case len(req.Journal) > 0:
			ans = map[string]any{"reply": map[string]any{"data": map[string]any{"journal": req.Journal}}}
		case string(req.State) == `{"v":2}`:
			ans = map[string]any{"call": map[string]any{"name": "c", "agent": "Echo", "activation": "racer-b", "method": "count"}}
		default:
			// Another conversation of the instance changes its state meanwhile.
			b, _ := json.Marshal(map[string]any{"agentName": "Racer", "activationName": "a", "participantId": "bob", "type": "Data", "text": "setstate", "data": map[string]any{}})
			hr, _ := http.NewRequest(http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", bytes.NewReader(b))
			hr.Header.Set("Authorization", "Bearer "+s.Key)
			hr.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(hr); err == nil {
				resp.Body.Close()
			}
			ans = map[string]any{"state": map[string]int{"v": 1}, "reply": map[string]any{"data": map[string]bool{"stale": true}}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	}))
	t.Cleanup(ep.Close)
	var reg remote.Registration
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key,
		map[string]any{"name": "Racer", "url": ep.URL + "/agentbus", "methods": []map[string]any{{"name": "racy"}, {"name": "setstate"}}}, &reg)
	require.Equal(t, http.StatusCreated, status)
	secret.Store(reg.Secret)
	require.NoError(t, s.WaitLive(t.Context(), "Racer"))

	status, ans := sendParams(t, s, "Racer", "a", "racy", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%v", ans)
	var got struct {
		Response struct {
			Data struct {
				Journal []remote.JournalEntry `json:"journal"`
			} `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustJSON(t, ans)), &got))
	require.Len(t, got.Response.Data.Journal, 1, "the call was made: %v", ans)
	assert.Equal(t, "c", got.Response.Data.Journal[0].Name)
	assert.JSONEq(t, `1`, string(mustField(t, got.Response.Data.Journal[0].Result, "count")))
}

// mustField is a field of a JSON object.
func mustField(t *testing.T, obj json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(obj, &m), "%s", obj)
	return m[name]
}
