package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// Every test stops what it starts: the stack, the tail, the HTTP connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}

const adminKey = "sys_admin_key_0123456789abcdef"

// harness runs the CLI against one stack and keeps everything it printed, so that the test can
// check at the end that no key leaked.
type harness struct {
	t  *testing.T
	st *stacktest.Stack

	mu sync.Mutex
	// printed is every output of every run, except the stdout of key create and rotate.
	printed []string
	// secrets are the keys that must not be printed.
	secrets []string
}

func newHarness(t *testing.T) *harness {
	st := stacktest.Start(t, stacktest.Options{AdminKey: adminKey})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, st.WaitLive(ctx, "Echo"))
	return &harness{t: t, st: st, secrets: []string{adminKey, st.Key, st.OtherKey}}
}

// result is what one run printed and returned.
type result struct {
	stdout, stderr string
	err            error
}

// runWith runs the CLI with key in AGENTBUS_KEY and the stack's URL in AGENTBUS_URL.
func (h *harness) runWith(ctx context.Context, key string, stdout, stderr *natstest.LogBuffer, args ...string) error {
	env := map[string]string{"AGENTBUS_URL": h.st.URL, "AGENTBUS_KEY": key}
	return run(ctx, args, func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}, stdout, stderr)
}

// cmd runs the CLI to completion; secretOut says its stdout is a new key's secret.
func (h *harness) cmd(key string, secretOut bool, args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr natstest.LogBuffer
	err := h.runWith(ctx, key, &stdout, &stderr, args...)
	r := result{stdout: stdout.String(), stderr: stderr.String(), err: err}
	h.record(r.stderr)
	if !secretOut {
		h.record(r.stdout)
	}
	return r
}

func (h *harness) record(out string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.printed = append(h.printed, out)
}

func (h *harness) addSecret(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.secrets = append(h.secrets, s)
}

// waitKnown waits until the ingress accepts a new key: keys reach it through a watch.
func (h *harness) waitKnown(secret string) {
	h.t.Helper()
	require.NoError(h.t, h.st.WaitKnown(context.Background(), secret))
}

// ok runs the CLI and fails the test when it fails.
func (h *harness) ok(key string, args ...string) result {
	h.t.Helper()
	r := h.cmd(key, false, args...)
	require.NoError(h.t, r.err, "agentbus %s\nstderr: %s", strings.Join(args, " "), r.stderr)
	return r
}

// fails runs the CLI, expects an API error of this status, and checks how it is printed.
func (h *harness) fails(status int, key string, args ...string) result {
	h.t.Helper()
	r := h.cmd(key, false, args...)
	var ae *apiError
	require.ErrorAs(h.t, r.err, &ae, "agentbus %s: want an API error %d\nstderr: %s", strings.Join(args, " "), status, r.stderr)
	require.Equal(h.t, status, ae.Status, "agentbus %s: err %v, want an API error %d\nstderr: %s", strings.Join(args, " "), r.err, status, r.stderr)
	want := "error: " + ae.Error()
	require.True(h.t, strings.HasPrefix(r.stderr, "error: "), "agentbus %s: stdout %q stderr %q, want only %q on stderr", strings.Join(args, " "), r.stdout, r.stderr, want)
	require.Contains(h.t, r.stderr, ae.Error(), "agentbus %s: stdout %q stderr %q, want only %q on stderr", strings.Join(args, " "), r.stdout, r.stderr, want)
	require.Empty(h.t, r.stdout, "agentbus %s: stdout %q stderr %q, want only %q on stderr", strings.Join(args, " "), r.stdout, r.stderr, want)
	return r
}

// newKey creates a key in the "default" tenant and returns its secret and id.
func (h *harness) newKey(name, role string) (secret, id string) {
	h.t.Helper()
	r := h.cmd(h.st.Key, true, "key", "create", "--name", name, "--role", role)
	require.NoError(h.t, r.err, "key create\n%s", r.stderr)
	secret = strings.TrimSpace(r.stdout)
	require.True(h.t, strings.HasPrefix(secret, "abk_"), "key create printed %q, want the secret alone", r.stdout)
	require.NotContains(h.t, secret, "\n", "key create printed %q, want the secret alone", r.stdout)
	require.Contains(h.t, r.stderr, "shown only this once", "key create stderr: want the once-only warning")
	require.NotContains(h.t, r.stderr, secret, "key create stderr: want not the secret")
	h.addSecret(secret)
	h.waitKnown(secret)
	fields := strings.Fields(r.stderr)
	require.GreaterOrEqual(h.t, len(fields), 2, "key create stderr %q does not name the key", r.stderr)
	require.Equal(h.t, "key", fields[0], "key create stderr %q does not name the key", r.stderr)
	return secret, fields[1]
}

// checkNoKeyPrinted checks that at least atLeast outputs were recorded and that none of them
// holds a secret.
func (h *harness) checkNoKeyPrinted(t *testing.T, atLeast int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	require.GreaterOrEqual(t, len(h.printed), atLeast, "outputs recorded")
	for _, out := range h.printed {
		for _, s := range h.secrets {
			assert.NotContains(t, out, s, "a key was printed")
		}
	}
}

// TestCLI runs every command of the CLI against one stack, in order, and then checks that no
// run printed a key.
func TestCLI(t *testing.T) {
	h := newHarness(t)
	t.Run("tenants", h.testTenants)
	t.Run("keys", h.testKeys)
	t.Run("send", h.testSend)
	t.Run("converse", h.testConverse)
	t.Run("tail", h.testTail)
	t.Run("usage", h.testUsage)
	t.Run("no key printed", func(t *testing.T) { h.checkNoKeyPrinted(t, 20) })
}

// testTenants creates, lists and deletes a tenant, as a system admin and as a tenant's key.
func (h *harness) testTenants(t *testing.T) {
	h.t = t
	r := h.ok(adminKey, "tenant", "create", "acme")
	assert.Equal(t, "tenant acme created\n", r.stdout, "tenant create printed")
	r = h.ok(adminKey, "tenant", "list")
	for _, want := range []string{"ID", "acme", "default", "other"} {
		assert.Contains(t, r.stdout, want, "tenant list lacks %q", want)
	}
	r = h.ok(adminKey, "-json", "tenant", "list")
	var ans keys.TenantList
	if assert.NoError(t, json.Unmarshal([]byte(r.stdout), &ans), "tenant list -json printed %q", r.stdout) {
		assert.GreaterOrEqual(t, len(ans.Tenants), 3, "tenant list -json printed %q", r.stdout)
	}
	r = h.fails(409, adminKey, "tenant", "create", "acme")
	assert.Contains(t, r.stderr, "error: Conflict (409): a tenant with this id exists", "stderr")
	h.fails(403, h.st.Key, "tenant", "list")
	h.ok(adminKey, "tenant", "delete", "acme")
	h.fails(404, adminKey, "tenant", "delete", "acme")
}

// testKeys creates, lists, uses, revokes and rotates keys.
func (h *harness) testKeys(t *testing.T) {
	h.t = t
	secret, id := h.newKey("ci", "user")
	r := h.ok(h.st.Key, "key", "list")
	assert.Contains(t, r.stdout, id, "key list lacks the new key")
	assert.Contains(t, r.stdout, "ci", "key list lacks the new key")
	assert.Contains(t, r.stdout, "user", "key list lacks the new key")
	// The new user key works; a user key may not manage keys.
	h.ok(secret, "converse", "--workflow", "Echo", "--text", "hello")
	h.fails(403, secret, "key", "list")

	r = h.ok(h.st.Key, "key", "revoke", id)
	assert.Equal(t, "key "+id+" revoked\n", r.stdout, "key revoke printed")
	h.waitRevoked(secret)
	h.checkListedRevoked(id)
	h.checkRotate()
	h.fails(404, h.st.Key, "key", "revoke", "no-such-key")
}

// waitRevoked waits until the ingress refuses the revoked key secret: revocation reaches it
// through a watch, within a second.
func (h *harness) waitRevoked(secret string) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rr := h.cmd(secret, false, "converse", "--workflow", "Echo", "--text", "hello")
		var ae *apiError
		if errors.As(rr.err, &ae) && ae.Status == 401 {
			assert.True(h.t, strings.HasPrefix(rr.stderr, "error: Unauthorized (401): "), "revoked key: stderr %q", rr.stderr)
			return
		}
		require.False(h.t, time.Now().After(deadline), "the revoked key still works: %v %q", rr.err, rr.stderr)
		time.Sleep(50 * time.Millisecond)
	}
}

// checkListedRevoked checks that key list -json shows the key id revoked.
func (h *harness) checkListedRevoked(id string) {
	h.t.Helper()
	r := h.ok(h.st.Key, "-json", "key", "list")
	var list keys.KeyList
	require.NoError(h.t, json.Unmarshal([]byte(r.stdout), &list))
	revoked := false
	for _, k := range list.Keys {
		revoked = revoked || (k.ID == id && k.RevokedAt != nil)
	}
	assert.True(h.t, revoked, "key list -json does not show %s revoked: %s", id, r.stdout)
}

// checkRotate rotates a new key and checks that rotation prints the new secret once, like
// create, and that the new secret works.
func (h *harness) checkRotate() {
	h.t.Helper()
	t := h.t
	_, id2 := h.newKey("rotating", "tenant-admin")
	rr := h.cmd(h.st.Key, true, "key", "rotate", id2)
	require.NoError(t, rr.err, "key rotate\n%s", rr.stderr)
	rotated := strings.TrimSpace(rr.stdout)
	h.addSecret(rotated)
	h.waitKnown(rotated)
	assert.True(t, strings.HasPrefix(rotated, "abk_"), "key rotate: stdout %q stderr %q", rr.stdout, rr.stderr)
	assert.Contains(t, rr.stderr, id2+" is revoked", "key rotate: stdout %q", rr.stdout)
	assert.Contains(t, rr.stderr, "shown only this once", "key rotate: stdout %q", rr.stdout)
	h.ok(rotated, "key", "list")
}

// testSend sends messages of each type, waiting for the reply or not.
func (h *harness) testSend(t *testing.T) {
	h.t = t
	r := h.ok(h.st.Key, "send", "--agent", "Echo", "--activation", "default", "--participant", "me", "--type", "Chat", "--text", "hi", "--wait")
	assert.Equal(t, "You said: hi\n", r.stdout, "send --wait printed")
	r = h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--text", "later", "--topic", "t1")
	assert.True(t, strings.HasPrefix(r.stdout, "accepted: message "), "send printed %q", r.stdout)
	r = h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--type", "Data", "--text", "sum", "--data", `{"values":[2,5]}`, "--wait")
	assert.Contains(t, r.stdout, `"sum":7`, "send Data printed")
	path := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(path, []byte("hello file"), 0o600))
	r = h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--file", path, "--wait")
	assert.Contains(t, r.stdout, "Received notes.txt (10 bytes)", "send --file printed")
	h.fails(404, h.st.Key, "send", "--agent", "Nobody", "--participant", "me", "--text", "hi")
	// The key may also be given as a flag; it is still not printed.
	h.ok("", "-key", h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--text", "flag")
}

// testConverse converses with Data and Chat messages, as text, JSON and a stream.
func (h *harness) testConverse(t *testing.T) {
	h.t = t
	r := h.ok(h.st.Key, "converse", "--workflow", "Echo", "--type", "Data", "--text", "sum", "--data", `{"values":[1,2]}`)
	assert.Contains(t, r.stdout, `{"sum":3}`, "converse Data printed")
	r = h.ok(h.st.Key, "-json", "converse", "--workflow", "Echo", "--text", "hi", "--participant", "ada")
	var ans history.SyncAnswer
	if assert.NoError(t, json.Unmarshal([]byte(r.stdout), &ans), "converse -json printed %q", r.stdout) &&
		assert.NotNil(t, ans.Response, "converse -json printed %q", r.stdout) &&
		assert.NotNil(t, ans.Response.Text, "converse -json printed %q", r.stdout) {
		assert.Equal(t, "You said: hi", *ans.Response.Text, "converse -json printed %q", r.stdout)
	}
	r = h.ok(h.st.Key, "converse", "--workflow", "Echo", "--text", "hello there", "--stream")
	assert.Equal(t, "You said: hello there\n", r.stdout, "converse --stream printed")
	h.fails(400, h.st.Key, "converse", "--workflow", "Echo", "--type", "Data", "--text", "sum", "--data", `[1]`)
	h.fails(404, h.st.Key, "converse", "--workflow", "Echo", "--type", "Data", "--text", "nosuchmethod", "--stream")
}

// testTail tails a thread while a message is sent to it, and checks that a key of another
// tenant is refused.
func (h *harness) testTail(t *testing.T) {
	h.t = t
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr natstest.LogBuffer
	done := make(chan error, 1)
	go func() {
		done <- h.runWith(ctx, h.st.Key, &stdout, &stderr, "tail", "--agent", "Echo", "--activation", "tailed", "--participant", "Watcher")
	}()
	waitFor(t, &stderr, "tail: listening to")
	h.ok(h.st.Key, "send", "--agent", "Echo", "--activation", "tailed", "--participant", "watcher", "--text", "hi tail", "--wait")
	waitFor(t, &stdout, "You said: hi tail")
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "tail")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "tail did not stop when its context ended")
	}
	h.record(stdout.String())
	h.record(stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if assert.Len(t, lines, 2, "tail printed %q", stdout.String()) {
		assert.Contains(t, lines[0], " → Chat ", "tail printed %q", stdout.String())
		assert.True(t, strings.HasSuffix(lines[0], "hi tail"), "tail printed %q", stdout.String())
		assert.Contains(t, lines[1], " ← Chat ", "tail printed %q", stdout.String())
		assert.True(t, strings.HasSuffix(lines[1], "You said: hi tail"), "tail printed %q", stdout.String())
	}
	// A key of another tenant is refused at once, not retried.
	h.fails(403, h.st.OtherKey, "tail", "--workflow", "Echo", "--participant", "watcher")
}

// testUsage checks that commands given wrongly, or without a key, print the usage or say so.
func (h *harness) testUsage(t *testing.T) {
	h.t = t
	for _, args := range [][]string{{}, {"frobnicate"}, {"key"}, {"tenant", "create"}, {"send", "--text", "x"}} {
		r := h.cmd(h.st.Key, false, args...)
		assert.ErrorAs(t, r.err, new(usageError), "agentbus %q: stderr %q", args, r.stderr)
		assert.Contains(t, r.stderr, "usage: agentbus", "agentbus %q: err %v", args, r.err)
	}
	r := h.cmd("", false, "key", "list")
	assert.Error(t, r.err, "without a key: stderr %q", r.stderr)
	assert.Contains(t, r.stderr, "no API key", "without a key: err %v", r.err)
}

// waitFor waits until b holds want.
func waitFor(t *testing.T, b *natstest.LogBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.String(), want) {
		require.False(t, time.Now().After(deadline), "waited for %q; have %q", want, b.String())
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTailReconnects checks that tail resumes a broken stream with the id of the last message it
// printed, and keeps the key out of the URL.
func TestTailReconnects(t *testing.T) {
	var (
		mu       sync.Mutex
		requests []*http.Request
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Clone(context.Background()))
		n := len(requests)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1: // one message, then the stream breaks
			fmt.Fprint(w, ": listening\n\nid: m1\nevent: message\ndata: {\"id\":\"m1\",\"createdAt\":\"2026-11-22T03:40:21.255Z\",\"direction\":0,\"messageType\":1,\"text\":\"sum\",\"data\":{\"values\":[1,2]}}\n\n")
		default: // the rest, then the stream stays open until the client leaves
			fmt.Fprint(w, ": listening\n\nid: m2\nevent: message\ndata: {\"id\":\"m2\",\"createdAt\":\"2026-11-22T03:40:21.300Z\",\"direction\":1,\"messageType\":1,\"text\":null,\"data\":{\"sum\":3},\"scope\":\"math\"}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr natstest.LogBuffer
	done := make(chan error, 1)
	env := map[string]string{"AGENTBUS_URL": srv.URL, "AGENTBUS_KEY": "abk_secret", "AGENTBUS_TENANT": "acme"}
	go func() {
		done <- run(ctx, []string{"tail", "--workflow", "acme:Echo:Supervisor Workflow:x", "--participant", "p"},
			func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &stdout, &stderr)
	}()
	waitFor(t, &stdout, `{"sum":3}`)
	cancel()
	require.NoError(t, <-done)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if assert.Len(t, lines, 2, "tail printed %q", stdout.String()) {
		assert.Contains(t, lines[0], " → Data    sum {\"values\":[1,2]}", "tail printed %q", stdout.String())
		assert.Contains(t, lines[1], " ← Data    [math] {\"sum\":3}", "tail printed %q", stdout.String())
	}
	assert.Contains(t, stderr.String(), "reconnecting in 1s", "tail stderr")
	assert.Contains(t, stderr.String(), "tail: reconnected", "tail stderr")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, requests, 2, "requests")
	for i, r := range requests {
		assert.Equal(t, "/api/v1/admin/tenants/acme/messaging/listen", r.URL.Path, "request %d: %s %v", i, r.URL, r.Header)
		assert.Equal(t, "acme:Echo:Supervisor Workflow:x", r.URL.Query().Get("workflowId"), "request %d: %s %v", i, r.URL, r.Header)
		assert.Equal(t, "Bearer abk_secret", r.Header.Get("Authorization"), "request %d: %s %v", i, r.URL, r.Header)
		assert.NotContains(t, r.URL.String(), "abk_secret", "request %d: %s %v", i, r.URL, r.Header)
	}
	assert.Empty(t, requests[0].Header.Get("Last-Event-ID"), "first request's Last-Event-ID")
	assert.Equal(t, "m1", requests[1].Header.Get("Last-Event-ID"), "reconnection's Last-Event-ID")
	assert.NotContains(t, stdout.String()+stderr.String(), "abk_secret", "the key was printed")
}

// TestConverseStreamRestart checks that converse --stream starts a new line when the handler runs
// again: the deltas printed before the restart event stay on a line of their own, a note goes to
// stderr, and the last line is the whole answer.
func TestConverseStreamRestart(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: delta\ndata: {\"delta\":\"You said: \"}\n\nevent: delta\ndata: {\"delta\":\"he\"}\n\n"+
			"event: restart\ndata: {\"attempt\":2}\n\n"+
			"event: delta\ndata: {\"delta\":\"You said: \"}\n\nevent: delta\ndata: {\"delta\":\"hello\"}\n\n"+
			"event: message\ndata: {\"requestId\":\"r\",\"response\":{\"text\":\"You said: hello\",\"data\":null}}\n\n")
	}))
	defer srv.Close()
	var stdout, stderr natstest.LogBuffer
	env := map[string]string{"AGENTBUS_URL": srv.URL, "AGENTBUS_KEY": "abk_secret"}
	err := run(context.Background(), []string{"converse", "--workflow", "Echo", "--text", "hello", "--stream"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &stdout, &stderr)
	require.NoError(t, err, "stderr %q", stderr.String())
	assert.Equal(t, "You said: he\nYou said: hello\n", stdout.String())
	assert.Equal(t, "the handler runs again (attempt 2): its answer starts over\n", stderr.String())
}
