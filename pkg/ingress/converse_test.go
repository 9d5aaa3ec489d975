package ingress_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

func TestConverse(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	status, _, b := converse(t, s, q("workflow", "Echo", "type", "Chat", "participantId", "Bob", "text", "hi there"), "", "Authorization", "Bearer "+s.Key)
	a := answerOf(t, status, b)
	var shape map[string]any
	_ = json.Unmarshal(b, &shape)
	resp := shape["response"].(map[string]any)
	if resp["text"] != "You said: hi there" || resp["data"] != nil || resp["messageType"] != 0.0 || a.RequestID == "" || a.ThreadID == "" {
		t.Fatalf("chat answer %s", b)
	}
	if _, present := resp["data"]; !present {
		t.Fatalf("chat answer has no data field (must be null): %s", b)
	}

	status, _, b = converse(t, s, q("workflow", "Echo:Conversational", "type", "Data", "text", "sum", "apikey", s.Key), `{"values":[1,2,3.5]}`)
	_ = json.Unmarshal(b, &shape)
	resp = shape["response"].(map[string]any)
	if status != 200 || resp["text"] != nil || resp["messageType"] != 1.0 || resp["data"].(map[string]any)["sum"] != 6.5 {
		t.Fatalf("data answer %d %s", status, b)
	}

	for _, tc := range []struct {
		name  string
		query url.Values
		body  string
		want  int
	}{
		{"no key", q("workflow", "Echo", "type", "Chat", "text", "x"), "", 401},
		{"missing workflow", q("type", "Chat", "text", "x", "apikey", s.Key), "", 400},
		{"missing text", q("workflow", "Echo", "type", "Chat", "apikey", s.Key), "", 400},
		{"bad type", q("workflow", "Echo", "type", "File", "text", "x", "apikey", s.Key), "", 400},
		{"unknown method", q("workflow", "Echo", "type", "Data", "text", "nope", "apikey", s.Key), "{}", 404},
		{"bad params", q("workflow", "Echo", "type", "Data", "text", "sum", "apikey", s.Key), `{"values":"x"}`, 400},
		{"body not an object", q("workflow", "Echo", "type", "Data", "text", "sum", "apikey", s.Key), `[1]`, 400},
		{"fail", q("workflow", "Echo", "type", "Data", "text", "fail", "apikey", s.Key), `{"status":409,"message":"busy"}`, 409},
		{"other tenant's workflow", q("workflow", "other:Echo:Supervisor Workflow:default", "type", "Chat", "text", "x", "apikey", s.Key), "", 403},
		{"timeout out of range", q("workflow", "Echo", "type", "Chat", "text", "x", "apikey", s.Key, "timeoutSeconds", "301"), "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ct, b := converse(t, s, tc.query, tc.body)
			problemOf(t, status, ct, b, tc.want)
		})
	}
}

// Data methods keep the instance's state across calls and across a restart of the host.
func TestConverseCountSurvivesHostRestart(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	count := func() float64 {
		t.Helper()
		status, _, b := converse(t, s, q("workflow", "Echo", "type", "Data", "text", "COUNT", "apikey", s.Key), "")
		a := answerOf(t, status, b)
		var c struct{ Count float64 }
		if err := json.Unmarshal(a.Response.Data, &c); err != nil {
			t.Fatal(err)
		}
		return c.Count
	}
	if count() != 1 || count() != 2 {
		t.Fatal("count does not persist across calls")
	}
	if err := s.StopHost(); err != nil {
		t.Fatal(err)
	}
	stop, err := s.AddHost(context.Background(), "second")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	if err := s.WaitLive(context.Background(), "Echo"); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != 3 {
		t.Fatalf("count after the host restarted = %v, want 3", got)
	}
}

// A method's own error is answered as a problem and kept in the thread's history too.
func TestConverseErrorStoredInHistory(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	status, ct, b := converse(t, s, q("workflow", "Echo", "type", "Data", "text", "fail", "participantId", "erin", "apikey", s.Key), `{"status":422,"message":"cannot do that"}`)
	problemOf(t, status, ct, b, 422)
	status, _, b = converse(t, s, q("workflow", "Echo", "type", "Data", "text", "history", "participantId", "erin", "apikey", s.Key), `{"size":5}`)
	a := answerOf(t, status, b)
	var got struct {
		Messages []struct {
			Direction int             `json:"direction"`
			Text      *string         `json:"text"`
			Data      json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(a.Response.Data, &got); err != nil || len(got.Messages) != 2 {
		t.Fatalf("history %s", a.Response.Data)
	}
	out := got.Messages[0]
	if out.Direction != 1 || out.Text == nil || *out.Text != "cannot do that" || !strings.Contains(string(out.Data), `"status":422`) {
		t.Fatalf("stored error %s", a.Response.Data)
	}
}
