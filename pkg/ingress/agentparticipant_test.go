package ingress_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// A client may not send as an "agent:" participant: those conversations belong to agents calling
// each other, and a callee trusts that such a sender is an agent. Reading such a thread is fine.
func TestClientsCannotSendAsAnAgent(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	auth := bearerHeader(s.Key)
	cases := []struct {
		name string
		do   func() (int, string, []byte)
	}{
		{"webhook", func() (int, string, []byte) {
			return call(t, s.URL, "Echo", "echo", q("participantId", "agent:echo", "apikey", s.Key), nil)
		}},
		{"converse", func() (int, string, []byte) {
			return converse(t, s, q("workflow", "Echo", "type", "Chat", "text", "hi", "participantId", "Agent:Echo"), "", auth...)
		}},
		{"send", func() (int, string, []byte) {
			return send(t, s, "default", "", msg("participantId", "agent:echo", "type", "Chat", "text", "hi"), auth...)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, ct, b := c.do()
			p := problemOf(t, status, ct, b, http.StatusBadRequest)
			assert.Contains(t, p["detail"], `may not begin with "agent:"`)
		})
	}
	status, _, _ := doGet(t, s.URL, "/api/v1/admin/tenants/default/messaging/history",
		q("agentName", "Echo", "activationName", "x", "participantId", "agent:echo"), auth...)
	assert.Equal(t, http.StatusOK, status, "reading an agents' thread is allowed")
}
