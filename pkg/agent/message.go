package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/problem"
)

// Message types, as numbered in stored messages (docs/messaging.md#messages-and-threads).
const (
	ChatMessage    = history.Chat
	DataMessage    = history.Data
	FileMessage    = history.File
	WebhookMessage = history.Webhook
)

// Message is an incoming Chat, Data or File message as its handler sees it.
type Message struct {
	// Type is ChatMessage, DataMessage or FileMessage.
	Type history.MessageType
	// Text is the chat text, the Data method name, or a File message's caption or file name.
	Text string
	// Data holds a Data message's parameters (JSON); for other types, the data sent, if any.
	Data json.RawMessage
	// File describes the uploaded file of a File message; nil otherwise.
	File *File
	// Hint is the sender's processing hint.
	Hint string
	// Scope is the message's topic within the thread.
	Scope string
	// RequestID correlates the message and its reply.
	RequestID string
	// ParticipantID is the sender, lowercased.
	ParticipantID string
	// ID is the stored message's id.
	ID string
	// Timer is the name of the instance's timer that sent the message (Instance.Schedule);
	// empty for a message a caller sent.
	Timer string
	// Attempt counts the tries of the request: 1 at first, more after a retry or a redelivery.
	Attempt int

	inst    *Instance
	history historyFunc
	delta   func(text string)
	tools   *toolEnv // nil outside a Host
}

// Delta sends a piece of the reply's text to a caller that asked for the reply streamed (converse
// with Accept: text/event-stream), while the handler produces it, for example a language model's
// tokens. Callers that did not ask get only the final Reply, which should hold the whole text.
// An attempt after the first (Attempt above 1) streams from the beginning: the caller was told to
// drop what earlier attempts sent.
func (m *Message) Delta(text string) {
	if m.delta != nil && text != "" {
		m.delta(text)
	}
}

// Streaming reports whether the caller asked for the reply streamed, so that Delta reaches it.
func (m *Message) Streaming() bool { return m.delta != nil }

// Instance returns the workflow instance the message runs on.
func (m *Message) Instance() *Instance { return m.inst }

// HistoryOptions select a page of a thread's history.
type HistoryOptions struct {
	// Size of the page: default 20, at most 100.
	Size int
	// Before continues from the cursor an earlier page returned; 0 starts at the newest message.
	Before uint64
	// Scope keeps only messages of this topic when not empty.
	Scope string
}

// History returns the conversation's stored messages, newest first, without the message being
// handled, and the cursor of the next (older) page, 0 when there is none.
func (m *Message) History(ctx context.Context, opt HistoryOptions) ([]history.Message, uint64, error) {
	if m.history == nil {
		return nil, 0, errors.New("agent: no history for this message")
	}
	return m.history(ctx, opt)
}

// Reply is a handler's answer to a message: text, data, both, or neither (no reply is sent or
// stored).
type Reply struct {
	Text *string
	// Data is encoded as JSON.
	Data any
}

// Say is a text reply.
func Say(text string) Reply { return Reply{Text: &text} }

// Answer is a data reply.
func Answer(data any) Reply { return Reply{Data: data} }

// SayAndAnswer is a reply with text and data.
func SayAndAnswer(text string, data any) Reply { return Reply{Text: &text, Data: data} }

// NoReply sends and stores nothing.
var NoReply = Reply{}

// Error is an error a handler returns to choose the status and the client-safe message of the
// answer. Any other error becomes a 500 whose detail names no internals.
type Error struct {
	Status  int
	Message string
	// Err is the cause, if any: logged by the host, never shown to the client.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %v", e.Status, e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s", e.Status, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// failure is what the caller gets for a handler's error, a Data handler's or a webhook
// handler's (Fail): the status and client-safe message of an *Error (a status outside 400–599
// becomes 500), a call's failure the handler passed on as it came, and for any other error a
// 500 that names no internals. The cause is logged: at Error for an error agentbus knows nothing
// of, at Warn for an *Error's cause with a 5xx status, at Debug for one with a 4xx status (the
// caller's mistake, answered as such).
func failure(log *slog.Logger, err error) (status int, slug, detail string) {
	status, slug, detail = problem.HandlerError.Status, problem.HandlerError.Slug, "the handler failed"
	var (
		he *Error
		ce *CallError
	)
	switch {
	case errors.As(err, &ce):
		// A call this handler made failed, and the handler passed the failure on.
		status, detail, slug = ce.Status, ce.Message, ce.Slug
	case errors.As(err, &he):
		status, detail = he.Status, he.Message
		if status < 400 || status > 599 {
			status = http.StatusInternalServerError
		}
		if he.Err != nil {
			level := slog.LevelWarn
			if status < 500 {
				level = slog.LevelDebug
			}
			log.Log(context.Background(), level, "handler failed", "status", status, "err", he.Err)
		}
	default:
		log.Error("handler failed", "err", err)
	}
	return status, slug, detail
}

// Errorf returns an *Error with the given status.
func Errorf(status int, format string, args ...any) error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// Handler answers Chat, Data and File messages.
type Handler interface {
	ServeMessage(ctx context.Context, m *Message) (Reply, error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, m *Message) (Reply, error)

// ServeMessage calls f.
func (f HandlerFunc) ServeMessage(ctx context.Context, m *Message) (Reply, error) { return f(ctx, m) }

type messageKey struct{}

// MessageFrom returns the message a handler's context belongs to, for handlers registered with
// Method that get only their parameters; nil outside a handler.
func MessageFrom(ctx context.Context) *Message {
	m, _ := ctx.Value(messageKey{}).(*Message)
	return m
}

// Chat registers the handler of Chat messages. It panics when one is registered already.
func (a *Agent) Chat(h Handler) {
	if a.chat != nil {
		panic(fmt.Sprintf("agent %s: chat handler registered twice", a.name))
	}
	a.chat = h
}

// ChatFunc registers a function as the handler of Chat messages.
func (a *Agent) ChatFunc(f func(ctx context.Context, m *Message) (Reply, error)) {
	a.Chat(HandlerFunc(f))
}

// Data registers the handler of a Data method. Method names match case-insensitively. It panics
// when the method is registered already. Options describe the method to a language model that
// calls it as a tool (ChatWithTools) and to the registry's readers.
//
// A method with a schema (Schema, or the one Method derives) has every call's parameters checked
// against it before the handler runs, wherever the call comes from: a call that does not match
// is answered 400 invalid-method-parameters naming where it fails, and neither the call nor the
// answer is stored; a tool call's result is that failure. Data panics when the schema is not a
// valid JSON Schema (jsonschema.Compile).
func (a *Agent) Data(method string, h Handler, opts ...MethodOption) {
	key := strings.ToLower(method)
	if key == "" || h == nil {
		panic("agent: Data needs a method name and a handler")
	}
	if _, dup := a.data[key]; dup {
		panic(fmt.Sprintf("agent %s: data method %q registered twice", a.name, method))
	}
	dm := &dataMethod{name: method, handler: h}
	for _, o := range opts {
		o(dm)
	}
	if dm.schema != nil {
		dm.params = compiledSchemas.Lazy(a.owner(), dm.schema)
		if !dm.lazy {
			// Compiled once, now, and kept: its first call does not compile it again.
			if err := dm.params.Compile(); err != nil {
				panic(fmt.Sprintf("agent %s: data method %q: %v", a.name, method, err))
			}
		}
	}
	a.data[key] = dm
}

// compiledSchemas holds the compiled schemas of the Data methods of every agent of the process,
// compiled when a method is first called and kept within jsonschema.DefaultCacheBudget, the
// owners holding the most giving way: an agent nobody calls holds none, and one tenant's remote
// agents with large schemas, called in turn, do not push the other tenants' out.
var compiledSchemas = jsonschema.NewCache(jsonschema.DefaultCacheBudget)

// DataFunc registers a function as the handler of a Data method.
func (a *Agent) DataFunc(method string, f func(ctx context.Context, m *Message) (Reply, error), opts ...MethodOption) {
	a.Data(method, HandlerFunc(f), opts...)
}

// dataMethod is a registered Data method.
type dataMethod struct {
	name        string // as registered
	handler     Handler
	description string
	schema      json.RawMessage // nil: any object
	// lazy is whether Data leaves schema unchecked (LazySchema).
	lazy bool
	// params checks the parameters against schema; nil when there is none.
	params *jsonschema.Lazy
}

// checkParams refuses parameters (JSON, possibly empty) that do not match the method's schema.
// A schema that does not compile (LazySchema) checks nothing; the first call logs why.
func (dm *dataMethod) checkParams(log *slog.Logger, params []byte) error {
	err := dm.params.Validate(params)
	if ce, ok := errors.AsType[*jsonschema.CompileError](err); ok {
		log.Warn("the schema of a Data method does not compile; its calls are not checked", "method", dm.name, "err", ce.Err)
		return nil
	}
	return err
}

// MethodOption describes a Data method.
type MethodOption func(*dataMethod)

// Describe gives a Data method a description: what it does and when to use it, for a language
// model deciding whether to call it as a tool.
func Describe(description string) MethodOption {
	return func(m *dataMethod) { m.description = description }
}

// Schema sets the JSON Schema of a Data method's parameters object, overriding the one Method
// derives from its parameter type; calls are checked against it (see Agent.Data). It panics
// unless schema is a JSON object, and Data panics unless it is a valid JSON Schema.
func Schema(schema json.RawMessage) MethodOption {
	var obj map[string]any
	if err := json.Unmarshal(schema, &obj); err != nil || obj == nil {
		panic(fmt.Sprintf("agent: Schema needs a JSON Schema object, got %.40q", schema))
	}
	schema = slices.Clone(schema)
	return func(m *dataMethod) { m.schema = schema }
}

// LazySchema is Schema for a schema the program did not write, such as a remote agent's
// registration (which compiled it already): Data neither checks nor compiles it, and it is
// compiled when the method is first called. A schema that is not a JSON object or does not
// compile then leaves the method's calls unchecked, and the host logs why.
func LazySchema(schema json.RawMessage) MethodOption {
	return func(m *dataMethod) { m.schema, m.lazy = schema, true }
}

// File registers the handler of File messages (uploads). It panics when one is registered
// already.
func (a *Agent) File(h Handler) {
	if a.file != nil {
		panic(fmt.Sprintf("agent %s: file handler registered twice", a.name))
	}
	a.file = h
}

// FileFunc registers a function as the handler of File messages.
func (a *Agent) FileFunc(f func(ctx context.Context, m *Message) (Reply, error)) {
	a.File(HandlerFunc(f))
}

// Method registers a typed Data method: the message's parameters are checked against the
// method's schema (see Agent.Data) and decoded into In (parameters that match the schema but not
// In, such as 1.5 for an int field, are answered with 400 handler-error and the decoding error),
// and fn's Out is the reply's data. The Message is available through MessageFrom(ctx).
//
// The parameters' JSON Schema, which a language model sees when the method is offered as a tool,
// is derived from In as package jsonschema describes (json tags name the properties; a field is
// optional when it is a pointer or tagged omitempty); Schema overrides it. Method panics when In
// is a type JSON cannot decode into and no Schema is given.
func Method[In, Out any](a *Agent, name string, fn func(ctx context.Context, in In) (Out, error), opts ...MethodOption) {
	var probe dataMethod
	for _, o := range opts {
		o(&probe)
	}
	if probe.schema == nil {
		schema, err := jsonschema.JSON(reflect.TypeFor[In]())
		if err != nil {
			panic(fmt.Sprintf("agent %s: method %q: %v; give its schema with agent.Schema", a.name, name, err))
		}
		opts = append([]MethodOption{func(m *dataMethod) { m.schema = schema }}, opts...)
	}
	a.Data(name, HandlerFunc(func(ctx context.Context, m *Message) (Reply, error) {
		var in In
		if len(m.Data) > 0 && string(m.Data) != "null" {
			dec := json.NewDecoder(strings.NewReader(string(m.Data)))
			if err := dec.Decode(&in); err != nil {
				return NoReply, &Error{Status: http.StatusBadRequest, Message: "bad parameters for " + name + ": " + problem.JSONDetail(err), Err: err}
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return NoReply, err
		}
		return Answer(out), nil
	}), opts...)
}

// anyObject is the schema of a method that gave none.
var anyObject = json.RawMessage(`{"type":"object"}`)

// inputSchema is the method's parameters schema, any object when it has none.
func (m *dataMethod) inputSchema() json.RawMessage {
	if m.schema == nil {
		return slices.Clone(anyObject)
	}
	return m.schema
}
