package ingress_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

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
