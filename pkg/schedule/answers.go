package schedule

import "github.com/agentbus/agentbus/pkg/timefmt"

// Timer is one timer of a workflow instance, as the admin API shows it.
type Timer struct {
	Name string `json:"name"`
	// Schedule is when it fires: "@at {time}", "@every {duration}" or a cron expression.
	Schedule  string       `json:"schedule"`
	TimeZone  string       `json:"timeZone,omitempty"`
	CreatedAt timefmt.Time `json:"createdAt"`
	// ParticipantID is the participant whose thread the timer's message goes to.
	ParticipantID string `json:"participantId"`
	// Type is the message it sends, Chat or Data; Method the Data method, Text a Chat's text.
	Type   string `json:"type"`
	Method string `json:"method,omitempty"`
	Text   string `json:"text,omitempty"`
}

// Timers is the answer of the schedules endpoint.
type Timers struct {
	WorkflowID string  `json:"workflowId"`
	Schedules  []Timer `json:"schedules"`
}
