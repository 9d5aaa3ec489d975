package ingress_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/subscription"
)

// TestAdminTextFields (docs/admin.md#names-and-descriptions): every name and description the
// admin API stores refuses control characters and invalid UTF-8 (which encoding/json would
// otherwise turn into U+FFFD) with 400 invalid-field naming the field, on every endpoint alike;
// the same text without them is stored.
func TestAdminTextFields(t *testing.T) {
	t.Parallel()
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	if err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stack.Config{Ingress: ingress.Config{AdminKey: systemKey, Subscriptions: subscription.Config{Allow: allow}}}, "default")
	const (
		subs   = "/api/v1/admin/tenants/default/subscriptions"
		agents = "/api/v1/admin/tenants/default/agents"
	)
	// Each body has one placeholder, X, where the text goes, raw (not escaped by a JSON encoder,
	// so that invalid UTF-8 reaches the server as it is).
	fields := []struct {
		name, path, body, field string
	}{
		{"key name", ownKeys, `{"name":"X","role":"user"}`, "name"},
		{"system key name", sysKeys, `{"name":"X","role":"system-admin"}`, "name"},
		{"subscription description", subs, `{"url":"http://127.0.0.1:9/h","events":["message.incoming"],"description":"X"}`, "description"},
		{"subscription url", subs, `{"url":"http://127.0.0.1:9/hX","events":["message.incoming"]}`, "url"},
		{"subscription agent", subs, `{"url":"http://127.0.0.1:9/h","events":["message.incoming"],"agents":["X"]}`, "agent"},
		{"remote agent name", agents, `{"name":"X","url":"http://127.0.0.1:9/a","chat":true}`, "name"},
		{"remote agent url", agents, `{"name":"U","url":"http://127.0.0.1:9/aX","chat":true}`, "url"},
		{"remote agent method description", agents, `{"name":"M","url":"http://127.0.0.1:9/a","methods":[{"name":"m","description":"X"}]}`, "description"},
	}
	bad := []struct{ name, text string }{
		{"NUL", `a\u0000b`}, {"escape", `a\u001b[31mb`}, {"newline", `a\nb`}, {"raw invalid UTF-8", "a\xffb"},
		{"lone surrogate", `a\ud800b`}, {"C1 control", `a\u0085b`},
	}
	for _, f := range fields {
		for _, b := range bad {
			t.Run(f.name+" with "+b.name, func(t *testing.T) {
				body := strings.Replace(f.body, "X", b.text, 1)
				key := s.Key
				if f.path == sysKeys {
					key = systemKey
				}
				status, h, got := adminReq(t, s.Stack, http.MethodPost, f.path, key, body, "Content-Type", "application/json")
				p := problemOf(t, status, h.Get("Content-Type"), got, http.StatusBadRequest)
				assert.Equal(t, "urn:agentbus:problem:invalid-field", p["type"])
				assert.Contains(t, p["detail"], f.field, "the detail names the field")
			})
		}
	}
	// The same fields with ordinary text are stored (the names are made distinct).
	for i, f := range fields {
		body := strings.Replace(f.body, "X", "ok-"+string(rune('a'+i)), 1)
		key := s.Key
		if f.path == sysKeys {
			key = systemKey
		}
		status, _, got := adminReq(t, s.Stack, http.MethodPost, f.path, key, body, "Content-Type", "application/json")
		assert.Equal(t, http.StatusCreated, status, "%s: %s", f.name, got)
	}
}
