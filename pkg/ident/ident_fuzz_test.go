package ident_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ident"
)

// FuzzResolveWorkflow checks that Resolve never panics and that whatever it accepts is a
// well-formed workflow: its four-segment ID parses back to the same Workflow, and no segment
// holds a separator, a control character or invalid UTF-8.
func FuzzResolveWorkflow(f *testing.F) {
	for _, s := range []struct{ ref, tenant string }{
		{"support", "acme"},
		{"support:Supervisor Workflow", "acme"},
		{"acme:support:Supervisor Workflow:default", "acme"},
		{"other:support:Chat:default", "acme"},
		{"a:b:c", "acme"},
		{"::", "acme"},
		{":::", "acme"},
		{"", "acme"},
		{"agent\x00", "acme"},
		{"agent\u0085name", "acme"},
		{"\xff\xfe", "acme"},
		{"ünïcödé:類型", "tenant_1-x"},
		{strings.Repeat("a", 257), "acme"},
		{"x", ""},
		{"x", "bad tenant"},
	} {
		f.Add(s.ref, s.tenant)
	}
	f.Fuzz(func(t *testing.T, ref, tenant string) {
		w, err := ident.Resolve(ref, tenant)
		if err != nil {
			require.Zero(t, w, "Resolve(%q, %q) failed (%v) but returned a Workflow", ref, tenant, err)
			return
		}
		for _, seg := range []string{w.Agent, w.WorkflowType, w.Activation} {
			checkSegment(t, ref, seg)
		}
		if strings.Count(ref, ":") == 3 {
			// A full workflow id: the tenant segment is the id's, and must be valid.
			require.True(t, ident.ValidTenant(w.Tenant), "Resolve(%q) accepted invalid tenant %q", ref, w.Tenant)
			require.Equal(t, ref, w.ID(), "Resolve(%q).ID(), want the id itself", ref)
		} else {
			require.Equal(t, tenant, w.Tenant, "Resolve(%q, %q) gave another tenant", ref, tenant)
		}
		if !ident.ValidTenant(w.Tenant) {
			// Short references take the caller's tenant as is; the caller validated it. The
			// ID then does not parse, which is all that can be said.
			_, err := ident.ParseWorkflowID(w.ID())
			require.Error(t, err, "ParseWorkflowID(%q) accepted invalid tenant %q", w.ID(), w.Tenant)
			return
		}
		back, err := ident.ParseWorkflowID(w.ID())
		require.NoError(t, err, "ParseWorkflowID(%q) of Resolve(%q, %q)", w.ID(), ref, tenant)
		require.Equal(t, w, back, "ParseWorkflowID(%q)", w.ID())
		require.Equal(t, w.Agent+":"+w.WorkflowType, back.TypeName(), "TypeName()")
	})
}

// FuzzParticipant checks that Participant never panics and returns trimmed, lowercased,
// printable ids that are a fixed point of itself.
func FuzzParticipant(f *testing.F) {
	for _, s := range []string{"", "User", "  Alice@Example.COM ", "a\x00b", "\xff", "İstanbul", "ǅ", strings.Repeat("x", 257)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		p, err := ident.Participant(id)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(p), 256, "Participant(%q) = %q: longer than 256 bytes", id, p)
		require.True(t, utf8.ValidString(p), "Participant(%q) = %q: invalid UTF-8", id, p)
		for _, r := range p {
			require.False(t, unicode.IsControl(r), "Participant(%q) = %q: control character %q", id, p, r)
		}
		require.Equal(t, strings.TrimSpace(p), p, "Participant(%q): not trimmed", id)
	})
}

// checkSegment fails when an accepted workflow id segment is unsafe.
func checkSegment(t *testing.T, ref, seg string) {
	t.Helper()
	require.NotEmpty(t, seg, "Resolve(%q) accepted an empty segment", ref)
	require.LessOrEqual(t, len(seg), 256, "Resolve(%q) accepted segment of length %d", ref, len(seg))
	require.True(t, utf8.ValidString(seg), "Resolve(%q) accepted invalid UTF-8 segment %q", ref, seg)
	for _, r := range seg {
		require.NotEqual(t, ':', r, "Resolve(%q) accepted segment %q with %q", ref, seg, r)
		require.False(t, unicode.IsControl(r), "Resolve(%q) accepted segment %q with %q", ref, seg, r)
	}
}
