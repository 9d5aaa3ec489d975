package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/problem"
)

// writeCase is a problem Write is given, and what its answer must carry.
type writeCase struct {
	name           string
	p              problem.Problem
	wantType       string
	wantTitle      string
	wantRetryAfter string
	wantAuth       bool
}

// writeCases are the problems TestWrite writes.
var writeCases = []writeCase{
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

func TestWrite(t *testing.T) {
	for _, tt := range writeCases {
		t.Run(tt.name, func(t *testing.T) { checkWrite(t, tt) })
	}
}

// checkWrite writes tt's problem and checks the status, the headers and that the body holds
// exactly the members expected.
func checkWrite(t *testing.T, tt writeCase) {
	rec := httptest.NewRecorder()
	problem.Write(rec, tt.p)
	res := rec.Result()
	assert.Equal(t, tt.p.Status, res.StatusCode, "status")
	assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), "Content-Type")
	assert.Equal(t, tt.wantRetryAfter, res.Header.Get("Retry-After"), "Retry-After")
	auth := res.Header.Get("WWW-Authenticate")
	if tt.wantAuth {
		assert.True(t, strings.HasPrefix(auth, "Bearer"), "WWW-Authenticate = %q, want a Bearer challenge", auth)
	} else {
		assert.Empty(t, auth, "WWW-Authenticate on status %d, want none", tt.p.Status)
	}

	var body map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body), "body is not JSON")
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
	// Exactly these members, with these values.
	assert.Equal(t, want, body, "body")
	typ, _ := body["type"].(string)
	assert.True(t, strings.HasPrefix(typ, problem.TypePrefix), "type %q lacks prefix %q", body["type"], problem.TypePrefix)
}

func TestWriteConstants(t *testing.T) {
	assert.Equal(t, "application/problem+json", problem.ContentType, "ContentType")
	assert.Equal(t, "urn:agentbus:problem:", problem.TypePrefix, "TypePrefix")
}

func TestWriteThroughServer(t *testing.T) {
	// Through a real HTTP round trip, headers set before WriteHeader must arrive.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.Problem{Status: http.StatusUnauthorized, Slug: "unauthorized", RetryAfter: 2})
	}))
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode, "status")
	for k, want := range map[string]string{"Content-Type": problem.ContentType, "Retry-After": "2", "X-Content-Type-Options": "nosniff"} {
		assert.Equal(t, want, res.Header.Get(k), "%s", k)
	}
	got := res.Header.Get("WWW-Authenticate")
	assert.True(t, strings.HasPrefix(got, "Bearer"), "WWW-Authenticate = %q", got)
}

// TestTypes: every type has its own slug, in the form of a type URI's last part, and a status
// of a problem.
func TestTypes(t *testing.T) {
	seen := map[string]bool{}
	for _, pt := range problem.Types() {
		assert.False(t, seen[pt.Slug], "slug %q is defined twice", pt.Slug)
		seen[pt.Slug] = true
		assert.Regexp(t, `^[a-z]+(-[a-z]+)*$`, pt.Slug)
		assert.GreaterOrEqual(t, pt.Status, 400, pt.Slug)
		assert.LessOrEqual(t, pt.Status, 599, pt.Slug)
		assert.NotEmpty(t, pt.Title(), pt.Slug)
		got, ok := problem.Lookup(pt.Slug)
		assert.True(t, ok, pt.Slug)
		assert.Equal(t, pt, got)
	}
	_, ok := problem.Lookup("no-such-problem")
	assert.False(t, ok)
}

// TestTypeNew: a problem of a type carries the type's slug, status and Retry-After.
func TestTypeNew(t *testing.T) {
	p := problem.BusUnavailable.New("try again")
	assert.Equal(t, problem.Problem{Status: 503, Slug: "bus-unavailable", Detail: "try again", RetryAfter: 1}, *p)
	rec := httptest.NewRecorder()
	problem.Forbidden.Write(rec, "not yours")
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.JSONEq(t, `{"type":"urn:agentbus:problem:forbidden","title":"Forbidden","status":403,"detail":"not yours"}`, rec.Body.String())
}
