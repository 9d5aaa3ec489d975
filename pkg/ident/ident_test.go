package ident_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ident"
)

func TestValidTenant(t *testing.T) {
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{name: "empty", id: "", want: false},
		{name: "one char", id: "a", want: true},
		{name: "all allowed classes", id: "Acme_corp-01", want: true},
		{name: "only underscore", id: "_", want: true},
		{name: "only dash", id: "-", want: true},
		{name: "64 chars", id: strings.Repeat("a", 64), want: true},
		{name: "65 chars", id: strings.Repeat("a", 65), want: false},
		{name: "space", id: "acme corp", want: false},
		{name: "dot (subject separator)", id: "acme.corp", want: false},
		{name: "colon (workflow id separator)", id: "acme:corp", want: false},
		{name: "star wildcard", id: "acme*", want: false},
		{name: "gt wildcard", id: "acme>", want: false},
		{name: "slash", id: "acme/corp", want: false},
		{name: "leading space", id: " acme", want: false},
		{name: "newline", id: "acme\n", want: false},
		{name: "nul", id: "acme\x00", want: false},
		{name: "unicode letter", id: "acmé", want: false},
		{name: "unicode digit", id: "acme٣", want: false},
		{name: "invalid utf-8", id: "acme\xff", want: false},
		// 32 two-byte runes are 64 bytes but not allowed characters anyway.
		{name: "unicode within 64 bytes", id: strings.Repeat("é", 32), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, ident.ValidTenant(tt.id), "ValidTenant(%q)", tt.id)
		})
	}
}

// A resolveCase is a reference Resolve reads for a tenant, and what it should return: want, or
// an error that is wantErr with a zero Workflow.
type resolveCase struct {
	name    string
	ref     string
	tenant  string
	want    ident.Workflow
	wantErr error
}

// checkResolve runs each case as a subtest.
func checkResolve(t *testing.T, tests []resolveCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ident.Resolve(tt.ref, tt.tenant)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr, "Resolve(%q) error", tt.ref)
				assert.Zero(t, got, "Resolve(%q) returned a Workflow with an error, want zero Workflow", tt.ref)
				return
			}
			require.NoError(t, err, "Resolve(%q)", tt.ref)
			assert.Equal(t, tt.want, got, "Resolve(%q)", tt.ref)
		})
	}
}

// TestResolve checks the references Resolve accepts: an agent, an agent and a type, and a
// workflow id.
func TestResolve(t *testing.T) {
	checkResolve(t, []resolveCase{
		{
			name:   "bare agent gets default type and activation",
			ref:    "Echo",
			tenant: "acme",
			want:   ident.Workflow{Tenant: "acme", Agent: "Echo", WorkflowType: "Supervisor Workflow", Activation: "default"},
		},
		{
			name:   "agent and type gets default activation",
			ref:    "Echo:Conversational",
			tenant: "acme",
			want:   ident.Workflow{Tenant: "acme", Agent: "Echo", WorkflowType: "Conversational", Activation: "default"},
		},
		{
			name:   "four segments is a workflow id",
			ref:    "acme:Echo:Supervisor Workflow:main",
			tenant: "acme",
			want:   ident.Workflow{Tenant: "acme", Agent: "Echo", WorkflowType: "Supervisor Workflow", Activation: "main"},
		},
		{
			// The caller compares the tenant segment with its own tenant (403), so Resolve
			// must hand it back unchanged.
			name:   "four segments keeps another tenant's segment",
			ref:    "other:Echo:Conversational:main",
			tenant: "acme",
			want:   ident.Workflow{Tenant: "other", Agent: "Echo", WorkflowType: "Conversational", Activation: "main"},
		},
		{
			name:   "spaces, dots and unicode are allowed in names",
			ref:    "My Agent.v2:Typ é 日本",
			tenant: "acme",
			want:   ident.Workflow{Tenant: "acme", Agent: "My Agent.v2", WorkflowType: "Typ é 日本", Activation: "default"},
		},
		{
			name:   "256-byte agent name",
			ref:    strings.Repeat("a", 256),
			tenant: "acme",
			want:   ident.Workflow{Tenant: "acme", Agent: strings.Repeat("a", 256), WorkflowType: "Supervisor Workflow", Activation: "default"},
		},
	})
}

// TestResolveInvalid checks the references Resolve refuses: the wrong number of segments, empty
// or invalid segments, and names too long.
func TestResolveInvalid(t *testing.T) {
	checkResolve(t, []resolveCase{
		{
			name:    "three segments",
			ref:     "acme:Echo:Conversational",
			tenant:  "acme",
			wantErr: ident.ErrInvalidWorkflow,
		},
		{
			name:    "four segments with invalid tenant",
			ref:     "ac me:Echo:Conversational:main",
			tenant:  "acme",
			wantErr: ident.ErrInvalidTenant,
		},
		{
			name:    "five segments",
			ref:     "acme:Echo:Conversational:main:extra",
			tenant:  "acme",
			wantErr: ident.ErrInvalidWorkflow,
		},
		{name: "empty ref", ref: "", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "only a colon", ref: ":", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "empty agent with type", ref: ":Conversational", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "agent with empty type", ref: "Echo:", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "empty activation", ref: "acme:Echo:Conversational:", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "empty agent in workflow id", ref: "acme::Conversational:main", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "empty tenant in workflow id", ref: ":Echo:Conversational:main", tenant: "acme", wantErr: ident.ErrInvalidTenant},
		{name: "newline in agent", ref: "Ec\nho", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "nul in type", ref: "Echo:Conv\x00", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "DEL in activation", ref: "acme:Echo:Conversational:ma\x7fin", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "tab in agent", ref: "Echo\t", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "invalid utf-8 in agent", ref: "Echo\xff", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "replacement char in agent", ref: "Echo\uFFFD", tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
		{name: "257-byte agent name", ref: strings.Repeat("a", 257), tenant: "acme", wantErr: ident.ErrInvalidWorkflow},
	})
}

func TestResolveDefaults(t *testing.T) {
	assert.Equal(t, "Supervisor Workflow", ident.DefaultWorkflowType, "DefaultWorkflowType (docs/identifiers.md#workflow-ids)")
	assert.Equal(t, "default", ident.DefaultActivation, "DefaultActivation (docs/identifiers.md#workflow-ids)")
	w, err := ident.Resolve("Echo", "acme")
	require.NoError(t, err)
	assert.Equal(t, "acme:Echo:Supervisor Workflow:default", w.ID(), "ID()")
	assert.Equal(t, "Echo:Supervisor Workflow", w.TypeName(), "TypeName()")
}

func TestParseWorkflowID(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		want    ident.Workflow
		wantErr error
	}{
		{
			name: "valid",
			id:   "acme:Echo:Supervisor Workflow:default",
			want: ident.Workflow{Tenant: "acme", Agent: "Echo", WorkflowType: "Supervisor Workflow", Activation: "default"},
		},
		{name: "one segment", id: "Echo", wantErr: ident.ErrInvalidWorkflow},
		{name: "two segments", id: "Echo:Conversational", wantErr: ident.ErrInvalidWorkflow},
		{name: "three segments", id: "acme:Echo:Conversational", wantErr: ident.ErrInvalidWorkflow},
		{name: "five segments", id: "acme:Echo:Conversational:a:b", wantErr: ident.ErrInvalidWorkflow},
		{name: "empty", id: "", wantErr: ident.ErrInvalidWorkflow},
		{name: "all segments empty", id: ":::", wantErr: ident.ErrInvalidTenant},
		{name: "invalid tenant", id: "acme.corp:Echo:Conversational:default", wantErr: ident.ErrInvalidTenant},
		{name: "65-char tenant", id: strings.Repeat("t", 65) + ":Echo:Conversational:default", wantErr: ident.ErrInvalidTenant},
		{name: "empty workflow type", id: "acme:Echo::default", wantErr: ident.ErrInvalidWorkflow},
		{name: "control char in activation", id: "acme:Echo:Conversational:\x01", wantErr: ident.ErrInvalidWorkflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ident.ParseWorkflowID(tt.id)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr, "ParseWorkflowID(%q) error", tt.id)
				return
			}
			require.NoError(t, err, "ParseWorkflowID(%q)", tt.id)
			assert.Equal(t, tt.want, got, "ParseWorkflowID(%q)", tt.id)
		})
	}
}

func TestWorkflowIDRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		w    ident.Workflow
	}{
		{name: "defaults", w: ident.Workflow{Tenant: "default", Agent: "Echo", WorkflowType: "Supervisor Workflow", Activation: "default"}},
		{name: "dots and spaces", w: ident.Workflow{Tenant: "t-1", Agent: "a.b c", WorkflowType: "x.y", Activation: "act 1"}},
		{name: "unicode", w: ident.Workflow{Tenant: "T_2", Agent: "エージェント", WorkflowType: "Typ é", Activation: "🙂"}},
		{name: "wildcard characters", w: ident.Workflow{Tenant: "t", Agent: "*", WorkflowType: ">", Activation: "a*b>c"}},
		{name: "max lengths", w: ident.Workflow{Tenant: strings.Repeat("t", 64), Agent: strings.Repeat("a", 256), WorkflowType: strings.Repeat("w", 256), Activation: strings.Repeat("x", 256)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ident.ParseWorkflowID(tt.w.ID())
			require.NoError(t, err, "ParseWorkflowID(%q)", tt.w.ID())
			assert.Equal(t, tt.w, got, "round trip")
			again, err := ident.Resolve(tt.w.ID(), "someone-else")
			require.NoError(t, err, "Resolve(%q)", tt.w.ID())
			assert.Equal(t, tt.w, again, "Resolve of the id")
		})
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name    string
		s       string
		wantErr bool
	}{
		{name: "plain", s: "Echo"},
		{name: "spaces and dots", s: "Supervisor Workflow.v1"},
		{name: "unicode", s: "日本語"},
		{name: "256 bytes", s: strings.Repeat("a", 256)},
		{name: "256 bytes of two-byte runes", s: strings.Repeat("é", 128)},
		{name: "empty", s: "", wantErr: true},
		{name: "257 bytes", s: strings.Repeat("a", 257), wantErr: true},
		{name: "257 bytes counted in bytes not runes", s: strings.Repeat("é", 128) + "a", wantErr: true},
		{name: "colon", s: "a:b", wantErr: true},
		{name: "nul", s: "a\x00", wantErr: true},
		{name: "escape", s: "a\x1b[31m", wantErr: true},
		{name: "DEL", s: "\x7f", wantErr: true},
		{name: "invalid utf-8", s: "\xc3\x28", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ident.ValidName(tt.s)
			if tt.wantErr {
				assert.Error(t, err, "ValidName(%q)", tt.s)
			} else {
				assert.NoError(t, err, "ValidName(%q)", tt.s)
			}
		})
	}
}

// TestValidNameC1Controls: ValidName promises "printable text without ... control characters",
// and that includes the C1 controls U+0080-U+009F (for example U+009B, the 8-bit CSI that starts
// terminal escape sequences, or U+0085 NEL, a line break), which once passed.
func TestValidNameC1Controls(t *testing.T) {
	for _, s := range []string{"a\u0085b", "a\u009b31m", "\u0080"} {
		assert.Error(t, ident.ValidName(s), "ValidName(%q), want an error for a control character", s)
		_, err := ident.Participant(s)
		assert.Error(t, err, "Participant(%q), want an error for a control character", s)
	}
}

func TestParticipant(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		want    string
		wantErr bool
	}{
		{name: "already normal", id: "alice", want: "alice"},
		{name: "lowercased", id: "Alice@Example.COM", want: "alice@example.com"},
		{name: "trimmed", id: "  bob \t\n", want: "bob"},
		{name: "inner space kept", id: " Carol Smith ", want: "carol smith"},
		{name: "unicode lowercased", id: "ÉLODIE", want: "élodie"},
		{name: "colon and dots allowed", id: "user:42.x", want: "user:42.x"},
		{name: "empty", id: "", want: ""},
		{name: "only spaces", id: "   ", want: ""},
		{name: "256 bytes", id: strings.Repeat("A", 256), want: strings.Repeat("a", 256)},
		{name: "257 bytes", id: strings.Repeat("a", 257), wantErr: true},
		{name: "256 bytes after trimming", id: "  " + strings.Repeat("a", 256) + "  ", want: strings.Repeat("a", 256)},
		{name: "inner newline", id: "a\nb", wantErr: true},
		{name: "nul", id: "a\x00", wantErr: true},
		{name: "DEL", id: "a\x7f", wantErr: true},
		{name: "invalid utf-8", id: "a\xffb", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ident.Participant(tt.id)
			if tt.wantErr {
				require.Error(t, err, "Participant(%q) = %q, want an error", tt.id, got)
				assert.Empty(t, got, "Participant(%q) returned a value with an error, want empty", tt.id)
				return
			}
			require.NoError(t, err, "Participant(%q)", tt.id)
			assert.Equal(t, tt.want, got, "Participant(%q)", tt.id)
		})
	}
}

func TestParticipantCaseInsensitive(t *testing.T) {
	variants := []string{"Alice", "ALICE", "alice", " aLiCe "}
	want, err := ident.Participant(variants[0])
	require.NoError(t, err)
	for _, v := range variants[1:] {
		got, err := ident.Participant(v)
		require.NoError(t, err, "Participant(%q)", v)
		assert.Equal(t, want, got, "Participant(%q), want it like Participant(%q)", v, variants[0])
	}
}
