package instance

import "github.com/agentbus/agentbus/pkg/timefmt"

// Item is one instance of an agent's listing.
type Item struct {
	WorkflowID   string       `json:"workflowId"`
	WorkflowType string       `json:"workflowType"`
	Activation   string       `json:"activation"`
	RunID        string       `json:"runId"`
	Status       string       `json:"status"`
	StartedAt    timefmt.Time `json:"startedAt"`
	LastActiveAt timefmt.Time `json:"lastActiveAt"`
	Events       int64        `json:"events"`
}

// Page is the answer of the listing. Next, when set, is the cursor of the next page.
type Page struct {
	Instances []Item `json:"instances"`
	Next      string `json:"next,omitempty"`
}

// CompletedRun names the run an operator completed.
type CompletedRun struct {
	WorkflowID  string       `json:"workflowId"`
	RunID       string       `json:"runId"`
	Status      string       `json:"status"`
	CompletedAt timefmt.Time `json:"completedAt"`
}
