package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/problem"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name           string
		p              problem.Problem
		wantType       string
		wantTitle      string
		wantRetryAfter string
		wantAuth       bool
	}{
		{
			name:      "unauthorized",
			p:         problem.Problem{Status: http.StatusUnauthorized, Slug: "unauthorized", Detail: "missing API key", RequestID: "req-1"},
			wantType:  "urn:agentbus:problem:unauthorized",
			wantTitle: "Unauthorized",
			wantAuth:  true,
		},
		{
			name:      "forbidden has no challenge",
			p:         problem.Problem{Status: http.StatusForbidden, Slug: "forbidden", Title: "Other tenant", Detail: "key belongs to another tenant"},
			wantType:  "urn:agentbus:problem:forbidden",
			wantTitle: "Other tenant",
		},
		{
			name:           "unavailable with retry-after",
			p:              problem.Problem{Status: http.StatusServiceUnavailable, Slug: "no-live-host", RetryAfter: 5},
			wantType:       "urn:agentbus:problem:no-live-host",
			wantTitle:      "Service Unavailable",
			wantRetryAfter: "5",
		},
		{
			name:           "rate limited",
			p:              problem.Problem{Status: http.StatusTooManyRequests, Slug: "rate-limited", RetryAfter: 1, RequestID: "r"},
			wantType:       "urn:agentbus:problem:rate-limited",
			wantTitle:      "Too Many Requests",
			wantRetryAfter: "1",
		},
		{
			name:      "zero retry-after is not sent",
			p:         problem.Problem{Status: http.StatusGatewayTimeout, Slug: "timeout", RetryAfter: 0},
			wantType:  "urn:agentbus:problem:timeout",
			wantTitle: "Gateway Timeout",
		},
		{
			name:      "negative retry-after is not sent",
			p:         problem.Problem{Status: http.StatusServiceUnavailable, Slug: "x", RetryAfter: -3},
			wantType:  "urn:agentbus:problem:x",
			wantTitle: "Service Unavailable",
		},
		{
			name:      "bad request with quotes and html in detail",
			p:         problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-tenant", Detail: `tenant "<a&b>" is invalid`},
			wantType:  "urn:agentbus:problem:invalid-tenant",
			wantTitle: "Bad Request",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			problem.Write(rec, tt.p)
			res := rec.Result()
			if res.StatusCode != tt.p.Status {
				t.Errorf("status = %d, want %d", res.StatusCode, tt.p.Status)
			}
			if got := res.Header.Get("Content-Type"); got != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", got)
			}
			if got := res.Header.Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
			auth := res.Header.Get("WWW-Authenticate")
			if tt.wantAuth && !strings.HasPrefix(auth, "Bearer") {
				t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", auth)
			}
			if !tt.wantAuth && auth != "" {
				t.Errorf("WWW-Authenticate = %q on status %d, want none", auth, tt.p.Status)
			}

			var body map[string]any
			if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			want := map[string]any{
				"type":   tt.wantType,
				"title":  tt.wantTitle,
				"status": float64(tt.p.Status),
			}
			if tt.p.Detail != "" {
				want["detail"] = tt.p.Detail
			}
			if tt.p.RequestID != "" {
				want["requestId"] = tt.p.RequestID
			}
			if len(body) != len(want) {
				t.Errorf("body = %v, want exactly %v", body, want)
			}
			for k, v := range want {
				if body[k] != v {
					t.Errorf("body[%q] = %#v, want %#v", k, body[k], v)
				}
			}
			if !strings.HasPrefix(body["type"].(string), problem.TypePrefix) {
				t.Errorf("type %q lacks prefix %q", body["type"], problem.TypePrefix)
			}
		})
	}
}

func TestWriteConstants(t *testing.T) {
	if problem.ContentType != "application/problem+json" {
		t.Errorf("ContentType = %q", problem.ContentType)
	}
	if problem.TypePrefix != "urn:agentbus:problem:" {
		t.Errorf("TypePrefix = %q", problem.TypePrefix)
	}
}

func TestWriteThroughServer(t *testing.T) {
	// Through a real HTTP round trip, headers set before WriteHeader must arrive.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.Problem{Status: http.StatusUnauthorized, Slug: "unauthorized", RetryAfter: 2})
	}))
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("status = %d", res.StatusCode)
	}
	for k, want := range map[string]string{"Content-Type": problem.ContentType, "Retry-After": "2", "X-Content-Type-Options": "nosniff"} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := res.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Errorf("WWW-Authenticate = %q", got)
	}
}
