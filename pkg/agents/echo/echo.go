// Package echo is the reference agent Echo (docs/echo.md): small, deterministic handlers that tests
// and newcomers use to see every path through agentbus work.
//
// Webhook methods:
//   - echo: 200 JSON {params, body, size, sha256}; body is the raw body as a string when it is
//     valid UTF-8, else bodyBase64 holds it.
//   - verify: 200 text/plain echoing the challenge query parameter or the body's "challenge".
//   - ack: 202 at once, then finishes the work (ms query parameter, default 50) and counts it in
//     the state's "acks".
//   - status: answers with the status given by the code query parameter.
//   - sleep: sleeps ms milliseconds (at most 5 minutes), counts it in "sleeps", and answers
//     {"slept": ms}.
//   - count: increments the instance's counter: {"count": n, "runId": …}.
//   - complete: answers {"completed": true, "runId": …} and completes the instance.
//   - state: answers {"runId": …, "state": …} without changing anything.
//   - host: answers {"hostId": …, "runId": …}: which workflow host serves the instance now.
//
// Chat: answers through the configured language model (WithModel) with agent.ChatWithTools,
// sending the thread's recent chat messages as context and streaming the answer's pieces to
// callers that asked for them. The model may call Echo's Data methods below as tools (each has a
// description and a schema of its parameters); the calls and their results are stored in the
// thread. Without a model it uses the offline model, which answers "You said: {text}", and calls
// a tool for "call {method} {json}": `call sum {"values":[2,3]}` stores the call of sum and its
// result {"sum":5}, and answers `sum returned {"sum":5}`.
//
// Data methods (names match case-insensitively):
//   - echo: returns its parameters.
//   - sum: {"values":[…]} → {"sum": n}.
//   - count: as the webhook method.
//   - history: {"size": n, "scope": s} → {"messages": […]}, the thread's newest messages.
//   - sleep: {"ms": n} sleeps, then {"slept": n}.
//   - fail: {"status": n, "message": s} fails with that status (default 500).
//   - steps: {"n": n, "sleepMs": ms} makes n durable steps (agent.Step) "step 1" … "step n", each
//     counting its run in the state's "steps" and waiting ms, and answers {"steps": n,
//     "attempt": a, "ran": […]}: per step, the attempt and host that ran it.
//
// File: replies "Received {fileName} ({n} bytes)" with data {fileName, contentType, size, sha256};
// "No file data received." when there was no content and "Invalid file format. Please ensure the
// file is base64 encoded." when it was not base64 (docs/interface.md#41-send-message-admin, rules 3 and 4).
package echo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/llm"
)

// Name is the agent's name.
const Name = "Echo"

// State is what Echo keeps per instance.
type State struct {
	Count  int `json:"count"`
	Acks   int `json:"acks"`
	Sleeps int `json:"sleeps"`
	Ticks  int `json:"ticks,omitempty"`
	// Steps counts the runs of the steps method's step functions: Steps[i-1] those of "step i".
	Steps []int `json:"steps,omitempty"`
}

// maxSleep bounds sleep and ack work so that a caller cannot park a conversation for long.
const maxSleep = 5 * time.Minute

// Option configures the Echo agent.
type Option func(*options)

type options struct{ model llm.Model }

// WithModel makes Echo's chat answer through model instead of the offline model.
func WithModel(model llm.Model) Option { return func(o *options) { o.model = model } }

// New returns the Echo agent with workflow types "Supervisor Workflow" and "Conversational".
func New(opts ...Option) *agent.Agent {
	o := options{model: llm.Offline()}
	for _, opt := range opts {
		opt(&o)
	}
	a := agent.New(Name, agent.WorkflowTypes("Supervisor Workflow", "Conversational"))
	a.WebhookFunc("echo", echo)
	a.WebhookFunc("verify", verify)
	a.WebhookFunc("ack", ack)
	a.WebhookFunc("status", status)
	a.WebhookFunc("sleep", sleep)
	a.WebhookFunc("count", count)
	a.WebhookFunc("complete", complete)
	a.WebhookFunc("state", state)
	a.WebhookFunc("host", host)

	a.Chat(agent.ChatWithTools(o.model, agent.SystemPrompt(systemPrompt)))
	agent.Method(a, "echo", func(_ context.Context, params map[string]any) (map[string]any, error) {
		if params == nil {
			params = map[string]any{}
		}
		return params, nil
	}, agent.Describe("Returns its parameters unchanged."))
	agent.Method(a, "sum", sum, agent.Describe(`Adds numbers: {"values":[2,3]} returns {"sum":5}.`))
	agent.Method(a, "count", countData, agent.Describe("Increments this conversation's counter and returns it with the run id."))
	agent.Method(a, "history", historyData, agent.Describe("Returns the newest messages of this conversation's thread, newest first."))
	agent.Method(a, "sleep", sleepData, agent.Describe("Waits ms milliseconds (at most 5 minutes), then returns how long it slept."))
	agent.Method(a, "steps", steps, agent.Describe(`Makes n durable steps one after another, each counted in this conversation's state and waiting sleepMs: {"n":3,"sleepMs":100}.`))
	agent.Method(a, "ask", ask, agent.Describe(`Posts a question to this conversation and waits for the participant's next Chat message or an answer call: {"question":"Which colour?"}.`))
	agent.Method(a, "answer", answer, agent.Describe(`Answers the question an ask waits for: {"colour":"blue"}.`))
	agent.Method(a, "fail", failData, agent.Describe("Fails with the given status (400-599, default 500) and message; for trying error paths."))
	agent.Method(a, "remind", remind, agent.Describe(`Posts text to this conversation after ms milliseconds: {"text":"stretch","ms":60000}.`))
	agent.Method(a, "tick", tick, agent.Describe(`Posts "tick N" to this conversation every seconds (default 60) until called with {"stop":true}.`))
	agent.Method(a, "relay", relay, agent.Describe(`Calls a Data method of another instance of this tenant and returns its result: {"activation":"b","method":"count"}.`))
	a.FileFunc(file)
	return a
}

// File reply texts of docs/interface.md#41-send-message-admin, rules 3 and 4.
const (
	NoFileText      = "No file data received."
	InvalidFileText = "Invalid file format. Please ensure the file is base64 encoded."
)

// systemPrompt opens every conversation with the model.
const systemPrompt = "You are Echo, the reference agent of agentbus. Answer briefly and helpfully. " +
	"Use the tools when a question asks for what they do."

type sumIn struct {
	Values []float64 `json:"values" jsonschema:"the numbers to add"`
}

func sum(_ context.Context, in sumIn) (map[string]float64, error) {
	var total float64
	for _, v := range in.Values {
		total += v
	}
	return map[string]float64{"sum": total}, nil
}

func countData(ctx context.Context, _ struct{}) (map[string]any, error) {
	inst := agent.MessageFrom(ctx).Instance()
	s, err := agent.UpdateState(ctx, inst, func(s *State) error { s.Count++; return nil })
	if err != nil {
		return nil, err
	}
	return map[string]any{"count": s.Count, "runId": inst.RunID()}, nil
}

type historyIn struct {
	Size  int    `json:"size,omitempty" jsonschema:"how many messages, 1-100 (default 20)"`
	Scope string `json:"scope,omitempty" jsonschema:"only messages of this topic"`
}

func historyData(ctx context.Context, in historyIn) (map[string]any, error) {
	msgs, _, err := agent.MessageFrom(ctx).History(ctx, agent.HistoryOptions{Size: in.Size, Scope: in.Scope})
	if err != nil {
		return nil, err
	}
	return map[string]any{"messages": msgs}, nil
}

type sleepIn struct {
	MS int `json:"ms" jsonschema:"milliseconds to wait"`
}

func sleepData(ctx context.Context, in sleepIn) (map[string]int, error) {
	d := min(time.Duration(max(in.MS, 0))*time.Millisecond, maxSleep)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return map[string]int{"slept": int(d / time.Millisecond)}, nil
}

type failIn struct {
	Status  int    `json:"status,omitempty" jsonschema:"HTTP status of the failure, 400-599"`
	Message string `json:"message,omitempty"`
}

func failData(_ context.Context, in failIn) (struct{}, error) {
	if in.Status < 400 || in.Status > 599 {
		in.Status = http.StatusInternalServerError
	}
	if in.Message == "" {
		in.Message = "fail was asked to fail"
	}
	return struct{}{}, agent.Errorf(in.Status, "%s", in.Message)
}

func file(ctx context.Context, m *agent.Message) (agent.Reply, error) {
	f := m.File
	switch {
	case f == nil || f.Empty:
		return agent.Say(NoFileText), nil
	case f.Invalid:
		return agent.Say(InvalidFileText), nil
	}
	b, err := f.Bytes(ctx)
	if err != nil {
		return agent.NoReply, err
	}
	sum := sha256.Sum256(b)
	return agent.SayAndAnswer(fmt.Sprintf("Received %s (%d bytes)", f.Name, len(b)), map[string]any{
		"fileName": f.Name, "contentType": f.ContentType, "size": len(b), "sha256": hex.EncodeToString(sum[:]),
	}), nil
}

// echoReply is echo's answer. Body is set when the body is valid UTF-8 (an empty body too),
// BodyBase64 otherwise.
type echoReply struct {
	Params     map[string]string `json:"params"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 []byte            `json:"bodyBase64,omitempty"` // encoding/json writes it in base64
	Size       int               `json:"size"`
	SHA256     string            `json:"sha256"`
}

func echo(_ context.Context, r *agent.WebhookRequest) agent.Response {
	sum := sha256.Sum256(r.Body)
	out := echoReply{Params: r.Params, Size: len(r.Body), SHA256: hex.EncodeToString(sum[:])}
	if utf8.Valid(r.Body) {
		body := string(r.Body)
		out.Body = &body
	} else {
		out.BodyBase64 = r.Body
	}
	return agent.JSON(http.StatusOK, out)
}

func verify(_ context.Context, r *agent.WebhookRequest) agent.Response {
	challenge, ok := r.Params["challenge"]
	if !ok {
		var body struct {
			Challenge *string `json:"challenge"`
		}
		if json.Unmarshal(r.Body, &body) == nil && body.Challenge != nil {
			challenge, ok = *body.Challenge, true
		}
	}
	if !ok {
		return agent.Text(http.StatusBadRequest, "missing challenge")
	}
	return agent.Text(http.StatusOK, challenge)
}

func ack(ctx context.Context, r *agent.WebhookRequest) agent.Response {
	r.Respond(agent.JSON(http.StatusAccepted, map[string]any{"accepted": true, "requestId": r.RequestID}))
	if !pause(ctx, r, 50) {
		return agent.Status(http.StatusServiceUnavailable)
	}
	if _, err := agent.UpdateState(ctx, r.Instance(), func(s *State) error { s.Acks++; return nil }); err != nil {
		return agent.Fail(fmt.Errorf("updating the state: %w", err))
	}
	return agent.Status(http.StatusOK) // not sent: the caller already has its 202
}

func status(_ context.Context, r *agent.WebhookRequest) agent.Response {
	code, err := strconv.Atoi(r.Params["code"])
	if err != nil || code < 200 || code > 599 {
		return agent.JSON(http.StatusBadRequest, map[string]string{"error": "code must be a status from 200 to 599"})
	}
	return agent.JSON(code, map[string]int{"status": code})
}

func sleep(ctx context.Context, r *agent.WebhookRequest) agent.Response {
	if !pause(ctx, r, 0) {
		return agent.Status(http.StatusServiceUnavailable)
	}
	if _, err := agent.UpdateState(ctx, r.Instance(), func(s *State) error { s.Sleeps++; return nil }); err != nil {
		return agent.Fail(fmt.Errorf("updating the state: %w", err))
	}
	return agent.JSON(http.StatusOK, map[string]any{"slept": sleptMs(r)})
}

func count(ctx context.Context, r *agent.WebhookRequest) agent.Response {
	s, err := agent.UpdateState(ctx, r.Instance(), func(s *State) error { s.Count++; return nil })
	if err != nil {
		return agent.Fail(fmt.Errorf("updating the state: %w", err))
	}
	return agent.JSON(http.StatusOK, map[string]any{"count": s.Count, "runId": r.Instance().RunID()})
}

func complete(_ context.Context, r *agent.WebhookRequest) agent.Response {
	r.Instance().Complete()
	return agent.JSON(http.StatusOK, map[string]any{"completed": true, "runId": r.Instance().RunID()})
}

func state(_ context.Context, r *agent.WebhookRequest) agent.Response {
	var s State
	if err := r.Instance().State(&s); err != nil {
		return agent.Fail(fmt.Errorf("reading the state: %w", err))
	}
	return agent.JSON(http.StatusOK, map[string]any{"runId": r.Instance().RunID(), "state": s})
}

func host(_ context.Context, r *agent.WebhookRequest) agent.Response {
	return agent.JSON(http.StatusOK, map[string]string{"hostId": r.Instance().HostID(), "runId": r.Instance().RunID()})
}

// sleptMs is the pause sleep asked for, in milliseconds.
func sleptMs(r *agent.WebhookRequest) int {
	ms, err := strconv.Atoi(r.Params["ms"])
	if err != nil || ms < 0 {
		return 0
	}
	return int(min(time.Duration(ms)*time.Millisecond, maxSleep) / time.Millisecond)
}

// pause sleeps for the ms query parameter (def when absent); false if ctx ended first.
func pause(ctx context.Context, r *agent.WebhookRequest, def int) bool {
	ms := def
	if v, err := strconv.Atoi(r.Params["ms"]); err == nil && v >= 0 {
		ms = v
	}
	d := min(time.Duration(ms)*time.Millisecond, maxSleep)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
