package main

import (
	"bytes"
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

	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// Every test stops what it starts: the stack, the tail, the HTTP connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const adminKey = "sys_admin_key_0123456789abcdef"

// syncBuffer is a bytes.Buffer that a running command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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
	if err := st.WaitLive(ctx, "Echo"); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, st: st, secrets: []string{adminKey, st.Key, st.OtherKey}}
}

// result is what one run printed and returned.
type result struct {
	stdout, stderr string
	err            error
}

// runWith runs the CLI with key in AGENTBUS_KEY and the stack's URL in AGENTBUS_URL.
func (h *harness) runWith(ctx context.Context, key string, stdout, stderr *syncBuffer, args ...string) error {
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
	var stdout, stderr syncBuffer
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
	if err := h.st.WaitKnown(context.Background(), secret); err != nil {
		h.t.Fatal(err)
	}
}

// ok runs the CLI and fails the test when it fails.
func (h *harness) ok(key string, args ...string) result {
	h.t.Helper()
	r := h.cmd(key, false, args...)
	if r.err != nil {
		h.t.Fatalf("agentbus %s: %v\nstderr: %s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r
}

// fails runs the CLI, expects an API error of this status, and checks how it is printed.
func (h *harness) fails(status int, key string, args ...string) result {
	h.t.Helper()
	r := h.cmd(key, false, args...)
	var ae *apiError
	if !errors.As(r.err, &ae) || ae.Status != status {
		h.t.Fatalf("agentbus %s: err %v, want an API error %d\nstderr: %s", strings.Join(args, " "), r.err, status, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "error: ") || !strings.Contains(r.stderr, ae.Error()) || r.stdout != "" {
		h.t.Fatalf("agentbus %s: stdout %q stderr %q, want only %q on stderr", strings.Join(args, " "), r.stdout, r.stderr, "error: "+ae.Error())
	}
	return r
}

// newKey creates a key in the "default" tenant and returns its secret and id.
func (h *harness) newKey(name, role string) (secret, id string) {
	h.t.Helper()
	r := h.cmd(h.st.Key, true, "key", "create", "--name", name, "--role", role)
	if r.err != nil {
		h.t.Fatalf("key create: %v\n%s", r.err, r.stderr)
	}
	secret = strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(secret, "abk_") || strings.Contains(secret, "\n") {
		h.t.Fatalf("key create printed %q, want the secret alone", r.stdout)
	}
	if !strings.Contains(r.stderr, "shown only this once") || strings.Contains(r.stderr, secret) {
		h.t.Fatalf("key create stderr %q: want the once-only warning and not the secret", r.stderr)
	}
	h.addSecret(secret)
	h.waitKnown(secret)
	fields := strings.Fields(r.stderr)
	if len(fields) < 2 || fields[0] != "key" {
		h.t.Fatalf("key create stderr %q does not name the key", r.stderr)
	}
	return secret, fields[1]
}

func TestCLI(t *testing.T) {
	h := newHarness(t)

	t.Run("tenants", func(t *testing.T) {
		h.t = t
		r := h.ok(adminKey, "tenant", "create", "acme")
		if r.stdout != "tenant acme created\n" {
			t.Errorf("tenant create printed %q", r.stdout)
		}
		r = h.ok(adminKey, "tenant", "list")
		for _, want := range []string{"ID", "acme", "default", "other"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("tenant list lacks %q:\n%s", want, r.stdout)
			}
		}
		r = h.ok(adminKey, "-json", "tenant", "list")
		var ans struct {
			Tenants []struct{ ID string } `json:"tenants"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &ans); err != nil || len(ans.Tenants) < 3 {
			t.Errorf("tenant list -json printed %q (%v)", r.stdout, err)
		}
		r = h.fails(409, adminKey, "tenant", "create", "acme")
		if !strings.Contains(r.stderr, "error: Conflict (409): a tenant with this id exists") {
			t.Errorf("stderr %q", r.stderr)
		}
		h.fails(403, h.st.Key, "tenant", "list")
		h.ok(adminKey, "tenant", "delete", "acme")
		h.fails(404, adminKey, "tenant", "delete", "acme")
	})

	t.Run("keys", func(t *testing.T) {
		h.t = t
		secret, id := h.newKey("ci", "user")
		r := h.ok(h.st.Key, "key", "list")
		if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "ci") || !strings.Contains(r.stdout, "user") {
			t.Errorf("key list lacks the new key:\n%s", r.stdout)
		}
		// The new user key works; a user key may not manage keys.
		h.ok(secret, "converse", "--workflow", "Echo", "--text", "hello")
		h.fails(403, secret, "key", "list")

		r = h.ok(h.st.Key, "key", "revoke", id)
		if r.stdout != "key "+id+" revoked\n" {
			t.Errorf("key revoke printed %q", r.stdout)
		}
		// Revocation reaches the ingress through a watch, within a second.
		deadline := time.Now().Add(5 * time.Second)
		for {
			rr := h.cmd(secret, false, "converse", "--workflow", "Echo", "--text", "hello")
			var ae *apiError
			if errors.As(rr.err, &ae) && ae.Status == 401 {
				if !strings.HasPrefix(rr.stderr, "error: Unauthorized (401): ") {
					t.Errorf("revoked key: stderr %q", rr.stderr)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the revoked key still works: %v %q", rr.err, rr.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
		r = h.ok(h.st.Key, "-json", "key", "list")
		var list struct {
			Keys []struct {
				ID        string  `json:"id"`
				RevokedAt *string `json:"revokedAt"`
			} `json:"keys"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatal(err)
		}
		revoked := false
		for _, k := range list.Keys {
			revoked = revoked || (k.ID == id && k.RevokedAt != nil)
		}
		if !revoked {
			t.Errorf("key list -json does not show %s revoked: %s", id, r.stdout)
		}

		// Rotation prints the new secret once, like create.
		_, id2 := h.newKey("rotating", "tenant-admin")
		rr := h.cmd(h.st.Key, true, "key", "rotate", id2)
		if rr.err != nil {
			t.Fatalf("key rotate: %v\n%s", rr.err, rr.stderr)
		}
		rotated := strings.TrimSpace(rr.stdout)
		h.addSecret(rotated)
		h.waitKnown(rotated)
		if !strings.HasPrefix(rotated, "abk_") || !strings.Contains(rr.stderr, id2+" is revoked") || !strings.Contains(rr.stderr, "shown only this once") {
			t.Errorf("key rotate: stdout %q stderr %q", rr.stdout, rr.stderr)
		}
		h.ok(rotated, "key", "list")
		h.fails(404, h.st.Key, "key", "revoke", "no-such-key")
	})

	t.Run("send", func(t *testing.T) {
		h.t = t
		r := h.ok(h.st.Key, "send", "--agent", "Echo", "--activation", "default", "--participant", "me", "--type", "Chat", "--text", "hi", "--wait")
		if r.stdout != "You said: hi\n" {
			t.Errorf("send --wait printed %q", r.stdout)
		}
		r = h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--text", "later", "--topic", "t1")
		if !strings.HasPrefix(r.stdout, "accepted: message ") {
			t.Errorf("send printed %q", r.stdout)
		}
		r = h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--type", "Data", "--text", "sum", "--data", `{"values":[2,5]}`, "--wait")
		if !strings.Contains(r.stdout, `"sum":7`) {
			t.Errorf("send Data printed %q", r.stdout)
		}
		path := filepath.Join(t.TempDir(), "notes.txt")
		if err := os.WriteFile(path, []byte("hello file"), 0o600); err != nil {
			t.Fatal(err)
		}
		r = h.ok(h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--file", path, "--wait")
		if !strings.Contains(r.stdout, "Received notes.txt (10 bytes)") {
			t.Errorf("send --file printed %q", r.stdout)
		}
		h.fails(404, h.st.Key, "send", "--agent", "Nobody", "--participant", "me", "--text", "hi")
		// The key may also be given as a flag; it is still not printed.
		h.ok("", "-key", h.st.Key, "send", "--agent", "Echo", "--participant", "me", "--text", "flag")
	})

	t.Run("converse", func(t *testing.T) {
		h.t = t
		r := h.ok(h.st.Key, "converse", "--workflow", "Echo", "--type", "Data", "--text", "sum", "--data", `{"values":[1,2]}`)
		if !strings.Contains(r.stdout, `{"sum":3}`) {
			t.Errorf("converse Data printed %q", r.stdout)
		}
		r = h.ok(h.st.Key, "-json", "converse", "--workflow", "Echo", "--text", "hi", "--participant", "ada")
		var ans syncAnswer
		if err := json.Unmarshal([]byte(r.stdout), &ans); err != nil || ans.Response == nil || *ans.Response.Text != "You said: hi" {
			t.Errorf("converse -json printed %q (%v)", r.stdout, err)
		}
		r = h.ok(h.st.Key, "converse", "--workflow", "Echo", "--text", "hello there", "--stream")
		if r.stdout != "You said: hello there\n" {
			t.Errorf("converse --stream printed %q", r.stdout)
		}
		h.fails(400, h.st.Key, "converse", "--workflow", "Echo", "--type", "Data", "--text", "sum", "--data", `[1]`)
		h.fails(404, h.st.Key, "converse", "--workflow", "Echo", "--type", "Data", "--text", "nosuchmethod", "--stream")
	})

	t.Run("tail", func(t *testing.T) {
		h.t = t
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stdout, stderr syncBuffer
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
			if err != nil {
				t.Errorf("tail: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("tail did not stop when its context ended")
		}
		h.record(stdout.String())
		h.record(stderr.String())
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], " → Chat ") || !strings.HasSuffix(lines[0], "hi tail") ||
			!strings.Contains(lines[1], " ← Chat ") || !strings.HasSuffix(lines[1], "You said: hi tail") {
			t.Errorf("tail printed %q", stdout.String())
		}
		// A key of another tenant is refused at once, not retried.
		h.fails(403, h.st.OtherKey, "tail", "--workflow", "Echo", "--participant", "watcher")
	})

	t.Run("usage", func(t *testing.T) {
		h.t = t
		for _, args := range [][]string{{}, {"frobnicate"}, {"key"}, {"tenant", "create"}, {"send", "--text", "x"}} {
			r := h.cmd(h.st.Key, false, args...)
			if !errors.As(r.err, new(usageError)) || !strings.Contains(r.stderr, "usage: agentbus") {
				t.Errorf("agentbus %q: err %v stderr %q", args, r.err, r.stderr)
			}
		}
		r := h.cmd("", false, "key", "list")
		if r.err == nil || !strings.Contains(r.stderr, "no API key") {
			t.Errorf("without a key: err %v stderr %q", r.err, r.stderr)
		}
	})

	t.Run("no key printed", func(t *testing.T) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.printed) < 20 {
			t.Fatalf("only %d outputs recorded", len(h.printed))
		}
		for _, out := range h.printed {
			for _, s := range h.secrets {
				if strings.Contains(out, s) {
					t.Errorf("a key was printed: %q", out)
				}
			}
		}
	})
}

// waitFor waits until b holds want.
func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %q; have %q", want, b.String())
		}
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
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	env := map[string]string{"AGENTBUS_URL": srv.URL, "AGENTBUS_KEY": "abk_secret", "AGENTBUS_TENANT": "acme"}
	go func() {
		done <- run(ctx, []string{"tail", "--workflow", "acme:Echo:Supervisor Workflow:x", "--participant", "p"},
			func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &stdout, &stderr)
	}()
	waitFor(t, &stdout, `{"sum":3}`)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " → Data    sum {\"values\":[1,2]}") || !strings.Contains(lines[1], " ← Data    [math] {\"sum\":3}") {
		t.Errorf("tail printed %q", stdout.String())
	}
	if !strings.Contains(stderr.String(), "reconnecting in 1s") || !strings.Contains(stderr.String(), "tail: reconnected") {
		t.Errorf("tail stderr %q", stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(requests) != 2 {
		t.Fatalf("%d requests, want 2", len(requests))
	}
	for i, r := range requests {
		if r.URL.Path != "/api/v1/admin/tenants/acme/messaging/listen" || r.URL.Query().Get("workflowId") != "acme:Echo:Supervisor Workflow:x" ||
			r.Header.Get("Authorization") != "Bearer abk_secret" || strings.Contains(r.URL.String(), "abk_secret") {
			t.Errorf("request %d: %s %v", i, r.URL, r.Header)
		}
	}
	if got := requests[0].Header.Get("Last-Event-ID"); got != "" {
		t.Errorf("first request has Last-Event-ID %q", got)
	}
	if got := requests[1].Header.Get("Last-Event-ID"); got != "m1" {
		t.Errorf("reconnection has Last-Event-ID %q, want m1", got)
	}
	if strings.Contains(stdout.String()+stderr.String(), "abk_secret") {
		t.Error("the key was printed")
	}
}
