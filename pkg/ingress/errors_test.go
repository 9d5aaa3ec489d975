package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// problemOf checks that an answer is problem+json with the status and returns its body.
func problemOf(t *testing.T, status int, ct string, b []byte, want int) map[string]any {
	t.Helper()
	if status != want {
		t.Fatalf("status %d, want %d: %s", status, want, b)
	}
	if ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("problem body %q: %v", b, err)
	}
	if p["status"] != float64(want) || !strings.HasPrefix(p["type"].(string), "urn:agentbus:problem:") || p["title"] == "" {
		t.Fatalf("problem body %v", p)
	}
	return p
}

func TestWebhookRefusals(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	revoked, _, err := s.Keys.Create(context.Background(), keys.NewKey{Tenant: "default", Role: keys.RoleUser, Name: "to revoke"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Keys.Revoke(context.Background(), revoked); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Second); s.Ingress.KeyKnown(revoked); {
		if time.Now().After(deadline) {
			t.Fatal("revocation not seen within 1s")
		}
		time.Sleep(2 * time.Millisecond)
	}

	for _, tc := range []struct {
		name     string
		workflow string
		method   string
		query    url.Values
		want     int
		slug     string
	}{
		{"no key", "Echo", "echo", q(), 401, "unauthorized"},
		{"unknown key", "Echo", "echo", q("apikey", "abk_nope"), 401, "unauthorized"},
		{"revoked key", "Echo", "echo", q("apikey", revoked), 401, "unauthorized"},
		{"tenantId mismatch", "Echo", "echo", q("apikey", s.Key, "tenantId", "other"), 403, "forbidden"},
		{"empty tenantId", "Echo", "echo", q("apikey", s.Key, "tenantId", ""), 403, "forbidden"},
		{"other tenant's workflow id", "other:Echo:Supervisor Workflow:default", "echo", q("apikey", s.Key), 403, "forbidden"},
		{"unknown agent", "Nobody", "echo", q("apikey", s.Key), 404, "unknown-agent"},
		{"unknown workflow type", "Echo:Batch", "echo", q("apikey", s.Key), 404, "unknown-workflow-type"},
		{"unknown method", "Echo", "nope", q("apikey", s.Key), 404, "unknown-method"},
		{"method case differs", "Echo", "ECHO", q("apikey", s.Key), 404, "unknown-method"},
		{"three segments", "a:b:c", "echo", q("apikey", s.Key), 400, "invalid-workflow"},
		{"empty activation", "default:Echo:Conversational:", "echo", q("apikey", s.Key), 400, "invalid-workflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := call(t, s.URL, tc.workflow, tc.method, tc.query, []byte("{}"))
			p := problemOf(t, status, ct, b, tc.want)
			if p["type"] != "urn:agentbus:problem:"+tc.slug {
				t.Fatalf("type %v, want %s", p["type"], tc.slug)
			}
			if strings.Contains(string(b), "abk_") {
				t.Fatal("the answer shows key material")
			}
		})
	}

	// The same workflow id with the caller's own tenant works; a workflow id of tenant "other"
	// works with other's key.
	if status, _, b := call(t, s.URL, "other:Echo:Supervisor Workflow:default", "echo", q("apikey", s.OtherKey), nil); status != 200 {
		t.Fatalf("other tenant with own key: %d %s", status, b)
	}
}

func TestWebhookNoLiveHost(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	if err := s.StopHost(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	status, ct, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), nil)
	problemOf(t, status, ct, b, 503)
	if time.Since(start) > time.Second {
		t.Fatalf("503 took %v; it must come at once", time.Since(start))
	}
}

func TestWebhookTimeoutStillProcessed(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{WebhookTimeout: 200 * time.Millisecond})
	wf := "Echo:Conversational"
	status, ct, b := call(t, s.URL, wf, "sleep", q("apikey", s.Key, "ms", "600"), nil, "Idempotency-Key", "sleep-1")
	p := problemOf(t, status, ct, b, 504)
	if p["requestId"] != "sleep-1" {
		t.Fatalf("504 names request %v, want sleep-1", p["requestId"])
	}
	// The request was accepted: it still runs, and its state change shows once it has.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, b = call(t, s.URL, wf, "state", q("apikey", s.Key), nil)
		var st struct{ State struct{ Sleeps int } }
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("state: %s", b)
		}
		if st.State.Sleeps == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep never completed: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A retry with the same Idempotency-Key gets the first result and does not sleep again.
	status, _, b = call(t, s.URL, wf, "sleep", q("apikey", s.Key, "ms", "600"), nil, "Idempotency-Key", "sleep-1")
	if status != 200 || !strings.Contains(string(b), `"slept":600`) {
		t.Fatalf("retry: %d %s", status, b)
	}
	_, _, b = call(t, s.URL, wf, "state", q("apikey", s.Key), nil)
	if !strings.Contains(string(b), `"sleeps":1`) {
		t.Fatalf("the retry ran the handler again: %s", b)
	}
}

func TestWebhookIdempotencyKey(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	wf := "default:Echo:Supervisor Workflow:idem"
	_, _, first := call(t, s.URL, wf, "count", q("apikey", s.Key), nil, "Idempotency-Key", "k1")
	_, _, again := call(t, s.URL, wf, "count", q("apikey", s.Key), nil, "Idempotency-Key", "k1")
	if string(first) != string(again) {
		t.Fatalf("retry answered %s, first %s", again, first)
	}
	_, _, next := call(t, s.URL, wf, "count", q("apikey", s.Key), nil, "Idempotency-Key", "k2")
	if decode(t, next)["count"] != 2.0 {
		t.Fatalf("count after a retried request = %s, want 2", next)
	}
	// The same key for a different request is refused, not answered with the first result.
	status, ct, b := call(t, s.URL, wf, "echo", q("apikey", s.Key), nil, "Idempotency-Key", "k1")
	problemOf(t, status, ct, b, 422)
	// Keys are per tenant: the same key in another tenant is a different request.
	_, _, b = call(t, s.URL, "other:Echo:Supervisor Workflow:idem", "count", q("apikey", s.OtherKey), nil, "Idempotency-Key", "k1")
	if decode(t, b)["count"] != 1.0 {
		t.Fatalf("other tenant's first count = %s", b)
	}
}

func TestRoutingEdges(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	// An activation name with a slash and a space, URL-encoded, is one path segment.
	status, _, b := call(t, s.URL, "default:Echo:Supervisor Workflow:a/b c", "count", q("apikey", s.Key), nil)
	if status != 200 || decode(t, b)["count"] != 1.0 {
		t.Fatalf("encoded activation: %d %s", status, b)
	}
	for _, tc := range []struct {
		name, method, path string
		want               int
	}{
		{"unknown path", http.MethodGet, "/nope", 404},
		{"webhook with GET", http.MethodGet, "/api/user/webhooks/Echo/echo", 405},
		{"missing method segment", http.MethodPost, "/api/user/webhooks/Echo", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			problemOf(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.want)
		})
	}
}
