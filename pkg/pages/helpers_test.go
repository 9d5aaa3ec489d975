package pages_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/browsertest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The browser tests' helpers live in package browsertest.
var (
	browser    = browsertest.Start
	choose     = browsertest.Choose
	replace    = browsertest.Replace
	waitFor    = browsertest.WaitFor
	text       = browsertest.Text
	screenshot = browsertest.Screenshot
)

// sendData sends a Data message to an Echo instance of tenant "default" through the admin send
// endpoint, from outside the page, and returns the status and body once the handler answered
// (send's wait=true).
func sendData(t *testing.T, s *stacktest.Stack, activation, participant, method string, data any) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"agentName": "Echo", "activationName": activation, "participantId": participant,
		"type": "Data", "text": method, "data": data})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", bytes.NewReader(body))
	require.NoError(t, err)
	return do(t, s, req)
}

// threadIDs returns the ids of the newest messages (at most 100) of an Echo instance's thread
// of tenant "default", newest first.
func threadIDs(t *testing.T, s *stacktest.Stack, activation, participant string) []string {
	t.Helper()
	q := url.Values{"agentName": {"Echo"}, "activationName": {activation}, "participantId": {participant}, "pageSize": {"100"}}
	req, err := http.NewRequest(http.MethodGet, s.URL+"/api/v1/admin/tenants/default/messaging/history?"+q.Encode(), nil)
	require.NoError(t, err)
	status, body := do(t, s, req)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var page struct {
		Messages []struct {
			ID string `json:"id"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	ids := make([]string, len(page.Messages))
	for i, m := range page.Messages {
		ids[i] = m.ID
	}
	return ids
}

// do sends req with the stack's tenant-admin key and returns the status and body.
func do(t *testing.T, s *stacktest.Stack, req *http.Request) (int, []byte) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}
