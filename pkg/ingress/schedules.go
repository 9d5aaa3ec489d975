package ingress

import (
	"net/http"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

func scheduleOf(sch schedule.Schedule) schedule.Timer {
	req := sch.Request
	k := msgkind.Of(req.GetKind())
	a := schedule.Timer{Name: sch.Name, Schedule: sch.Pattern, TimeZone: sch.TimeZone, CreatedAt: timefmt.Of(sch.Created),
		ParticipantID: req.GetParticipantId(), Type: k.Name, Text: req.GetText()}
	if k.Method {
		a.Method, a.Text = req.GetMethod(), ""
	}
	return a
}

// schedules returns the store of the agents' timers.
func (s *Server) schedules() *schedule.Store {
	return schedule.NewStore(s.js, s.res).Meter(s.storage.meter)
}

// scheduleInstance identifies the caller of a schedules endpoint and the workflow instance the
// query names. On failure it has written the problem and returns false.
func (s *Server) scheduleInstance(w http.ResponseWriter, r *http.Request) (caller, ident.Workflow, bool) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return c, ident.Workflow{}, false
	}
	query, p := readQuery(r)
	var wf ident.Workflow
	if p == nil {
		wf, p = workflowOf(query, c.tenant)
	}
	if p != nil {
		problem.Write(w, *p)
		return c, wf, false
	}
	return c, wf, true
}

// listSchedules serves GET /api/v1/admin/tenants/{tenantId}/schedules: the timers of one
// workflow instance (workflowId, or agentName and activationName), by name.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	c, wf, ok := s.scheduleInstance(w, r)
	if !ok {
		return
	}
	list, err := s.schedules().List(r.Context(), c.tenant, wf.ID())
	if err != nil {
		s.storeFailed(w, "listing schedules", err)
		return
	}
	ans := schedule.Timers{WorkflowID: wf.ID(), Schedules: make([]schedule.Timer, 0, len(list))}
	for _, sch := range list {
		ans.Schedules = append(ans.Schedules, scheduleOf(sch))
	}
	writeJSON(w, http.StatusOK, ans)
}

// cancelSchedule serves DELETE /api/v1/admin/tenants/{tenantId}/schedules/{name}: it cancels
// the workflow instance's timer of that name, as the agent's own CancelTimer does.
func (s *Server) cancelSchedule(w http.ResponseWriter, r *http.Request) {
	c, wf, ok := s.scheduleInstance(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if _, ok := subject.WaitOfTimer(name); ok {
		// The deadline of a waiting request: without it the wait could last for ever.
		problem.InvalidPath.Write(w, "this timer is the deadline of a waiting request; it ends with the wait")
		return
	}
	found, err := s.schedules().Cancel(r.Context(), c.tenant, wf.ID(), name)
	switch {
	case err != nil:
		s.storeFailed(w, "cancelling schedule", err)
	case !found:
		problem.ScheduleNotFound.Write(w, "the instance has no timer of this name")
	default:
		s.log.Info("schedule cancelled", "tenant", c.tenant, "workflowId", wf.ID(), "schedule", name, "by", c.key.ID)
		w.WriteHeader(http.StatusNoContent)
	}
}
