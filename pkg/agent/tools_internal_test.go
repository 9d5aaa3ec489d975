package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/subject"
)

func TestToolName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, want string
	}{
		{"plain", "sum", "sum"},
		{"kept characters", "Get_user-2", "Get_user-2"},
		{"dots and spaces", "orders.list all", "orders_list_all"},
		{"non-ASCII", "größe", "gr____e"},
		{"long", strings.Repeat("x", 70), strings.Repeat("x", 64)},
		{"empty", "", "_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ToolName(tt.method)
			assert.Equal(t, tt.want, got)
			assert.True(t, llm.ValidToolName(got))
		})
	}
}

// A tool call's step name is a step name whatever tool name the model writes.
func TestToolStepName(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "tool 2.1 sum", toolStepName(2, 0, "sum"))
	for _, tool := range []string{"", "a\nb", strings.Repeat("größe", 100), "\xff\x00"} {
		name := toolStepName(DefaultMaxRounds, 99, tool)
		assert.NoError(t, subject.CheckName("", name), "%q", name)
		assert.LessOrEqual(t, len(name), MaxStepName)
	}
}

type addIn struct {
	A int  `json:"a"`
	B *int `json:"b,omitempty" jsonschema:"optional second term"`
}

func TestMethodRegistration(t *testing.T) {
	t.Parallel()
	a := New("Calc")
	Method(a, "Add", func(context.Context, addIn) (int, error) { return 0, nil }, Describe("Adds a and b."))
	Method(a, "raw", func(context.Context, json.RawMessage) (int, error) { return 0, nil },
		Schema(json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)))
	a.DataFunc("plain", func(context.Context, *Message) (Reply, error) { return NoReply, nil })

	reg := a.registration()
	assert.Equal(t, []string{"add", "plain", "raw"}, reg.DataMethods)
	require.Len(t, reg.Methods, 3)
	assert.Equal(t, "Add", reg.Methods[0].Name)
	assert.Equal(t, "Adds a and b.", reg.Methods[0].Description)
	assert.JSONEq(t, `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer","description":"optional second term"}},"required":["a"]}`,
		string(reg.Methods[0].InputSchema))
	assert.Equal(t, "plain", reg.Methods[1].Name)
	assert.Empty(t, reg.Methods[1].Description)
	assert.JSONEq(t, `{"type":"object"}`, string(reg.Methods[1].InputSchema))
	assert.JSONEq(t, `{"type":"object","properties":{"q":{"type":"string"}}}`, string(reg.Methods[2].InputSchema), "Schema overrides")

	// A parameter type JSON cannot decode into needs an explicit schema.
	assert.PanicsWithValue(t, `agent Calc: method "ch": jsonschema: type cannot be decoded from JSON: the type is a chan; give its schema with agent.Schema`, func() {
		Method(a, "ch", func(context.Context, chan int) (int, error) { return 0, nil })
	})
	assert.NotPanics(t, func() {
		Method(a, "ch", func(context.Context, chan int) (int, error) { return 0, nil }, Schema(json.RawMessage(`{"type":"object"}`)))
	})
	assert.Panics(t, func() { Schema(json.RawMessage(`[1]`)) })
	assert.Panics(t, func() { Schema(json.RawMessage(`null`)) })
}

func TestToolsOffered(t *testing.T) {
	t.Parallel()
	a := New("Calc")
	Method(a, "sum", func(context.Context, struct{}) (int, error) { return 0, nil }, Describe("Adds."))
	Method(a, "a.b", func(context.Context, struct{}) (int, error) { return 0, nil })
	Method(a, "a_b", func(context.Context, struct{}) (int, error) { return 0, nil })
	Method(a, "secret", func(context.Context, struct{}) (int, error) { return 0, nil })

	names := func(c Handler) []string {
		tools, methods, _ := c.(*toolChat).toolsOf(a)
		var out []string
		for _, tl := range tools {
			out = append(out, tl.Name)
			assert.Same(t, methods[tl.Name], a.data[strings.ToLower(methods[tl.Name].name)])
		}
		return out
	}
	// "a.b" and "a_b" both become a_b: the first in name order keeps it.
	assert.Equal(t, []string{"a_b", "secret", "sum"}, names(ChatWithTools(llm.Offline())))
	assert.Equal(t, []string{"sum"}, names(ChatWithTools(llm.Offline(), Tools("SUM", "missing"))))

	tools, _, _ := ChatWithTools(llm.Offline(), Tools("sum")).(*toolChat).toolsOf(a)
	assert.Equal(t, llm.Tool{Name: "sum", Description: "Adds.", Parameters: json.RawMessage(`{"type":"object"}`)}, tools[0])

	c := ChatWithTools(llm.Offline()).(*toolChat)
	assert.Equal(t, DefaultMaxRounds, c.maxRounds)
	assert.Equal(t, DefaultHistorySize, c.historySize)
	assert.Panics(t, func() { ChatWithTools(nil) })
}

// A method whose parameters are not a JSON object is not offered: a tool's arguments are one.
// One that takes any value is offered as taking any object.
func TestToolsOfferOnlyObjectParameters(t *testing.T) {
	t.Parallel()
	a := New("Mixed")
	Method(a, "double", func(_ context.Context, n int) (int, error) { return 2 * n, nil })
	Method(a, "total", func(context.Context, []int) (int, error) { return 0, nil })
	Method(a, "shout", func(context.Context, string) (string, error) { return "", nil })
	Method(a, "typed", func(context.Context, Schemaless) (int, error) { return 0, nil }, Schema(json.RawMessage(`{"type":"integer"}`)))
	Method(a, "raw", func(context.Context, json.RawMessage) (int, error) { return 0, nil })
	Method(a, "sum", func(context.Context, addIn) (int, error) { return 0, nil })
	a.DataFunc("plain", func(context.Context, *Message) (Reply, error) { return NoReply, nil })

	tools, methods, left := ChatWithTools(llm.Offline()).(*toolChat).toolsOf(a)
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
		var schema map[string]any
		require.NoError(t, json.Unmarshal(tl.Parameters, &schema), tl.Name)
		assert.Equal(t, "object", schema["type"], tl.Name)
	}
	assert.Equal(t, []string{"plain", "raw", "sum"}, names)
	assert.Len(t, methods, 3)
	assert.Equal(t, []string{"double", "shout", "total", "typed"}, left)
	assert.JSONEq(t, `{"type":"object"}`, string(tools[1].Parameters), "any value: any object")

	// Named explicitly, it is still left out.
	tools, _, left = ChatWithTools(llm.Offline(), Tools("double", "sum")).(*toolChat).toolsOf(a)
	require.Len(t, tools, 1)
	assert.Equal(t, "sum", tools[0].Name)
	assert.Equal(t, []string{"double"}, left)
}

// Schemaless is a parameter type whose schema its method gives.
type Schemaless struct{ N int }

func TestChatWithToolsNeedsHost(t *testing.T) {
	t.Parallel()
	_, err := ChatWithTools(llm.Offline()).ServeMessage(t.Context(), &Message{Type: ChatMessage, Text: "hi"})
	require.Error(t, err)
}
