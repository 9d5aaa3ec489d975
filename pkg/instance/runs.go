package instance

import (
	"time"

	"github.com/agentbus/agentbus/pkg/timefmt"
)

// MaxEarlierRuns is how many earlier runs an instance record keeps (Record.Runs).
const MaxEarlierRuns = 10

// Idle is the status shown for a running instance that has had no activity for longer than the
// idle timeout: it counts as completed, and its next message starts a new run (Record.IdleFor).
// It is never stored.
const Idle Status = "idle"

// RunSummary is an earlier run of an instance.
type RunSummary struct {
	RunID       string       `json:"runId"`
	StartedAt   timefmt.Time `json:"startedAt"`
	CompletedAt timefmt.Time `json:"completedAt"`
	Events      int64        `json:"events"`
}

// Summary is the summary of r's run, ended at ended unless r says when it completed.
func (r Record) Summary(ended time.Time) RunSummary {
	if r.CompletedAt != nil {
		ended = *r.CompletedAt
	}
	return RunSummary{RunID: r.RunID, StartedAt: timefmt.Of(r.StartedAt), CompletedAt: timefmt.Of(ended.UTC()), Events: r.Events}
}

// EarlierRuns returns the earlier runs of the run that replaces r's: r's own run first (ended at
// ended unless it completed), then those r keeps, at most MaxEarlierRuns in all. A record of no
// run (RunID empty) adds nothing.
func (r Record) EarlierRuns(ended time.Time) []RunSummary {
	if r.RunID == "" {
		return r.Runs
	}
	out := make([]RunSummary, 0, min(len(r.Runs)+1, MaxEarlierRuns))
	out = append(out, r.Summary(ended))
	for _, s := range r.Runs {
		if len(out) == MaxEarlierRuns {
			break
		}
		out = append(out, s)
	}
	return out
}

// StatusAt is the status r shows at now: Idle for a running instance idle for longer than
// timeout (Record.IdleFor), else its stored status.
func (r Record) StatusAt(timeout time.Duration, now time.Time) Status {
	if r.IdleFor(timeout, now) {
		return Idle
	}
	return r.Status
}
