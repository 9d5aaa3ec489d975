package llm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
			assert.NoError(t, err, "Complete")
			assert.Equal(t, tt.want, got, "Complete")
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
			require.NoError(t, err, "Stream")
			require.Equal(t, "You said: "+tt.text, got, "Stream")
			assert.Equal(t, tt.want, deltas, "deltas")
		})
	}
}

func TestOfflineName(t *testing.T) {
	t.Parallel()
	m, err := llm.New(llm.Config{})
	require.NoError(t, err)
	assert.Equal(t, "offline", m.Name(), "Name")
	assert.Equal(t, llm.OfflineName, llm.Offline().Name(), "Offline().Name()")
}
