package llm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
		if err != nil || got != conversationAnswer {
			t.Fatalf("Complete = %q, %v; want %q", got, err, conversationAnswer)
		}
	})
	t.Run("Stream", func(t *testing.T) {
		t.Parallel()
		var deltas []string
		got, err := newModel(t).Stream(t.Context(), conversation, func(d string) error {
			deltas = append(deltas, d)
			return nil
		})
		if err != nil || got != conversationAnswer {
			t.Fatalf("Stream = %q, %v; want %q", got, err, conversationAnswer)
		}
		if len(deltas) < 2 {
			t.Errorf("deltas %q, want the answer in several pieces", deltas)
		}
		if joined := strings.Join(deltas, ""); joined != got {
			t.Errorf("deltas concatenate to %q, want %q", joined, got)
		}
	})
	t.Run("StreamNilOnDelta", func(t *testing.T) {
		t.Parallel()
		got, err := newModel(t).Stream(t.Context(), conversation, nil)
		if err != nil || got != conversationAnswer {
			t.Fatalf("Stream = %q, %v; want %q", got, err, conversationAnswer)
		}
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
		if err != stop {
			t.Fatalf("Stream error = %v, want the onDelta error itself", err)
		}
		if len(deltas) != 2 {
			t.Errorf("onDelta called %d times after it failed, want 2", len(deltas))
		}
		if joined := strings.Join(deltas, ""); got != joined {
			t.Errorf("Stream returned %q, want what was delivered: %q", got, joined)
		}
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
	if !errors.Is(err, context.Canceled) || errors.Is(err, llm.ErrTimeout) || errors.Is(err, llm.ErrUpstream) {
		t.Errorf("%s error = %v, want context.Canceled only", op, err)
	}
}
