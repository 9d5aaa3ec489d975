package ident_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

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
			if w != (ident.Workflow{}) {
				t.Fatalf("Resolve(%q, %q) failed (%v) but returned %+v", ref, tenant, err, w)
			}
			return
		}
		for _, seg := range []string{w.Agent, w.WorkflowType, w.Activation} {
			checkSegment(t, ref, seg)
		}
		if strings.Count(ref, ":") == 3 {
			// A full workflow id: the tenant segment is the id's, and must be valid.
			if !ident.ValidTenant(w.Tenant) {
				t.Fatalf("Resolve(%q) accepted invalid tenant %q", ref, w.Tenant)
			}
			if w.ID() != ref {
				t.Fatalf("Resolve(%q).ID() = %q, want the id itself", ref, w.ID())
			}
		} else if w.Tenant != tenant {
			t.Fatalf("Resolve(%q, %q) gave tenant %q", ref, tenant, w.Tenant)
		}
		if !ident.ValidTenant(w.Tenant) {
			// Short references take the caller's tenant as is; the caller validated it. The
			// ID then does not parse, which is all that can be said.
			if _, err := ident.ParseWorkflowID(w.ID()); err == nil {
				t.Fatalf("ParseWorkflowID(%q) accepted invalid tenant %q", w.ID(), w.Tenant)
			}
			return
		}
		back, err := ident.ParseWorkflowID(w.ID())
		if err != nil {
			t.Fatalf("ParseWorkflowID(%q) of Resolve(%q, %q): %v", w.ID(), ref, tenant, err)
		}
		if back != w {
			t.Fatalf("ParseWorkflowID(%q) = %+v, want %+v", w.ID(), back, w)
		}
		if back.TypeName() != w.Agent+":"+w.WorkflowType {
			t.Fatalf("TypeName() = %q", back.TypeName())
		}
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
		if len(p) > 256 {
			t.Fatalf("Participant(%q) = %q: longer than 256 bytes", id, p)
		}
		if !utf8.ValidString(p) {
			t.Fatalf("Participant(%q) = %q: invalid UTF-8", id, p)
		}
		for _, r := range p {
			if unicode.IsControl(r) {
				t.Fatalf("Participant(%q) = %q: control character", id, p)
			}
		}
		if p != strings.TrimSpace(p) {
			t.Fatalf("Participant(%q) = %q: not trimmed", id, p)
		}
	})
}

// checkSegment fails when an accepted workflow id segment is unsafe.
func checkSegment(t *testing.T, ref, seg string) {
	t.Helper()
	if seg == "" || len(seg) > 256 {
		t.Fatalf("Resolve(%q) accepted segment of length %d", ref, len(seg))
	}
	if !utf8.ValidString(seg) {
		t.Fatalf("Resolve(%q) accepted invalid UTF-8 segment %q", ref, seg)
	}
	for _, r := range seg {
		if r == ':' || unicode.IsControl(r) {
			t.Fatalf("Resolve(%q) accepted segment %q with %q", ref, seg, r)
		}
	}
}
