package subject_test

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/subject"
)

// FuzzTokenRoundTrip checks that any id survives Token/ParseToken, that a token is one safe NATS
// subject token, and that thread ids and stored inbox subjects round trip.
func FuzzTokenRoundTrip(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""},
		{"acme:support:Supervisor Workflow:default", "user"},
		{"a.b.c", "*"},
		{">", " "},
		{"_", "__"},
		{"\x00\xff", "ünïcödé"},
		{"wf", "alice@example.com"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, s := range []string{a, b} {
			tok := subject.Token(s)
			if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n\x00") {
				t.Fatalf("Token(%q) = %q is not a safe subject token", s, tok)
			}
			back, err := subject.ParseToken(tok)
			if err != nil || back != s {
				t.Fatalf("ParseToken(Token(%q)) = %q, %v", s, back, err)
			}
			// ParseToken of arbitrary input must not panic, and what it accepts must re-encode
			// to a token that decodes to the same id.
			if v, err := subject.ParseToken(s); err == nil {
				if again, err := subject.ParseToken(subject.Token(v)); err != nil || again != v {
					t.Fatalf("ParseToken(%q) = %q does not round trip: %q, %v", s, v, again, err)
				}
			}
		}
		id := subject.ThreadID(a, b)
		if strings.Count(id, ".") != 1 {
			t.Fatalf("ThreadID(%q, %q) = %q: want exactly one '.'", a, b, id)
		}
		wf, p, err := subject.ParseThreadID(id)
		if err != nil || wf != a || p != b {
			t.Fatalf("ParseThreadID(ThreadID(%q, %q)) = %q, %q, %v", a, b, wf, p, err)
		}
		_, _, _ = subject.ParseThreadID(a) // arbitrary input: no panic

		// A stored inbox subject (after the partition transform) reads back into its parts.
		in := subject.Inbox(a, "acme", b, a+b)
		rest := strings.TrimPrefix(in, "agentbus.in.")
		agent, after, _ := strings.Cut(rest, ".")
		stored := "agentbus.in." + agent + ".3." + after
		got, err := subject.ParseStoredInbox(stored)
		if err != nil {
			t.Fatalf("ParseStoredInbox(%q): %v", stored, err)
		}
		want := subject.StoredInbox{Agent: a, Partition: "3", Tenant: "acme", WorkflowID: b, Participant: a + b}
		if got != want {
			t.Fatalf("ParseStoredInbox(%q) = %+v, want %+v", stored, got, want)
		}
		_, _ = subject.ParseStoredInbox(a) // arbitrary input: no panic
	})
}

// The subjects and keys built on every call are the dot-joined tokens of their ids.
func FuzzSubjectsJoinTokens(f *testing.F) {
	f.Add("Echo", "acme", "acme:Echo:Supervisor Workflow:a.b", "webhook")
	f.Add("", "t", "", "")
	f.Fuzz(func(t *testing.T, agent, tenant, wf, p string) {
		tok := subject.Token
		checks := [][2]string{
			{subject.Inbox(agent, tenant, wf, p), "agentbus.in." + tok(agent) + "." + tenant + "." + tok(wf) + "." + tok(p)},
			{subject.Thread(tenant, wf, p), "agentbus.msg." + tenant + "." + tok(wf) + "." + tok(p)},
			{subject.TopicsKey(tenant, wf, p), tenant + "." + tok(wf) + "." + tok(p)},
			{subject.InstanceKey(tenant, wf), tenant + "." + tok(wf)},
		}
		for _, c := range checks {
			if c[0] != c[1] {
				t.Fatalf("got %q, want %q", c[0], c[1])
			}
		}
	})
}
