package inspect

import (
	"encoding/json"

	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// InstanceView is one instance as the inspector shows it.
type InstanceView struct {
	// Item holds what the instance listing shows of it.
	instance.Item
	AgentName   string        `json:"agentName"`
	CompletedAt *timefmt.Time `json:"completedAt,omitempty"`
	// State is the agent's state of the current run, null for none.
	State       json.RawMessage       `json:"state"`
	EarlierRuns []instance.RunSummary `json:"earlierRuns"`
	// Partition is the inbox partition of the instance's requests; Host the live workflow host
	// that owns it now, left out when no live host runs the agent.
	Partition      int                 `json:"partition"`
	Host           string              `json:"host,omitempty"`
	DeadLetters    []deadletter.Letter `json:"deadLetters"`
	Schedules      []schedule.Timer    `json:"schedules"`
	RecentRequests []RecentRequest     `json:"recentRequests"`
	// Queued are the requests waiting for the instance, and why (the ingress's queued.go).
	Queued []Waiting `json:"queued"`
	// Waits are the instance's requests parked until an event (agent.Wait, agent.Sleep), one per
	// conversation that waits, by participant.
	Waits []Wait `json:"waits"`
}

// RecentRequest is one request an instance handled, as its thread's history holds it: the
// incoming message and the answer to it.
type RecentRequest struct {
	RequestID     string `json:"requestId"`
	ParticipantID string `json:"participantId"`
	// Type is the incoming message's type (Chat, Data, File, Webhook); Method a Data or webhook
	// method; Timer the timer that sent it.
	Type   string `json:"type"`
	Method string `json:"method,omitempty"`
	Timer  string `json:"timer,omitempty"`
	// Status is the answer's status (a webhook handler's, a failure's, else 200), left out
	// while there is no answer.
	Status     int           `json:"status,omitempty"`
	ReceivedAt timefmt.Time  `json:"receivedAt"`
	AnsweredAt *timefmt.Time `json:"answeredAt,omitempty"`
	// DurationMs is the time from the incoming message to the answer.
	DurationMs *int64 `json:"durationMs,omitempty"`
	// Pos is the incoming message's position in the history stream, which orders requests
	// received within one millisecond.
	Pos uint64 `json:"-"`
}

// Waiting is a request a workflow host holds for an instance, and what it does or waits
// for; the queue route (InstanceQueue) tells more: ages, times, the requests not delivered yet.
type Waiting struct {
	RequestID     string `json:"requestId"`
	ParticipantID string `json:"participantId"`
	Type          string `json:"type"`
	Method        string `json:"method,omitempty"`
	// Reason is the request's state (running, queued, held) and, after a colon, why it waits
	// (docs/hosts-inspection.md).
	Reason string `json:"reason"`
}

// Wait is a request of an instance parked until an event ends its wait (agent.Wait): the
// participant's next Chat message, a Data call of one of Methods, a signal, or the deadline. The
// conversation's later requests queue behind it.
type Wait struct {
	ParticipantID string `json:"participantId"`
	RequestID     string `json:"requestId"`
	// Type is the waiting request's type (Chat, Data, File, Webhook); Name the wait's name
	// ("sleep" for agent.Sleep).
	Type string `json:"type"`
	Name string `json:"name"`
	// Chat, Methods and Signals say what ends the wait besides its deadline: the participant's
	// next Chat message, a Data call of one of Methods (in lower case, matched whatever its
	// case), a signal of one of Signals.
	Chat    bool     `json:"chat"`
	Methods []string `json:"methods"`
	Signals []string `json:"signals"`
	// Deadline is when the wait ends if nothing ended it before; Since when it began.
	Deadline *timefmt.Time `json:"deadline,omitempty"`
	Since    timefmt.Time  `json:"since"`
	// Held is how many later requests of the conversation are queued behind it.
	Held int `json:"held"`
	// ID names the wait in the waits stream; not shown.
	ID string `json:"-"`
}
