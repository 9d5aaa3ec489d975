package llm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
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
	params, err := m.params(req)
	if err != nil {
		return "", err
	}
	callCtx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	res, err := m.chat.New(callCtx, params)
	if err != nil {
		return "", m.fail(callCtx, err)
	}
	for _, ch := range res.Choices {
		if ch.Index == 0 && ch.Message.Content != "" {
			return ch.Message.Content, nil
		}
	}
	return "", m.upstream("the answer has no content")
}

func (m *remote) Stream(ctx context.Context, req Request, onDelta func(string) error) (string, error) {
	params, err := m.params(req)
	if err != nil {
		return "", err
	}
	callCtx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	// NewStreaming retries (per MaxRetries) only until the server answers 200; reading the
	// stream is never retried, so a delta is never delivered twice.
	stream := m.chat.NewStreaming(callCtx, params)
	defer stream.Close()

	var b strings.Builder
	finished := false
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			if ch.Index != 0 {
				continue
			}
			if ch.FinishReason != "" {
				finished = true
			}
			if ch.Delta.Content == "" {
				continue
			}
			b.WriteString(ch.Delta.Content)
			if onDelta != nil {
				if err := onDelta(ch.Delta.Content); err != nil {
					return b.String(), err
				}
			}
		}
	}
	if err := stream.Err(); err != nil {
		return b.String(), m.fail(callCtx, err)
	}
	if callCtx.Err() != nil {
		return b.String(), ctxError(callCtx, m.model)
	}
	// A connection closed cleanly between two events ends the stream without an error; only
	// the finish reason, which every compatible server sends last, tells it from a whole answer.
	if !finished {
		return b.String(), m.upstream("the stream ended before the answer was finished")
	}
	if b.Len() == 0 {
		return "", m.upstream("the answer has no content")
	}
	return b.String(), nil
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
		switch msg.Role {
		case RoleSystem:
			msgs[i] = openai.SystemMessage(msg.Content)
		case RoleUser:
			msgs[i] = openai.UserMessage(msg.Content)
		case RoleAssistant:
			msgs[i] = openai.AssistantMessage(msg.Content)
		default:
			return openai.ChatCompletionNewParams{}, fmt.Errorf("llm: message %d has unknown role %q", i, msg.Role)
		}
	}
	p := openai.ChatCompletionNewParams{Model: m.model, Messages: msgs}
	if req.MaxTokens > 0 {
		// max_tokens rather than max_completion_tokens: every compatible server knows it.
		p.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	return p, nil
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
