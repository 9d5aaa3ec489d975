package subject_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
			require.NotEmpty(t, tok, "Token(%q) is not a safe subject token", s)
			require.False(t, strings.ContainsAny(tok, ".*> \t\r\n\x00"), "Token(%q) = %q is not a safe subject token", s, tok)
			back, err := subject.ParseToken(tok)
			require.NoError(t, err, "ParseToken(Token(%q))", s)
			require.Equal(t, s, back, "ParseToken(Token(%q))", s)
			// ParseToken of arbitrary input must not panic, and what it accepts must re-encode
			// to a token that decodes to the same id.
			if v, err := subject.ParseToken(s); err == nil {
				again, err := subject.ParseToken(subject.Token(v))
				require.NoError(t, err, "ParseToken(%q) = %q does not round trip", s, v)
				require.Equal(t, v, again, "ParseToken(%q) = %q does not round trip", s, v)
			}
		}
		id := subject.ThreadID(a, b)
		require.Equal(t, 1, strings.Count(id, "."), "ThreadID(%q, %q) = %q: want exactly one '.'", a, b, id)
		wf, p, err := subject.ParseThreadID(id)
		require.NoError(t, err, "ParseThreadID(ThreadID(%q, %q))", a, b)
		require.Equal(t, a, wf, "ParseThreadID(ThreadID(%q, %q)) workflow", a, b)
		require.Equal(t, b, p, "ParseThreadID(ThreadID(%q, %q)) participant", a, b)
		_, _, _ = subject.ParseThreadID(a) // arbitrary input: no panic

		// A stored inbox subject (after the partition transform) reads back into its parts.
		in := subject.Inbox(a, "acme", b, a+b)
		rest := strings.TrimPrefix(in, "agentbus.in.")
		agent, after, _ := strings.Cut(rest, ".")
		stored := "agentbus.in." + agent + ".3." + after
		got, err := subject.ParseStoredInbox(stored)
		require.NoError(t, err, "ParseStoredInbox(%q)", stored)
		want := subject.StoredInbox{Agent: a, Partition: "3", Tenant: "acme", WorkflowID: b, Participant: a + b}
		require.Equal(t, want, got, "ParseStoredInbox(%q)", stored)
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
			require.Equal(t, c[1], c[0])
		}
	})
}
