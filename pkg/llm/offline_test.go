package llm_test

import (
	"slices"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

func TestOfflineAnswersLastUserMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msgs []llm.Message
		want string
	}{
		{"one message", []llm.Message{{Role: llm.RoleUser, Content: "hello"}}, "You said: hello"},
		{
			"last user message",
			[]llm.Message{
				{Role: llm.RoleSystem, Content: "system"},
				{Role: llm.RoleUser, Content: "first"},
				{Role: llm.RoleUser, Content: "hello"},
				{Role: llm.RoleAssistant, Content: "an earlier answer"},
			},
			"You said: hello",
		},
		{"no user message", []llm.Message{{Role: llm.RoleSystem, Content: "system"}}, "You said: "},
		{"no messages", nil, "You said: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := llm.Offline().Complete(t.Context(), llm.Request{Messages: tt.msgs})
			if err != nil || got != tt.want {
				t.Errorf("Complete = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestOfflineStreamsWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"hello", "hello", []string{"You ", "said: ", "hello"}},
		{"spaces kept", "a  b\n\tc ", []string{"You ", "said: ", "a  ", "b\n\t", "c "}},
		{"empty", "", []string{"You ", "said: "}},
		{"leading space", " x", []string{"You ", "said:  ", "x"}},
		{"unicode", "grüße, 世界", []string{"You ", "said: ", "grüße, ", "世界"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var deltas []string
			got, err := llm.Offline().Stream(t.Context(),
				llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: tt.text}}},
				func(d string) error { deltas = append(deltas, d); return nil })
			if err != nil || got != "You said: "+tt.text {
				t.Fatalf("Stream = %q, %v; want %q", got, err, "You said: "+tt.text)
			}
			if !slices.Equal(deltas, tt.want) {
				t.Errorf("deltas %q, want %q", deltas, tt.want)
			}
		})
	}
}

func TestOfflineName(t *testing.T) {
	t.Parallel()
	m, err := llm.New(llm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "offline" || llm.Offline().Name() != llm.OfflineName {
		t.Errorf("Name = %q, want offline", m.Name())
	}
}
