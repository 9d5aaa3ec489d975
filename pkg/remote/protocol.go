package remote

import (
	"encoding/json"

	"github.com/agentbus/agentbus/pkg/timefmt"
)

// ProtocolVersion is the version of the protocol (docs/remote-agents.md) this package speaks.
const ProtocolVersion = 1

// HeaderProtocol names the protocol version on every request to an agent.
const HeaderProtocol = "Agentbus-Protocol"

// Request is what a host POSTs to a remote agent for one request.
type Request struct {
	Protocol     int    `json:"protocol"`
	Type         string `json:"type"`
	Agent        string `json:"agent"`
	TenantID     string `json:"tenantId"`
	WorkflowID   string `json:"workflowId"`
	WorkflowType string `json:"workflowType"`
	Activation   string `json:"activation"`
	RunID        string `json:"runId"`
	// HostID names the workflow host serving the instance now.
	HostID        string          `json:"hostId"`
	ParticipantID string          `json:"participantId"`
	RequestID     string          `json:"requestId"`
	Attempt       int             `json:"attempt"`
	Deadline      timefmt.Time    `json:"deadline"`
	Stream        bool            `json:"stream"`
	State         json.RawMessage `json:"state"`
	Message       *Message        `json:"message"`
	Webhook       *Webhook        `json:"webhook"`
	// Journal is what the request's steps recorded so far, in order (docs/remote-agents.md,
	// "Steps and waits"); empty on a first send.
	Journal []JournalEntry `json:"journal"`
}

// JournalEntry is a recorded step: its name, and its result or its error. A wait's entry has
// the event that ended it for its result.
type JournalEntry struct {
	Name   string          `json:"name"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *StepError      `json:"error,omitempty"`
}

// StepError is a step's recorded failure.
type StepError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// Step is a step an agent ran, to record: its result, or its error.
type Step struct {
	Name   string          `json:"name"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *StepError      `json:"error,omitempty"`
}

// Wait is what an agent's request waits for (agent.For): the participant's next Chat message,
// a Data call of one of Methods, a signal of one of Signals, or TimeoutMs.
type Wait struct {
	Name      string   `json:"name"`
	Chat      bool     `json:"chat,omitempty"`
	Methods   []string `json:"methods,omitempty"`
	Signals   []string `json:"signals,omitempty"`
	TimeoutMs int64    `json:"timeoutMs,omitempty"`
}

// Message is a Chat, Data or File request's message.
type Message struct {
	Text   string          `json:"text"`
	Method string          `json:"method,omitempty"`
	Data   json.RawMessage `json:"data"`
	Scope  string          `json:"scope"`
	Hint   string          `json:"hint"`
	Timer  string          `json:"timer"`
	File   *File           `json:"file,omitempty"`
}

// File describes a File message's upload.
type File struct {
	Name        string `json:"name"`
	ContentType string `json:"contentType"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	// Invalid: the content sent was not valid base64, so there is none. A file without
	// content that is not Invalid was sent empty.
	Invalid bool `json:"invalid,omitempty"`
	// Content is the file's bytes (base64 in JSON) when it is at most 4 MiB; left out for a
	// larger one.
	Content []byte `json:"content,omitempty"`
}

// Webhook is a webhook call.
type Webhook struct {
	Method      string            `json:"method"`
	Params      map[string]string `json:"params"`
	Headers     map[string]string `json:"headers"`
	ContentType string            `json:"contentType"`
	// Body is the raw body; it is base64 in JSON.
	Body []byte `json:"body"`
}

// Answer is what a remote agent answers; every field is optional.
type Answer struct {
	Reply        *ReplyBody      `json:"reply,omitempty"`
	Response     *Response       `json:"response,omitempty"`
	State        json.RawMessage `json:"state,omitempty"`
	Posts        []Post          `json:"posts,omitempty"`
	Timers       []Timer         `json:"timers,omitempty"`
	CancelTimers []string        `json:"cancelTimers,omitempty"`
	Tells        []Tell          `json:"tells,omitempty"`
	// Complete completes the instance once the request is answered: its next request starts a
	// new run with fresh state.
	Complete bool   `json:"complete,omitempty"`
	Error    *Error `json:"error,omitempty"`
	// Step asks the host to record a step and send the request again with it in the journal;
	// Wait, to park the request until an event. Either makes the answer's other fields ignored.
	Step *Step `json:"step,omitempty"`
	Wait *Wait `json:"wait,omitempty"`
	// Call and History ask the host for a step whose work it does itself: an Agent2Agent call,
	// a read of the request's thread; the request is sent again with its outcome in the journal.
	Call    *Call        `json:"call,omitempty"`
	History *HistoryRead `json:"history,omitempty"`
}

// asksStep reports whether the answer asks the host for a step whose outcome goes in the journal
// (Step, Call, History): the request is then sent again with it.
func (a *Answer) asksStep() bool { return a.Step != nil || a.Call != nil || a.History != nil }

// asksStepOrWait reports whether the answer asks for a step or a wait rather than being final.
func (a *Answer) asksStepOrWait() bool { return a.asksStep() || a.Wait != nil }

// Call is an Agent2Agent call the host makes as a step (Name): a Data method of an instance of
// the tenant, named as a Tell names one. The journal's entry is the callee's result (its reply's
// data), or its failure.
type Call struct {
	Name         string          `json:"name"`
	Agent        string          `json:"agent,omitempty"`
	WorkflowType string          `json:"workflowType,omitempty"`
	Activation   string          `json:"activation,omitempty"`
	WorkflowID   string          `json:"workflowId,omitempty"`
	Method       string          `json:"method"`
	Params       json.RawMessage `json:"params,omitempty"`
}

// HistoryRead is a read of the request's thread the host makes as a step (Name): the newest
// Size messages (1-100, default 20) before the request's own, of Scope when given. The journal's
// entry is {"messages": [...]}, newest first.
type HistoryRead struct {
	Name  string `json:"name"`
	Size  int    `json:"size,omitempty"`
	Scope string `json:"scope,omitempty"`
}

// ReplyBody is a Chat, Data or File request's reply.
type ReplyBody struct {
	Text *string         `json:"text,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Response is a webhook call's answer.
type Response struct {
	Status      int    `json:"status,omitempty"`
	ContentType string `json:"contentType,omitempty"`
	Body        string `json:"body,omitempty"`
	BodyBase64  []byte `json:"bodyBase64,omitempty"`
}

// Post is an Agent2User message.
type Post struct {
	ParticipantID string          `json:"participantId,omitempty"`
	Text          string          `json:"text,omitempty"`
	Data          json.RawMessage `json:"data,omitempty"`
	Scope         string          `json:"scope,omitempty"`
	Hint          string          `json:"hint,omitempty"`
}

// Timer is a timer to set.
type Timer struct {
	Name     string          `json:"name"`
	At       *timefmt.Time   `json:"at,omitempty"`
	AfterMs  int64           `json:"afterMs,omitempty"`
	Every    string          `json:"every,omitempty"`
	Cron     string          `json:"cron,omitempty"`
	TimeZone string          `json:"timeZone,omitempty"`
	Method   string          `json:"method,omitempty"`
	Text     string          `json:"text,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	// ParticipantID is whose conversation gets the timer's message; empty: the request's.
	ParticipantID string `json:"participantId,omitempty"`
}

// Tell is an Agent2Agent message.
type Tell struct {
	Agent        string          `json:"agent,omitempty"`
	WorkflowType string          `json:"workflowType,omitempty"`
	Activation   string          `json:"activation,omitempty"`
	WorkflowID   string          `json:"workflowId,omitempty"`
	Type         string          `json:"type,omitempty"`
	Method       string          `json:"method,omitempty"`
	Text         string          `json:"text,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	Scope        string          `json:"scope,omitempty"`
	Hint         string          `json:"hint,omitempty"`
}

// Error is a request the agent failed.
type Error struct {
	Status  int    `json:"status,omitempty"`
	Message string `json:"message"`
	Retry   bool   `json:"retry,omitempty"`
}

// delta is one line of a streamed answer before the last.
type delta struct {
	Delta *string `json:"delta"`
}
