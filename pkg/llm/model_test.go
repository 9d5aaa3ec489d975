package llm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/llm"
)

// TestModels runs the Model contract against every implementation: the offline model and a
// remote model talking to a fake server that answers like it.
func TestModels(t *testing.T) {
	t.Parallel()
	impls := []struct {
		name     string
		newModel func(t *testing.T) llm.Model
	}{
		{"offline", func(*testing.T) llm.Model { return llm.Offline() }},
		{"remote", func(t *testing.T) llm.Model { return newFakeServer(t, nil).model() }},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			testModel(t, impl.newModel)
		})
	}
}

var conversation = llm.Request{Messages: []llm.Message{
	{Role: llm.RoleSystem, Content: "Be brief."},
	{Role: llm.RoleUser, Content: "first question"},
	{Role: llm.RoleAssistant, Content: "You said: first question"},
	{Role: llm.RoleUser, Content: "hello there, model"},
}}

const conversationAnswer = "You said: hello there, model"

func testModel(t *testing.T, newModel func(t *testing.T) llm.Model) {
	t.Run("Complete", func(t *testing.T) {
		t.Parallel()
		got, err := newModel(t).Complete(t.Context(), conversation)
		require.NoError(t, err, "Complete")
		require.Equal(t, conversationAnswer, got, "Complete")
	})
	t.Run("Stream", func(t *testing.T) {
		t.Parallel()
		var deltas []string
		got, err := newModel(t).Stream(t.Context(), conversation, func(d string) error {
			deltas = append(deltas, d)
			return nil
		})
		require.NoError(t, err, "Stream")
		require.Equal(t, conversationAnswer, got, "Stream")
		assert.GreaterOrEqual(t, len(deltas), 2, "deltas %q, want the answer in several pieces", deltas)
		assert.Equal(t, got, strings.Join(deltas, ""), "deltas concatenated")
	})
	t.Run("StreamNilOnDelta", func(t *testing.T) {
		t.Parallel()
		got, err := newModel(t).Stream(t.Context(), conversation, nil)
		require.NoError(t, err, "Stream")
		require.Equal(t, conversationAnswer, got, "Stream")
	})
	t.Run("StreamStopsOnDeltaError", func(t *testing.T) {
		t.Parallel()
		stop := errors.New("client went away")
		var deltas []string
		got, err := newModel(t).Stream(t.Context(), conversation, func(d string) error {
			deltas = append(deltas, d)
			if len(deltas) == 2 {
				return stop
			}
			return nil
		})
		require.Same(t, stop, err, "Stream error, want the onDelta error itself")
		assert.Len(t, deltas, 2, "onDelta calls, none after it failed")
		assert.Equal(t, strings.Join(deltas, ""), got, "Stream returned, want what was delivered")
	})
	t.Run("Canceled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		m := newModel(t)
		_, err := m.Complete(ctx, conversation)
		checkCanceled(t, "Complete", err)
		_, err = m.Stream(ctx, conversation, func(string) error { return nil })
		checkCanceled(t, "Stream", err)
	})
}

func checkCanceled(t *testing.T, op string, err error) {
	t.Helper()
	assert.ErrorIs(t, err, context.Canceled, "%s error, want context.Canceled only", op)
	assert.NotErrorIs(t, err, llm.ErrTimeout, "%s error, want context.Canceled only", op)
	assert.NotErrorIs(t, err, llm.ErrUpstream, "%s error, want context.Canceled only", op)
}
