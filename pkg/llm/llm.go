// Package llm gives agents a chat model to answer with: an OpenAI-compatible chat-completions
// server (OpenAI, Ollama, vLLM, llama.cpp, … configured by AGENTBUS_LLM_BASE_URL, _MODEL and
// _API_KEY, docs/configuration.md#the-chat-model) or, when none is configured, the offline
// model, which answers deterministically "You said: {text}" so that tests and newcomers need no
// model server (docs/echo.md#chat).
//
// It sends text conversations and returns text answers, whole or streamed, and lets the model call
// tools (function calling): Generate offers a Request's Tools and returns the model's tool calls,
// whose results go back as RoleTool messages. It does not run tools; package agent's
// ChatWithTools does. It is not a general OpenAI client: no images, embeddings or usage
// accounting, and it keeps no conversation state; callers pass the messages they want the model
// to see on every call.
//
// It speaks the API's JSON over net/http itself (wire.go): it calls one endpoint, pkg/sse reads
// a streamed answer and pkg/retry paces the retries. The official OpenAI Go module would do the
// same through the whole API's generated types, whose compilation with the race detector took a
// quarter of the CPU of the module's test build (docs/development.md#what-ci-runs).
package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// Role is who wrote a message of the conversation.
type Role string

// The roles a conversation may contain.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one message of the conversation sent to the model.
type Message struct {
	Role    Role
	Content string
	// ToolCalls are the calls an assistant message made (its Content may then be empty).
	ToolCalls []ToolCall
	// ToolCallID is the call a RoleTool message gives the result of.
	ToolCallID string
}

// Request is one call to the model: the conversation so far, oldest message first.
type Request struct {
	// ID names what is being answered, for example the id of the chat message; it is not sent to
	// a server. The offline model makes its tool call ids from it, so that they are as unique as
	// the IDs given.
	ID       string
	Messages []Message
	// Tools the model may call (Generate only; Complete and Stream send none).
	Tools []Tool
	// MaxTokens bounds the length of the answer; 0 leaves it to the server.
	MaxTokens int
	// Temperature is sent when set; nil leaves it to the server.
	Temperature *float64
}

// Model is a chat model.
type Model interface {
	// Name of the model, for logs and the standalone's start banner ("offline" for the offline model).
	Name() string
	// Complete returns the whole answer.
	Complete(ctx context.Context, req Request) (string, error)
	// Stream calls onDelta with each piece of the answer as it is produced and returns the whole
	// answer; the concatenation of the deltas equals it. If onDelta returns an error, Stream stops
	// and returns it. On any error the returned text is what was passed to onDelta so far.
	Stream(ctx context.Context, req Request, onDelta func(delta string) error) (string, error)
}

var (
	// ErrTimeout means the model did not answer in time (Config.Timeout or the caller's deadline).
	// Errors that wrap it also wrap context.DeadlineExceeded. Callers answer 504.
	ErrTimeout = errors.New("llm: model did not answer in time")
	// ErrUpstream means the model server failed or answered something unusable: an error status
	// (after retries, when retryable), a broken connection, a stream cut short, an empty answer.
	// Callers answer 502.
	ErrUpstream = errors.New("llm: model server failed")
)

// Defaults applied to a zero Config field.
const (
	DefaultTimeout    = 60 * time.Second
	DefaultMaxRetries = 2
)

// Config selects and configures the model. The zero Config is the offline model.
type Config struct {
	// BaseURL of the OpenAI-compatible API, including its version path, e.g.
	// http://localhost:11434/v1 for Ollama; requests go to {BaseURL}/chat/completions.
	// Empty selects the offline model.
	BaseURL string
	// Model is the model name the server knows, e.g. "llama3.2". Required when BaseURL is set.
	Model string
	// APIKey is sent as "Authorization: Bearer …" when set (Ollama and most local servers need
	// none). It never appears in errors, logs or the Config's String.
	APIKey string
	// Timeout bounds each call to Complete or Stream, retries and the whole stream included; a
	// ctx deadline that is earlier wins. 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxRetries is how many times a call is retried after a retryable failure (408, 409, 429,
	// 5xx, connection errors), with exponential backoff or the server's Retry-After. A stream is
	// never retried once the server started answering it, so no delta is delivered twice.
	// 0 means DefaultMaxRetries; negative means no retries.
	MaxRetries int
	// HTTPClient makes the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// Validate reports whether c can be used to make a Model.
func (c Config) Validate() error {
	if c.BaseURL == "" {
		// Someone who set a model or a key expects a model server; answering offline instead
		// would hide the missing URL.
		if c.Model != "" || c.APIKey != "" {
			return errors.New("llm: Model or APIKey is set but BaseURL is empty (leave all three empty for the offline model)")
		}
	} else {
		u, err := url.Parse(c.BaseURL)
		if err != nil {
			// The parse error quotes the URL, which may carry credentials.
			return errors.New("llm: BaseURL is not a valid URL")
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("llm: BaseURL %q must be an absolute http or https URL", u.Redacted())
		}
		if c.Model == "" {
			return errors.New("llm: Model is required when BaseURL is set")
		}
	}
	if c.Timeout < 0 {
		return fmt.Errorf("llm: Timeout %s is negative", c.Timeout)
	}
	return nil
}

// String describes c without its API key, so that printing a Config cannot leak it.
func (c Config) String() string {
	if c.BaseURL == "" {
		return "offline"
	}
	return fmt.Sprintf("%s at %s (api key set: %t)", c.Model, redactURL(c.BaseURL), c.APIKey != "")
}

// LogValue logs c without its API key.
func (c Config) LogValue() slog.Value {
	if c.BaseURL == "" {
		return slog.GroupValue(slog.String("model", "offline"))
	}
	return slog.GroupValue(
		slog.String("model", c.Model),
		slog.String("baseURL", redactURL(c.BaseURL)),
		slog.Bool("apiKeySet", c.APIKey != ""),
		slog.Duration("timeout", c.Timeout),
		slog.Int("maxRetries", c.MaxRetries),
	)
}

// New returns the model c describes: the offline model when c.BaseURL is empty, else a client of
// the OpenAI-compatible server at c.BaseURL. It makes no request.
func New(c Config) (Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.BaseURL == "" {
		return Offline(), nil
	}
	return newRemote(c), nil
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}
