package agent

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/problem"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Defaults of ChatWithTools.
const (
	// DefaultMaxRounds bounds how often the model is asked for its next turn while answering
	// one chat message.
	DefaultMaxRounds = 8
	// DefaultHistorySize is how many of the thread's newest messages are searched for the
	// earlier chat messages the model gets as context.
	DefaultHistorySize = 20
)

// ErrToolRounds means the model still asked for tool calls in the last round ChatWithTools
// allows (MaxRounds). The chat is answered with an *Error (502) that wraps it.
var ErrToolRounds = errors.New("agent: the language model was still calling tools in its last round")

// ChatOption configures ChatWithTools.
type ChatOption func(*toolChat)

// SystemPrompt opens every conversation with the model.
func SystemPrompt(text string) ChatOption { return func(c *toolChat) { c.system = text } }

// MaxRounds bounds the model's turns per chat message: each turn either answers or asks for tool
// calls, whose results the next turn sees. n <= 0 means DefaultMaxRounds.
func MaxRounds(n int) ChatOption { return func(c *toolChat) { c.maxRounds = n } }

// HistorySize is how many of the thread's newest stored messages are read for context, of which
// the Chat messages with text go to the model. 0 means DefaultHistorySize; negative means none.
func HistorySize(n int) ChatOption { return func(c *toolChat) { c.historySize = n } }

// Tools offers only the named Data methods to the model (matched case-insensitively); by default
// it is offered all of them. Names the agent does not have are ignored.
func Tools(methods ...string) ChatOption {
	return func(c *toolChat) {
		c.only = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.only[strings.ToLower(m)] = true
		}
	}
}

// ChatWithTools returns a Chat handler that answers through model and lets the model call the
// agent's own Data methods as tools:
//
//	a := agent.New("Calc")
//	agent.Method(a, "sum", sum, agent.Describe("Adds numbers: {\"values\":[…]} → {\"sum\":n}"))
//	a.Chat(agent.ChatWithTools(model, agent.SystemPrompt("You are a calculator.")))
//
// Each tool is a Data method: its name (letters, digits, '_' and '-' kept, anything else
// replaced by '_', at most 64 bytes), its description (Describe) and its parameters' JSON Schema
// (derived by Method, or Schema). A tool's arguments are a JSON object, so a method whose
// parameters are not one (Method with an int, a slice or a string) is not offered, as
// jsonschema.ToolParameters decides; it stays callable as a Data method, and the first message
// handled logs which methods were left out. The model gets the system prompt, the thread's earlier chat
// messages and the message being handled. When it asks for tool calls, each runs as an ordinary
// Data call of the method on the same instance, in the same conversation turn: same state
// (UpdateState), same history, one call after another. The call is stored in the thread as an
// incoming Data message (text the method, data the arguments) and its reply as the outgoing
// one, both with metadata {"toolCallId": …}; a failed call's reply is {"error":{status,message}}
// as for any Data call. The result goes back to the model, a failure included (the client-safe
// message only), and so does an unknown tool's. This repeats until the model answers with text,
// at most MaxRounds turns; a model still calling tools in the last turn fails the chat with a
// 502 *Error wrapping ErrToolRounds, and those last calls are not run (nor stored), since the
// model could never see their results. A call the model gave no id gets one made of the chat
// message's id, the round and its place, unique in the thread.
//
// Each round is a durable step of the request (see Step): the model's turn, its tool calls
// included, is step "model {round}", and each call's result step "tool {round}.{place} {tool}".
// An attempt after the first (a retry, a redelivery after its host died, a takeover) replays the
// rounds an earlier attempt recorded, without asking the model or running the tools again, and
// goes on from the first round not recorded; the calls it replays are not stored again. Not
// recorded, and so run again by a later attempt: a tool call that changed the instance
// (UpdateState, Complete), since the attempt starts from the state the request found; a turn or a
// result over MaxStepResult encoded; and every round after a turn over it. A chat makes one
// journal read and one write per model turn and per tool call.
//
// Streamed to a converse caller (Accept: text/event-stream), each call comes as a "tool_call"
// event before it runs and a "tool_result" event after, and the text as "delta" events; when
// more than one turn has text, the reply holds all of it, separated by a blank line. After the
// "restart" event of an attempt after the first, the replayed rounds come again: a turn's text
// as one delta, a call as its two events. A model that is not an llm.ToolModel never calls tools.
func ChatWithTools(model llm.Model, opts ...ChatOption) Handler {
	if model == nil {
		panic("agent: ChatWithTools needs a model")
	}
	c := &toolChat{model: model}
	for _, o := range opts {
		o(c)
	}
	if c.maxRounds <= 0 {
		c.maxRounds = DefaultMaxRounds
	}
	if c.historySize == 0 {
		c.historySize = DefaultHistorySize
	}
	return c
}

type toolChat struct {
	model       llm.Model
	system      string
	maxRounds   int
	historySize int
	only        map[string]bool // nil: every Data method
	warnOnce    sync.Once       // for the methods left out
}

// toolEnv is what a Host gives a message's handler for running tool calls.
type toolEnv struct {
	agent   *Agent
	req     *agentbusv1.Request
	log     *slog.Logger
	tracer  trace.Tracer // nil when tracing is off
	history func(pos uint64) historyFunc
	// store appends a message to the thread, retrying while the bus recovers.
	store func(ctx context.Context, m *history.Message) error
	// event sends a partial reply to a streaming caller; nil when the caller does not stream.
	event func(rep *agentbusv1.Reply)
}

// ServeMessage answers m, running the rounds of tool calls the model asks for.
func (c *toolChat) ServeMessage(ctx context.Context, m *Message) (Reply, error) {
	env := m.tools
	if env == nil {
		return NoReply, errors.New("agent: ChatWithTools needs the message from a Host")
	}
	tools, methods, notObjects := c.toolsOf(env.agent)
	if len(notObjects) > 0 {
		c.warnOnce.Do(func() {
			env.log.Warn("Data methods not offered to the model as tools: their parameters are not a JSON object",
				"agent", env.agent.name, "methods", notObjects)
		})
	}
	req, err := c.conversation(ctx, m)
	if err != nil {
		return NoReply, err
	}
	req.Tools = tools

	rs := &rounds{}
	if m.inst != nil {
		rs.fx = m.inst.fx
	}
	var texts []string // of the turns that had text
	for round := 1; ; round++ {
		ans, err := c.modelRound(ctx, m, rs, req, round, len(texts) > 0)
		if err != nil {
			return NoReply, err
		}
		if ans.Text != "" {
			texts = append(texts, ans.Text)
		}
		if len(ans.ToolCalls) == 0 {
			return Say(strings.Join(texts, "\n\n")), nil
		}
		if round == c.maxRounds {
			// No turn is left to show the model these calls' results: running them would only
			// cause their side effects.
			env.log.Warn("the language model still asked for tools in its last round; they were not run",
				"maxRounds", c.maxRounds, "tools", toolNames(ans.ToolCalls))
			return NoReply, &Error{Status: http.StatusBadGateway,
				Message: fmt.Sprintf("the language model did not answer within %d rounds of tool calls", c.maxRounds),
				Err:     ErrToolRounds}
		}
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleAssistant, Content: ans.Text, ToolCalls: ans.ToolCalls})
		for i, call := range ans.ToolCalls {
			result, err := toolRound(ctx, m, rs, methods[call.Name], call, round, i)
			if err != nil {
				return NoReply, err
			}
			req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: result})
		}
	}
}

// modelRound returns the model's turn of round: the one an earlier attempt of the request
// recorded, or else the model's answer to req, recorded. Its text is streamed either way, after
// a blank line when an earlier turn had text: a replayed turn's as one delta.
func (c *toolChat) modelRound(ctx context.Context, m *Message, rs *rounds, req llm.Request, round int, sep bool) (llm.Answer, error) {
	delta := func(d string) error {
		if sep {
			sep = false
			m.Delta("\n\n")
		}
		m.Delta(d)
		return nil
	}
	ans, how, err := roundStep(ctx, rs, fmt.Sprintf("model %d", round), func(ctx context.Context) (llm.Answer, bool, error) {
		ans, err := llm.Generate(ctx, c.model, req, delta)
		if err != nil {
			return ans, false, modelError(err)
		}
		for i := range ans.ToolCalls {
			if ans.ToolCalls[i].ID == "" { // some compatible servers leave it out
				ans.ToolCalls[i].ID = callID(m.ID, round, i)
			}
		}
		return ans, true, nil
	})
	switch {
	case err != nil:
		return llm.Answer{}, err
	case how == roundReplayed && ans.Text != "":
		_ = delta(ans.Text)
	case how == roundUnrecorded:
		// Too large to record: a later attempt asks the model again, so the rounds after this
		// one are not recorded either.
		rs.off = true
	}
	return ans, nil
}

// toolRound runs a tool call of round (the i-th), or replays the result an earlier attempt of
// the request recorded, and returns what the model is told. A replayed call is not stored again
// (the attempt that recorded it stored it) and is streamed again as a "tool_call" and a
// "tool_result" event. A call that changed the instance (UpdateState, Complete) is not recorded:
// a later attempt starts from the state the request found, and runs it again.
func toolRound(ctx context.Context, chat *Message, rs *rounds, dm *dataMethod, call llm.ToolCall, round, i int) (string, error) {
	method := call.Name
	if dm != nil {
		method = dm.name
	}
	res, how, err := roundStep(ctx, rs, toolStepName(round, i, call.Name), func(ctx context.Context) (toolOutcome, bool, error) {
		changes := chat.instanceChanges()
		out, err := runTool(ctx, chat, dm, call, fmt.Sprintf("tool.%d.%d", round, i))
		if err != nil {
			return toolOutcome{}, false, err
		}
		return toolOutcome{Text: out.Text, Data: out.Data}, chat.instanceChanges() == changes, nil
	})
	if err != nil {
		return "", err
	}
	if ev := chat.tools.event; how == roundReplayed && ev != nil {
		ev(toolCallEvent(call, method))
		ev(toolResultEvent(call, method, &history.Message{Text: res.Text, Data: res.Data}))
	}
	return res.content(), nil
}

// toolStepName is the step name of the i-th tool call of round: "tool {round}.{i+1} {tool}",
// the tool's name as the model wrote it made a tool name (ToolName: at most 64 ASCII bytes), so
// that any name the model writes makes a step name.
func toolStepName(round, i int, tool string) string {
	return fmt.Sprintf("tool %d.%d %s", round, i+1, ToolName(tool))
}

// toolOutcome is what a chat records of a tool call's result: the stored reply's text and data.
type toolOutcome struct {
	Text *string         `json:"text,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// content is what the model is told of a tool call's result: its data, else its text.
func (o toolOutcome) content() string {
	switch {
	case o.Data != nil:
		return string(o.Data)
	case o.Text != nil:
		return *o.Text
	default:
		return "null"
	}
}

// instanceChanges counts the changes of the chat's instance so far (Instance.changes).
func (m *Message) instanceChanges() int64 {
	if m.inst == nil {
		return 0
	}
	return m.inst.changes.Load()
}

// callID names a call the model gave no id: the chat message's id, unique in the thread, with the
// round and the call's place in it, so that no two calls of a thread share an id.
func callID(chatID string, round, i int) string {
	return fmt.Sprintf("call_%s_%d_%d", chatID, round, i)
}

// toolNames lists the tools calls ask for, for logs.
func toolNames(calls []llm.ToolCall) []string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	return names
}

// modelError is the client-safe answer to a model's failure.
func modelError(err error) error {
	if errors.Is(err, llm.ErrTimeout) {
		return &Error{Status: http.StatusGatewayTimeout, Message: "the language model did not answer in time", Err: err}
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &Error{Status: http.StatusBadGateway, Message: "the language model failed to answer", Err: err}
}

// toolsOf lists the Data methods offered as tools, in name order, the methods by tool name, and
// the methods left out because their parameters are not a JSON object.
func (c *toolChat) toolsOf(a *Agent) (tools []llm.Tool, methods map[string]*dataMethod, notObjects []string) {
	keys := make([]string, 0, len(a.data))
	for key := range a.data {
		if c.only == nil || c.only[key] {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	tools = make([]llm.Tool, 0, len(keys))
	methods = make(map[string]*dataMethod, len(keys))
	for _, key := range keys {
		dm := a.data[key]
		params, ok := jsonschema.ToolParameters(dm.inputSchema())
		if !ok {
			// A tool's arguments are an object; wrapping the value in one would make the model,
			// MCP clients and the method's other callers disagree on what it takes.
			notObjects = append(notObjects, dm.name)
			continue
		}
		name := ToolName(dm.name)
		if _, dup := methods[name]; dup {
			continue // two names that differ only in replaced characters: the first keeps it
		}
		methods[name] = dm
		tools = append(tools, llm.Tool{Name: name, Description: dm.description, Parameters: params})
	}
	return tools, methods, notObjects
}

// ToolName is the tool name a Data method is offered under: the method's name with every byte
// other than an ASCII letter, digit, '_' or '-' replaced by '_', cut to 64 bytes, as the OpenAI
// API requires of tool names.
func ToolName(method string) string {
	b := []byte(method)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// conversation is what the model gets first: the system prompt, the thread's earlier chat
// messages (oldest first) and m.
func (c *toolChat) conversation(ctx context.Context, m *Message) (llm.Request, error) {
	req := llm.Request{ID: m.ID}
	if c.system != "" {
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleSystem, Content: c.system})
	}
	if c.historySize > 0 {
		past, _, err := m.History(ctx, HistoryOptions{Size: c.historySize})
		if err != nil {
			return llm.Request{}, fmt.Errorf("reading the conversation: %w", err)
		}
		for i := len(past) - 1; i >= 0; i-- {
			p := past[i]
			if p.MessageType != ChatMessage || p.Text == nil || *p.Text == "" {
				continue
			}
			role := llm.RoleUser
			if p.Direction == history.Out {
				role = llm.RoleAssistant
			}
			req.Messages = append(req.Messages, llm.Message{Role: role, Content: *p.Text})
		}
	}
	req.Messages = append(req.Messages, llm.Message{Role: llm.RoleUser, Content: m.Text})
	return req, nil
}

// runTool runs one tool call as a Data call of dm on chat's instance, stores the call and its
// reply in the thread, reports both to a streaming caller, and returns the stored reply. part
// names the stored messages, so that a retried chat stores them once. An error means the call
// could not be stored (the host is stopping); the call's own failures are its result.
func runTool(ctx context.Context, chat *Message, dm *dataMethod, call llm.ToolCall, part string) (*history.Message, error) {
	env := chat.tools
	req := env.req
	method := call.Name
	if dm != nil {
		method = dm.name
	}
	in := toolCallMessage(req, method, call, part)
	if err := env.store(ctx, in); err != nil {
		return nil, err
	}
	if env.event != nil {
		env.event(toolCallEvent(call, method))
	}
	if env.tracer != nil {
		var span trace.Span
		ctx, span = env.tracer.Start(ctx, "tool "+method, trace.WithAttributes(attrMethod.String(method)))
		defer span.End()
	}
	reply, err := callTool(ctx, chat, dm, call, in)
	recordAttempt(ctx, err)
	out := toolResult(req, reply, err, env.log)
	out.ID = messageID(req, part+".out")
	out.MessageType = history.Data
	out.Metadata = map[string]string{history.MetaToolCallID: call.ID}
	if err := env.store(ctx, out); err != nil {
		return nil, err
	}
	if env.event != nil {
		env.event(toolResultEvent(call, method, out))
	}
	return out, nil
}

// toolCallEvent is what a streaming caller sees of a tool call before it runs, its arguments cut
// to an event's size.
func toolCallEvent(call llm.ToolCall, method string) *agentbusv1.Reply {
	return &agentbusv1.Reply{ToolCall: &agentbusv1.ToolCall{Id: call.ID, Name: method, Arguments: string(eventSized([]byte(call.Arguments)))}}
}

// toolCallMessage is the incoming Data message a tool call is stored as, in the chat's thread.
func toolCallMessage(req *agentbusv1.Request, method string, call llm.ToolCall, part string) *history.Message {
	args := strings.TrimSpace(call.Arguments)
	if args == "" {
		args = "{}"
	}
	return &history.Message{
		ID:            messageID(req, part+".in"),
		CreatedAt:     time.Now().UTC(),
		Direction:     history.In,
		MessageType:   history.Data,
		Text:          &method,
		Data:          jsonOrNil([]byte(args)),
		Hint:          req.GetHint(),
		RequestID:     req.GetRequestId(),
		ParticipantID: req.GetParticipantId(),
		WorkflowID:    req.GetWorkflowId(),
		Scope:         req.GetScope(),
		Metadata:      map[string]string{history.MetaToolCallID: call.ID},
	}
}

// callTool calls dm's handler with the tool call stored as in, on the chat's instance. A call of
// a tool the agent does not have, with arguments that are not JSON, or with arguments that do not
// match the method's schema, fails as a Data call would, without running the handler: the model
// reads why in the result and may call again.
func callTool(ctx context.Context, chat *Message, dm *dataMethod, call llm.ToolCall, in *history.Message) (Reply, error) {
	switch {
	case dm == nil:
		return Reply{}, Errorf(http.StatusNotFound, "no tool named %q", call.Name)
	case in.Data == nil:
		return Reply{}, Errorf(http.StatusBadRequest, "the arguments of %s are not valid JSON", dm.name)
	}
	if err := dm.checkParams(chat.tools.log, in.Data); err != nil {
		return Reply{}, &Error{Status: problem.InvalidMethodParameters.Status, Message: jsonschema.ParamsDetail(dm.name, err)}
	}
	tm := &Message{
		Type:          DataMessage,
		Text:          dm.name,
		Data:          in.Data,
		Hint:          chat.Hint,
		Scope:         chat.Scope,
		RequestID:     chat.RequestID,
		ParticipantID: chat.ParticipantID,
		ID:            in.ID,
		inst:          chat.inst,
		history:       chat.tools.history(in.Pos),
	}
	return callHandler(ctx, chat.tools.log, dm.handler, tm)
}

// toolResultEvent is what a streaming caller sees of a tool call's result, its text cut to an
// event's size.
func toolResultEvent(call llm.ToolCall, method string, out *history.Message) *agentbusv1.Reply {
	text := out.Text
	if text != nil && len(*text) > maxEventBytes {
		cut := strings.ToValidUTF8((*text)[:maxEventBytes], "") + "…"
		text = &cut
	}
	return &agentbusv1.Reply{ToolResult: &agentbusv1.ToolResult{Id: call.ID, Name: method, Data: eventSized(out.Data), Text: text}}
}

// toolResult is the outgoing message of a tool call's reply or failure, as a Data call's would
// be stored; a failure keeps only its client-safe message (the cause is logged).
func toolResult(req *agentbusv1.Request, reply Reply, err error, log *slog.Logger) *history.Message {
	if err != nil {
		status, detail := http.StatusInternalServerError, "the handler failed"
		if he := (*Error)(nil); errors.As(err, &he) && he.Status >= 400 && he.Status <= 599 {
			status, detail = he.Status, he.Message
		}
		if status >= 500 {
			log.Warn("tool call failed", "status", status, "err", err)
		}
		_, out := errorReply(req, status, problem.HandlerError.Slug, detail, "tool")
		return out
	}
	var data json.RawMessage
	if reply.Data != nil {
		b, err := json.Marshal(reply.Data)
		if err != nil {
			log.Error("encoding a tool call's reply", "err", err)
			_, out := errorReply(req, problem.HandlerError.Status, problem.HandlerError.Slug, "the handler's reply could not be encoded", "tool")
			return out
		}
		data = b
	}
	return outgoing(req, "tool", reply.Text, data)
}

// maxEventBytes bounds the arguments, data and text a tool event carries to a streaming caller,
// so that the event fits in one NATS message; the history keeps more (maxStoredMessage).
const maxEventBytes = 64 << 10

// eventSized returns b, or when it is longer than maxEventBytes the JSON note of its size.
func eventSized(b []byte) []byte {
	if len(b) <= maxEventBytes {
		return b
	}
	note, _ := json.Marshal(map[string]any{"truncated": true, "size": len(b)})
	return note
}

// messageID is the id of a message a request stores, derived from the request and, for any but
// its incoming message (part ""), a part name, so that a request run again stores it once. It is
// uuid.NewSHA1(uuid.NameSpaceOID, tenant NUL requestId [NUL part]), made without allocating
// but for the string: every call names two messages.
func messageID(req *agentbusv1.Request, part string) string {
	var buf [256]byte
	b := append(buf[:0], uuid.NameSpaceOID[:]...)
	b = append(b, req.GetTenantId()...)
	b = append(b, 0)
	b = append(b, req.GetRequestId()...)
	if part != "" {
		b = append(b, 0)
		b = append(b, part...)
	}
	sum := sha1.Sum(b)
	var id uuid.UUID
	copy(id[:], sum[:])
	id[6] = id[6]&0x0f | 0x50 // version 5: name-based, SHA-1
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	return id.String()
}
