// Package inspect tells what the workflow hosts hold and why a request waits: for one workflow
// instance, the requests queued for each of its conversations, in order, with the state of each
// (running since when, queued, or held back and why), and what the inbox stores for it that no
// host has taken yet; for the deployment, every live host with its agents, partitions and
// requests in flight, and each agent's backlog per partition. It also cuts a held request's retry
// backoff short.
//
// Each workflow host answers on its own core NATS subject (subject.Inspect) from what it holds
// in memory; the rest is read from the inbox stream, its partition consumers and the hosts'
// heartbeats. Nothing here changes a request but the retry that is asked for.
package inspect

import "github.com/agentbus/agentbus/pkg/timefmt"

// Operations of a Query.
const (
	// OpHeld asks what the host holds: for an instance, or for the whole host.
	OpHeld = "held"
	// OpRetry asks the host to run a request waiting in retry backoff at once.
	OpRetry = "retry"
)

// Query is what a host is asked on its inspect subject, as JSON.
type Query struct {
	Op string `json:"op"`
	// Tenant and WorkflowID name the instance. Without WorkflowID, OpHeld is about the whole
	// host: every conversation it holds requests of, or those of Tenant when it is set.
	Tenant     string `json:"tenant,omitempty"`
	WorkflowID string `json:"workflowId,omitempty"`
	// RequestID names the request OpRetry runs now.
	RequestID string `json:"requestId,omitempty"`
}

// Bounds of a host's answer: conversations listed, requests listed per conversation, and
// requests listed in all, which keeps an answer well within a NATS message (1 MiB by default).
const (
	MaxConversations  = 200
	MaxRequests       = 50
	MaxAnswerRequests = 1000
)

// States of a request a host holds.
const (
	// StateRunning: its handler runs (Since says since when).
	StateRunning = "running"
	// StateHeld: it was started, or is next, but waits for something (Reason).
	StateHeld = "held"
	// StateQueued: it waits for its turn (Reason).
	StateQueued = "queued"
)

// Reasons a request waits.
const (
	// ReasonEarlierElsewhere: the conversation's earlier request (EarlierSequence) is still
	// unacknowledged in the inbox, held by the partition's previous owner (running there, or to
	// be redelivered): docs/architecture.md, "Order across a takeover".
	ReasonEarlierElsewhere = "earlier-request-elsewhere"
	// ReasonRetryBackoff: its handler failed with a retryable error; it runs again at Until.
	ReasonRetryBackoff = "retry-backoff"
	// ReasonWaitingForCall: its handler waits for the answer of an Agent2Agent call (Call).
	ReasonWaitingForCall = "waiting-for-call"
	// ReasonBehind: an earlier request of its conversation (EarlierSequence) is ahead of it.
	ReasonBehind = "behind-earlier-request"
	// ReasonNext: it is next and about to start.
	ReasonNext = "next"
	// ReasonWaitingForSlot: it is next, and waits for a handler slot of its agent on the host
	// (agent.HostConfig.MaxConcurrent, agent.MaxConcurrent, a remote agent's maxConcurrent),
	// which go to the tenants in turn.
	ReasonWaitingForSlot = "waiting-for-slot"
)

// Held is a host's answer to OpHeld.
type Held struct {
	Host string `json:"host"`
	// At is the host's clock when it answered.
	At timefmt.Time `json:"at"`
	// InFlight counts every request the host holds, queued or running, of any tenant; Running
	// those whose handler runs (or waits in it: retry backoff, a call).
	InFlight int `json:"inFlight"`
	Running  int `json:"running"`
	// Conversations are those asked about that the host holds requests of, by stored subject.
	Conversations []Conversation `json:"conversations"`
	// Truncated: there were more conversations than MaxConversations, or more requests than
	// MaxAnswerRequests (the conversations listed last then list fewer than MaxRequests).
	Truncated bool `json:"truncated,omitempty"`
	// Error is set when the query could not be answered.
	Error string `json:"error,omitempty"`
}

// Conversation is one conversation (workflow instance and participant) a host holds requests of.
type Conversation struct {
	Agent         string `json:"agent"`
	Partition     int    `json:"partition"`
	Tenant        string `json:"tenant"`
	WorkflowID    string `json:"workflowId"`
	ParticipantID string `json:"participantId"`
	// Count is how many requests of it the host holds; Requests lists the first MaxRequests,
	// in inbox order.
	Count    int       `json:"count"`
	Requests []Request `json:"requests"`
}

// Request is one request a host holds, and its state.
type Request struct {
	// Sequence is the request's inbox stream sequence.
	Sequence  uint64 `json:"sequence"`
	RequestID string `json:"requestId"`
	// Type is Chat, Data, File, Webhook or Post; Method a Data or webhook method.
	Type   string `json:"type"`
	Method string `json:"method,omitempty"`
	// StoredAt is when the inbox stored it (the NATS server's clock).
	StoredAt timefmt.Time `json:"storedAt"`
	// Attempt is the attempt running or next: deliveries to hosts and retries counted.
	Attempt int    `json:"attempt"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	// Since: running since, or waiting for Call since (the host's clock).
	Since *timefmt.Time `json:"since,omitempty"`
	// Until: the end of a retry backoff (the host's clock).
	Until *timefmt.Time `json:"until,omitempty"`
	// EarlierSequence is the request it waits for (ReasonEarlierElsewhere, ReasonBehind).
	EarlierSequence uint64 `json:"earlierSequence,omitempty"`
	Call            *Call  `json:"call,omitempty"`
}

// Call is an Agent2Agent call a handler waits for: the callee's instance (of the same tenant),
// its Data method and since when.
type Call struct {
	Agent      string       `json:"agent"`
	WorkflowID string       `json:"workflowId"`
	Method     string       `json:"method"`
	Since      timefmt.Time `json:"since"`
}

// Outcomes of OpRetry.
const (
	// RetryStarted: the request was in retry backoff and runs now.
	RetryStarted = "retrying"
	// RetryNotInBackoff: the host holds the request, but it is not in retry backoff (State and
	// Reason say what it does).
	RetryNotInBackoff = "not-in-backoff"
	// RetryNotHeld: the host holds no such request of the instance.
	RetryNotHeld = "not-held"
)

// Retried is a host's answer to OpRetry.
type Retried struct {
	Host    string `json:"host"`
	Outcome string `json:"outcome"`
	// Request is the request as it stood before the retry (with Outcome RetryStarted or
	// RetryNotInBackoff).
	Request *Request `json:"request,omitempty"`
	Error   string   `json:"error,omitempty"`
}
