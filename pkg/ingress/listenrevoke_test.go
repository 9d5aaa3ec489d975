package ingress_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestListenStreamEndsWithItsKey: a listen stream ends when its key is revoked, by the time the
// revocation is answered, and when its tenant is deleted; a stream of another key on the same
// thread goes on. Without it a revoked key, or a deleted tenant's, would go on reading the
// thread, and a tenant made later with the same id would write into it.
func TestListenStreamEndsWithItsKey(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	thread := q("workflowId", echoWF, "participantId", "zed")
	gone := createKey(t, s, "default", systemKey, "revoked", "user")
	kept := createKey(t, s, "default", systemKey, "kept", "user")
	waitKnown(t, s, gone.Key, kept.Key)
	revoked := listen(t, s, thread, bearerHeader(gone.Key)...)
	other := listen(t, s, thread, bearerHeader(kept.Key)...)
	revoked.comment(t)
	other.comment(t)

	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/default/keys/"+gone.ID, systemKey, nil, http.StatusNoContent, nil)
	revoked.ended(t, "the stream of a revoked key")
	webhookCalls(t, s, "zed", "after-revoke")
	_, m := other.next(t)
	assert.Equal(t, "after-revoke", m.RequestID, "another key's stream")

	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	acme := createKey(t, s, "acme", systemKey, "ops", "tenant-admin")
	waitKnown(t, s, acme.Key)
	theirs := listenAt(t, s, "acme", q("workflowId", echoWorkflow("acme", "default"), "participantId", "zed"), bearerHeader(acme.Key)...)
	theirs.comment(t)
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme", systemKey, nil, http.StatusNoContent, nil)
	theirs.ended(t, "the stream of a deleted tenant's key")
}

// TestCallsInFlightGetNoAnswerForARevokedKey: a call waiting for its handler when its key is
// revoked stops waiting, on the ingress the revocation went through and on another: a converse
// call gets 401 while its handler still runs (it sleeps longer than the call may wait, so only
// the revocation can end the call before its timeout), a streamed one ends with a 401 error
// event. The request itself was accepted and runs; a call of another key waiting beside them
// gets its answer.
func TestCallsInFlightGetNoAnswerForARevokedKey(t *testing.T) {
	t.Parallel()
	// The revoked calls' handlers are still asleep when the test ends: the host cancels them at
	// once instead of giving them 8 s to finish.
	two := startTwoIngressesWith(t, stacktest.Options{Host: agent.HostConfig{ShutdownGrace: time.Second}})
	s := two.Stack
	gone := createKey(t, s, "default", systemKey, "revoked", "user")
	kept := createKey(t, s, "default", systemKey, "kept", "user")
	waitKnown(t, s, gone.Key, kept.Key)
	require.Eventually(t, func() bool { return callEcho(t, two.second.URL, gone.Key) == http.StatusOK },
		5*time.Second, 10*time.Millisecond, "the second ingress knows the key")
	const long, sleep = `{"ms":120000}`, `{"ms":1500}`
	sleeping := func(key, participant string) string {
		base := s.URL
		if participant == "a" {
			base = two.second.URL // the revocation goes through the first
		}
		return base + "/api/user/rest/converse?" + q("workflow", "Echo", "type", "Data", "text", "sleep",
			"participantId", participant, "timeoutSeconds", "60", "apikey", key).Encode()
	}

	var (
		wg                    sync.WaitGroup
		goneStatus, keptState int
		goneBody              []byte
		streamed              []byte
	)
	wg.Go(func() {
		goneStatus, _, goneBody = doCT(t, http.MethodPost, sleeping(gone.Key, "a"), strings.NewReader(long), "Content-Type", "application/json")
	})
	wg.Go(func() {
		_, _, streamed = doCT(t, http.MethodPost, sleeping(gone.Key, "b"), strings.NewReader(long),
			"Content-Type", "application/json", "Accept", "text/event-stream")
	})
	wg.Go(func() {
		keptState, _, _ = doCT(t, http.MethodPost, sleeping(kept.Key, "c"), strings.NewReader(sleep), "Content-Type", "application/json")
	})
	time.Sleep(500 * time.Millisecond) // the calls wait for their handlers
	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/default/keys/"+gone.ID, systemKey, nil, http.StatusNoContent, nil)
	wg.Wait()

	assert.Equal(t, http.StatusUnauthorized, goneStatus, "the revoked key's call on another ingress: %s", goneBody)
	assert.Contains(t, string(goneBody), "revoked", "the revoked key's call on another ingress")
	events := readEvents(bytes.NewReader(streamed))
	require.NotEmpty(t, events, "the revoked key's stream")
	last := events[len(events)-1]
	assert.Equal(t, "error", last.Event, "the revoked key's stream ends with %+v", last)
	assert.Contains(t, last.Data, `"status":401`, "the revoked key's stream")
	assert.Equal(t, http.StatusOK, keptState, "another key's call")
	ran := readHistory(t, s.URL, historyPath("default"), q("workflowId", echoWF, "participantId", "a"), bearerHeader(kept.Key)...)
	assert.Empty(t, ran.Messages, "the revoked key's call ended before its handler answered (its request and answer are stored together)")
}
