package llm

import "encoding/json"

// The OpenAI chat-completions API's JSON, as far as this package sends and reads it
// (https://platform.openai.com/docs/api-reference/chat). Fields a compatible server adds are
// ignored.

// chatRequest is the body of POST {BaseURL}/chat/completions.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Tools    []chatTool    `json:"tools,omitempty"`
	// MaxTokens rather than max_completion_tokens: every compatible server knows it.
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	Stream      bool     `json:"stream,omitempty"`
}

// chatMessage is one message of a request. Content is absent only from an assistant message
// that carries tool calls and no text.
type chatMessage struct {
	Role       Role           `json:"role"`
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// chatTool offers a function: {"type": "function", "function": {name, description, parameters}}.
type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// chatToolCall is a call the model made, in an answer or sent back with the conversation. In a
// streamed answer it comes in pieces (toolCallDelta).
type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function callFunction `json:"function"`
}

type callFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// toolCallDelta is a piece of a streamed tool call: the first names the call's id and function,
// every piece its index and some of the arguments' text.
type toolCallDelta struct {
	Index    int64        `json:"index"`
	ID       string       `json:"id"`
	Function callFunction `json:"function"`
}

// chatCompletion is the answer of a request without "stream".
type chatCompletion struct {
	Choices []struct {
		Index   int64 `json:"index"`
		Message struct {
			Content   string         `json:"content"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
}

// chatChunk is one server-sent event of a streamed answer; the stream ends with "data: [DONE]".
// A server that fails after it started the stream may send an event with an error instead.
type chatChunk struct {
	Choices []struct {
		Index int64 `json:"index"`
		Delta struct {
			Content   string          `json:"content"`
			ToolCalls []toolCallDelta `json:"tool_calls"`
		} `json:"delta"`
		// FinishReason is null in every chunk but the last of the choice.
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Error *apiError `json:"error"`
}

// errorBody is the body of an error answer: {"error": {"message": …, "type": …}}.
type errorBody struct {
	Error *apiError `json:"error"`
}

type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
}
