package llm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/retry"
	"github.com/agentbus/agentbus/pkg/sse"
)

// maxRetryDelay bounds the wait before a retry. A server asking for a longer wait (Retry-After)
// gets no retry: the call fails with ErrUpstream at once instead of sleeping into ErrTimeout.
const maxRetryDelay = 8 * time.Second

// maxDetail bounds how much of a server's error message goes into an error.
const maxDetail = 300

// maxAnswer bounds the body of an answer that is not streamed; maxErrorBody that of an error
// answer, which is read only for its message.
const (
	maxAnswer    = 16 << 20
	maxErrorBody = 64 << 10
)

// remote is a model behind an OpenAI-compatible chat-completions API. It reads no OPENAI_*
// environment variable: a key from there could go to whatever server BaseURL names.
type remote struct {
	model   string
	apiKey  string
	url     string // {BaseURL}/chat/completions
	timeout time.Duration
	client  *http.Client
	// backoff paces the retries and gives up after the last (MaxAttempts).
	backoff retry.Policy
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
	client := c.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	return &remote{
		model:   c.Model,
		apiKey:  c.APIKey,
		url:     strings.TrimSuffix(c.BaseURL, "/") + "/chat/completions",
		timeout: timeout,
		client:  client,
		// 0.5 s doubling, up to 8 s (half the call's timeout when that is less), a quarter of it
		// random.
		backoff: retry.Policy{First: 500 * time.Millisecond, Max: min(maxRetryDelay, timeout/2), Jitter: 0.25, MaxAttempts: 1 + retries},
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
	body, err := m.params(req)
	if err != nil {
		return Answer{}, err
	}
	body.Stream = onDelta != nil
	raw, err := json.Marshal(body)
	if err != nil {
		return Answer{}, fmt.Errorf("llm: encoding the request: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	res, err := m.post(callCtx, raw, body.Stream)
	if err != nil {
		return Answer{}, err
	}
	defer res.Body.Close()
	if onDelta == nil {
		return m.complete(callCtx, res)
	}
	return m.stream(callCtx, res, onDelta)
}

// post sends the request until the server answers 200, retrying (up to Config.MaxRetries
// times, m.backoff's MaxAttempts) after a connection error or a retryable status: 408, 409, 429
// and 5xx, unless the server says otherwise in x-should-retry. It waits what the server asks
// for (Retry-After-Ms, Retry-After) when it asks, else the backoff; a server asking for more
// than the backoff's cap gets no retry.
func (m *remote) post(callCtx context.Context, body []byte, stream bool) (*http.Response, error) {
	attempts := m.backoff.Start()
	for {
		req, err := http.NewRequestWithContext(callCtx, http.MethodPost, m.url, bytes.NewReader(body))
		if err != nil {
			// The error quotes the URL, which may carry credentials; Validate parsed it already.
			return nil, m.upstream("the request could not be built")
		}
		req.Header.Set("Content-Type", "application/json")
		if stream {
			req.Header.Set("Accept", "text/event-stream")
		} else {
			req.Header.Set("Accept", "application/json")
		}
		if m.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+m.apiKey)
		}
		res, err := m.client.Do(req)
		var (
			fail  error
			again bool
			wait  time.Duration
		)
		switch {
		case err != nil:
			fail = m.fail(callCtx, err)
			again = callCtx.Err() == nil && !errors.Is(fail, ErrTimeout)
		case res.StatusCode == http.StatusOK:
			return res, nil
		default:
			fail = m.statusError(res)
			again, wait = retryable(res)
			res.Body.Close()
		}
		if !again {
			return nil, fail
		}
		backoff, ok := attempts.Failed()
		if !ok {
			return nil, fail
		}
		if wait == 0 {
			wait = backoff
		} else if wait > m.backoff.Max {
			return nil, fail
		}
		if retry.Sleep(callCtx, wait) != nil {
			return nil, ctxError(callCtx, m.model)
		}
	}
}

// retryable reports whether an error answer is worth another attempt, and the wait the server
// asked for (0 when it named none).
func retryable(res *http.Response) (bool, time.Duration) {
	var again bool
	switch res.Header.Get("X-Should-Retry") {
	case "true":
		again = true
	case "false":
		again = false
	default:
		s := res.StatusCode
		again = s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500
	}
	if ms, err := strconv.ParseFloat(res.Header.Get("Retry-After-Ms"), 64); err == nil && ms > 0 && ms < math.MaxInt64/1e6 {
		return again, time.Duration(ms * float64(time.Millisecond))
	}
	h := res.Header.Get("Retry-After")
	if s, err := strconv.ParseFloat(h, 64); err == nil && s > 0 && s < math.MaxInt64/1e9 {
		return again, time.Duration(s * float64(time.Second))
	}
	if at, err := http.ParseTime(h); err == nil {
		return again, max(time.Until(at), time.Millisecond)
	}
	return again, 0
}

// statusError describes an error answer: its status and the server's message.
func (m *remote) statusError(res *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	var e errorBody
	detail := ""
	if json.Unmarshal(raw, &e) == nil && e.Error != nil {
		detail = e.Error.Message
	}
	if detail == "" {
		detail = http.StatusText(res.StatusCode)
	}
	return m.upstream(fmt.Sprintf("status %d: %s", res.StatusCode, detail))
}

func (m *remote) complete(callCtx context.Context, res *http.Response) (Answer, error) {
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return Answer{}, m.fail(callCtx, err)
	}
	if len(raw) > maxAnswer {
		return Answer{}, m.upstream(fmt.Sprintf("the answer is larger than %d bytes", maxAnswer))
	}
	var c chatCompletion
	if err := json.Unmarshal(raw, &c); err != nil {
		return Answer{}, m.upstream("the answer is not a chat completion: " + err.Error())
	}
	for _, ch := range c.Choices {
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

// stream reads a streamed answer. It is never retried once the server answered 200, so a
// delta is never delivered twice.
func (m *remote) stream(callCtx context.Context, res *http.Response, onDelta func(string) error) (Answer, error) {
	var (
		b        strings.Builder
		calls    toolCallDeltas
		finished bool
		fail     error
	)
	err := sse.NewReader(res.Body).Each(func(ev sse.Event) bool {
		if ev.Data == "[DONE]" {
			return false
		}
		var c chatChunk
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			fail = m.upstream("a streamed piece is not a chat completion chunk: " + err.Error())
			return false
		}
		if c.Error != nil || ev.Event == "error" {
			detail := "the server sent an error"
			if c.Error != nil && c.Error.Message != "" {
				detail += ": " + c.Error.Message
			}
			fail = m.upstream(detail)
			return false
		}
		for _, ch := range c.Choices {
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
				fail = err
				return false
			}
		}
		return true
	})
	switch {
	case fail != nil:
		return Answer{Text: b.String()}, fail
	case err != nil:
		return Answer{Text: b.String()}, m.fail(callCtx, err)
	case callCtx.Err() != nil:
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

func (d *toolCallDeltas) add(tc toolCallDelta) {
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

func (m *remote) params(req Request) (chatRequest, error) {
	if len(req.Messages) == 0 {
		return chatRequest{}, errors.New("llm: request has no messages")
	}
	if req.MaxTokens < 0 {
		return chatRequest{}, fmt.Errorf("llm: MaxTokens %d is negative", req.MaxTokens)
	}
	msgs := make([]chatMessage, len(req.Messages))
	for i, msg := range req.Messages {
		p, err := messageParam(msg)
		if err != nil {
			return chatRequest{}, fmt.Errorf("llm: message %d: %w", i, err)
		}
		msgs[i] = p
	}
	p := chatRequest{Model: m.model, Messages: msgs, MaxTokens: req.MaxTokens, Temperature: req.Temperature}
	if len(req.Tools) > 0 {
		tools, err := toolParams(req.Tools)
		if err != nil {
			return chatRequest{}, err
		}
		p.Tools = tools
	}
	return p, nil
}

// messageParam maps a message onto the API's: an assistant message carries its tool calls
// ("tool_calls", each "type": "function"), a tool result is a "role": "tool" message naming its
// call by "tool_call_id".
func messageParam(msg Message) (chatMessage, error) {
	content := &msg.Content
	switch msg.Role {
	case RoleSystem, RoleUser:
		return chatMessage{Role: msg.Role, Content: content}, nil
	case RoleAssistant:
		if len(msg.ToolCalls) == 0 {
			return chatMessage{Role: msg.Role, Content: content}, nil
		}
		a := chatMessage{Role: msg.Role}
		if msg.Content != "" {
			a.Content = content
		}
		for _, tc := range msg.ToolCalls {
			// The name is not checked against ValidToolName: it is the model's own, and an
			// unknown one was answered as such in the tool's result.
			if tc.ID == "" || tc.Name == "" {
				return chatMessage{}, fmt.Errorf("tool call %q to %q needs an id and a name", tc.ID, tc.Name)
			}
			a.ToolCalls = append(a.ToolCalls, chatToolCall{
				ID:       tc.ID,
				Type:     "function",
				Function: callFunction{Name: tc.Name, Arguments: tc.Arguments},
			})
		}
		return a, nil
	case RoleTool:
		if msg.ToolCallID == "" {
			return chatMessage{}, errors.New("tool result has no ToolCallID")
		}
		return chatMessage{Role: msg.Role, Content: content, ToolCallID: msg.ToolCallID}, nil
	default:
		return chatMessage{}, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// toolParams maps tools onto the API's function tools: {"type": "function", "function": {name,
// description, parameters}}.
func toolParams(tools []Tool) ([]chatTool, error) {
	if err := checkTools(tools); err != nil {
		return nil, err
	}
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object"}`)
		}
		out[i] = chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: params}}
	}
	return out, nil
}

// fail turns an error of a request or of reading its answer into ErrTimeout, ErrUpstream or the
// caller's cancellation. It does not wrap the error, whose text could quote a URL or a server's
// message that echoes the key; it keeps a redacted summary of it instead.
func (m *remote) fail(callCtx context.Context, err error) error {
	if callCtx.Err() != nil {
		return ctxError(callCtx, m.model)
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("calling model %q: %w: %w", m.model, ErrTimeout, context.DeadlineExceeded)
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
