package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
)

// RoleTool is the role of a message that carries a tool's result back to the model.
const RoleTool Role = "tool"

// Tool is a function the model may ask the caller to run, as the OpenAI chat-completions API
// defines it ("type": "function").
type Tool struct {
	// Name matches ^[a-zA-Z0-9_-]{1,64}$ (ValidToolName).
	Name string
	// Description tells the model what the tool does and when to use it.
	Description string
	// Parameters is the JSON Schema of the arguments object; nil means any object.
	Parameters json.RawMessage
}

// ToolCall is the model asking for a tool to be run.
type ToolCall struct {
	// ID names the call; the result's Message.ToolCallID repeats it.
	ID string
	// Name is the tool's.
	Name string
	// Arguments is the JSON object the model wrote, as text. Models may write invalid JSON or
	// arguments the schema does not allow: check before use.
	Arguments string
}

// Answer is one turn of the model: text, tool calls, or both.
type Answer struct {
	Text      string
	ToolCalls []ToolCall
}

// ToolModel is a Model that can call tools. Both models of this package are ToolModels.
type ToolModel interface {
	Model
	// Generate returns the model's next turn for req, which may offer Tools and contain earlier
	// tool calls (assistant messages with ToolCalls) and their results (RoleTool messages). With
	// a non-nil onDelta the text is streamed as Stream streams it; tool calls come only with the
	// answer. On an error the answer holds the text passed to onDelta so far.
	Generate(ctx context.Context, req Request, onDelta func(delta string) error) (Answer, error)
}

// Generate returns m's next turn. A Model that is not a ToolModel never calls tools: it answers
// text through Stream (Complete when onDelta is nil), without the request's Tools.
func Generate(ctx context.Context, m Model, req Request, onDelta func(delta string) error) (Answer, error) {
	if tm, ok := m.(ToolModel); ok {
		return tm.Generate(ctx, req, onDelta)
	}
	var (
		text string
		err  error
	)
	if onDelta == nil {
		text, err = m.Complete(ctx, req)
	} else {
		text, err = m.Stream(ctx, req, onDelta)
	}
	return Answer{Text: text}, err
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ValidToolName reports whether name may name a tool: 1 to 64 ASCII letters, digits, '_' and '-',
// as the OpenAI API requires.
func ValidToolName(name string) bool { return toolName.MatchString(name) }

// checkTools reports the first tool a server would refuse.
func checkTools(tools []Tool) error {
	seen := make(map[string]bool, len(tools))
	for i, t := range tools {
		if !ValidToolName(t.Name) {
			return fmt.Errorf("llm: tool %d has name %q; want ^[a-zA-Z0-9_-]{1,64}$", i, t.Name)
		}
		if seen[t.Name] {
			return fmt.Errorf("llm: tool %q is offered twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.Parameters) > 0 {
			var obj map[string]any
			if err := json.Unmarshal(t.Parameters, &obj); err != nil {
				return fmt.Errorf("llm: tool %q: parameters are not a JSON object: %w", t.Name, err)
			}
		}
	}
	return nil
}
