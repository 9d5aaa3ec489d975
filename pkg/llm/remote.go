package llm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// maxRetryDelay bounds the wait before a retry. A server asking for a longer wait (Retry-After)
// gets no retry: the call fails with ErrUpstream at once instead of sleeping into ErrTimeout.
const maxRetryDelay = 8 * time.Second

// maxDetail bounds how much of a server's error message goes into an error.
const maxDetail = 300

// remote is a model behind an OpenAI-compatible chat-completions API.
type remote struct {
	model   string
	apiKey  string // only to redact it from error texts
	timeout time.Duration
	chat    openai.ChatCompletionService
}

func newRemote(c Config) *remote {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	retries := c.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	opts := []option.RequestOption{
		option.WithBaseURL(c.BaseURL),
		option.WithMaxRetries(retries),
		option.WithMaxRetryDelay(min(maxRetryDelay, timeout/2)),
	}
	if c.APIKey != "" {
		opts = append(opts, option.WithAPIKey(c.APIKey))
	}
	if c.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(c.HTTPClient))
	}
	return &remote{
		model:   c.Model,
		apiKey:  c.APIKey,
		timeout: timeout,
		// The service, not openai.NewClient: the client would also pick up OPENAI_API_KEY,
		// OPENAI_BASE_URL and friends from the environment and could send an OpenAI key to
		// whatever server BaseURL names.
		chat: openai.NewChatCompletionService(opts...),
	}
}

func (m *remote) Name() string { return m.model }

func (m *remote) Complete(ctx context.Context, req Request) (string, error) {
	req.Tools = nil
	a, err := m.Generate(ctx, req, nil)
	if err == nil && a.Text == "" {
		return "", m.upstream("the answer has no content")
	}
	return a.Text, err
}

func (m *remote) Stream(ctx context.Context, req Request, onDelta func(string) error) (string, error) {
	req.Tools = nil
	if onDelta == nil {
		onDelta = func(string) error { return nil }
	}
	a, err := m.Generate(ctx, req, onDelta)
	if err == nil && a.Text == "" {
		return "", m.upstream("the answer has no content")
	}
	return a.Text, err
}

func (m *remote) Generate(ctx context.Context, req Request, onDelta func(string) error) (Answer, error) {
	params, err := m.params(req)
	if err != nil {
		return Answer{}, err
	}
	callCtx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if onDelta == nil {
		return m.complete(callCtx, params)
	}
	return m.stream(callCtx, params, onDelta)
}

func (m *remote) complete(callCtx context.Context, params openai.ChatCompletionNewParams) (Answer, error) {
	res, err := m.chat.New(callCtx, params)
	if err != nil {
		return Answer{}, m.fail(callCtx, err)
	}
	for _, ch := range res.Choices {
		if ch.Index != 0 {
			continue
		}
		a := Answer{Text: ch.Message.Content}
		for _, tc := range ch.Message.ToolCalls {
			if tc.Type != "" && tc.Type != "function" {
				continue // custom tools are never offered
			}
			a.ToolCalls = append(a.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		if a.Text != "" || len(a.ToolCalls) > 0 {
			return a, nil
		}
	}
	return Answer{}, m.upstream("the answer has no content")
}

func (m *remote) stream(callCtx context.Context, params openai.ChatCompletionNewParams, onDelta func(string) error) (Answer, error) {
	// NewStreaming retries (per MaxRetries) only until the server answers 200; reading the
	// stream is never retried, so a delta is never delivered twice.
	stream := m.chat.NewStreaming(callCtx, params)
	defer stream.Close()

	var (
		b        strings.Builder
		calls    toolCallDeltas
		finished bool
	)
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			if ch.Index != 0 {
				continue
			}
			if ch.FinishReason != "" {
				finished = true
			}
			for _, tc := range ch.Delta.ToolCalls {
				calls.add(tc)
			}
			if ch.Delta.Content == "" {
				continue
			}
			b.WriteString(ch.Delta.Content)
			if err := onDelta(ch.Delta.Content); err != nil {
				return Answer{Text: b.String()}, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return Answer{Text: b.String()}, m.fail(callCtx, err)
	}
	if callCtx.Err() != nil {
		return Answer{Text: b.String()}, ctxError(callCtx, m.model)
	}
	// A connection closed cleanly between two events ends the stream without an error; only
	// the finish reason, which every compatible server sends last, tells it from a whole answer.
	if !finished {
		return Answer{Text: b.String()}, m.upstream("the stream ended before the answer was finished")
	}
	a := Answer{Text: b.String(), ToolCalls: calls.done()}
	if a.Text == "" && len(a.ToolCalls) == 0 {
		return Answer{}, m.upstream("the answer has no content")
	}
	return a, nil
}

// toolCallDeltas puts a streamed answer's tool calls together: each arrives in pieces, the first
// with its id and name, all with the call's index, the arguments' text split across them.
type toolCallDeltas struct {
	calls []ToolCall
	index []int64
}

func (d *toolCallDeltas) add(tc openai.ChatCompletionChunkChoiceDeltaToolCall) {
	i := slices.Index(d.index, tc.Index)
	if i < 0 {
		d.index = append(d.index, tc.Index)
		d.calls = append(d.calls, ToolCall{})
		i = len(d.calls) - 1
	}
	c := &d.calls[i]
	if tc.ID != "" {
		c.ID = tc.ID
	}
	if tc.Function.Name != "" {
		c.Name = tc.Function.Name
	}
	c.Arguments += tc.Function.Arguments
}

// done returns the calls in index order.
func (d *toolCallDeltas) done() []ToolCall {
	if len(d.calls) == 0 {
		return nil
	}
	order := make([]int, len(d.calls))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(d.index[a], d.index[b]) })
	out := make([]ToolCall, len(order))
	for i, j := range order {
		out[i] = d.calls[j]
	}
	return out
}

func (m *remote) params(req Request) (openai.ChatCompletionNewParams, error) {
	if len(req.Messages) == 0 {
		return openai.ChatCompletionNewParams{}, errors.New("llm: request has no messages")
	}
	if req.MaxTokens < 0 {
		return openai.ChatCompletionNewParams{}, fmt.Errorf("llm: MaxTokens %d is negative", req.MaxTokens)
	}
	msgs := make([]openai.ChatCompletionMessageParamUnion, len(req.Messages))
	for i, msg := range req.Messages {
		p, err := messageParam(msg)
		if err != nil {
			return openai.ChatCompletionNewParams{}, fmt.Errorf("llm: message %d: %w", i, err)
		}
		msgs[i] = p
	}
	p := openai.ChatCompletionNewParams{Model: m.model, Messages: msgs}
	if len(req.Tools) > 0 {
		tools, err := toolParams(req.Tools)
		if err != nil {
			return openai.ChatCompletionNewParams{}, err
		}
		p.Tools = tools
	}
	if req.MaxTokens > 0 {
		// max_tokens rather than max_completion_tokens: every compatible server knows it.
		p.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	return p, nil
}

// messageParam maps a message onto the API's: an assistant message carries its tool calls
// ("tool_calls", each "type": "function"), a tool result is a "role": "tool" message naming its
// call by "tool_call_id".
func messageParam(msg Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch msg.Role {
	case RoleSystem:
		return openai.SystemMessage(msg.Content), nil
	case RoleUser:
		return openai.UserMessage(msg.Content), nil
	case RoleAssistant:
		if len(msg.ToolCalls) == 0 {
			return openai.AssistantMessage(msg.Content), nil
		}
		a := &openai.ChatCompletionAssistantMessageParam{}
		if msg.Content != "" {
			a.Content.OfString = openai.String(msg.Content)
		}
		for _, tc := range msg.ToolCalls {
			// The name is not checked against ValidToolName: it is the model's own, and an
			// unknown one was answered as such in the tool's result.
			if tc.ID == "" || tc.Name == "" {
				return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("tool call %q to %q needs an id and a name", tc.ID, tc.Name)
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: a}, nil
	case RoleTool:
		if msg.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, errors.New("tool result has no ToolCallID")
		}
		return openai.ToolMessage(msg.Content, msg.ToolCallID), nil
	default:
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// toolParams maps tools onto the API's function tools: {"type": "function", "function": {name,
// description, parameters}}.
func toolParams(tools []Tool) ([]openai.ChatCompletionToolUnionParam, error) {
	if err := checkTools(tools); err != nil {
		return nil, err
	}
	out := make([]openai.ChatCompletionToolUnionParam, len(tools))
	for i, t := range tools {
		params := shared.FunctionParameters{"type": "object"}
		if len(t.Parameters) > 0 {
			params = nil
			if err := json.Unmarshal(t.Parameters, &params); err != nil {
				return nil, fmt.Errorf("llm: tool %q: %w", t.Name, err)
			}
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		out[i] = openai.ChatCompletionFunctionTool(fn)
	}
	return out, nil
}

// fail turns an error of the OpenAI client into ErrTimeout, ErrUpstream or the caller's
// cancellation. It does not wrap the client's error, whose text could quote a server's message
// that echoes the key; it keeps a redacted summary of it instead.
func (m *remote) fail(callCtx context.Context, err error) error {
	if callCtx.Err() != nil {
		return ctxError(callCtx, m.model)
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("calling model %q: %w: %w", m.model, ErrTimeout, context.DeadlineExceeded)
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		detail := apiErr.Message
		if detail == "" {
			detail = http.StatusText(apiErr.StatusCode)
		}
		return m.upstream(fmt.Sprintf("status %d: %s", apiErr.StatusCode, detail))
	}
	return m.upstream(err.Error())
}

func (m *remote) upstream(detail string) error {
	if m.apiKey != "" {
		detail = strings.ReplaceAll(detail, m.apiKey, "[redacted]")
	}
	if len(detail) > maxDetail {
		detail = strings.ToValidUTF8(detail[:maxDetail], "") + "…"
	}
	return fmt.Errorf("calling model %q: %w: %s", m.model, ErrUpstream, detail)
}

// ctxError reports why ctx ended: ErrTimeout for a deadline, else the cancellation.
func ctxError(ctx context.Context, model string) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("calling model %q: %w: %w", model, ErrTimeout, err)
	}
	return fmt.Errorf("calling model %q: %w", model, err)
}
