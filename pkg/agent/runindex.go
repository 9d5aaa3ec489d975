package agent

import (
	"context"
	"strings"

	"github.com/agentbus/agentbus/pkg/instance"
)

// indexRun appends the run rec is about to start to the run index (instance.Index), before the
// record is written: an instance's listing then never misses a started run. A run whose record
// is not written after all (its host failed, or another host started the instance first) leaves
// an entry that listings skip, since it is not the instance's current run.
func (h *Host) indexRun(ctx context.Context, l *liveInstance, rec instance.Record) error {
	if err := l.mayAct(ctx); err != nil {
		return err
	}
	// A workflow id is {tenantId}:{agentName}:{workflowType}:{activationName}.
	parts := strings.SplitN(rec.WorkflowID, ":", 3)
	agent := ""
	if len(parts) == 3 {
		agent = parts[1]
	}
	return h.runs.Add(ctx, rec.Tenant, agent, instance.Entry{WorkflowID: rec.WorkflowID, RunID: rec.RunID, StartedAt: rec.StartedAt})
}
