package ingress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// Paths of the instance inspector (docs/inspector.md).
const (
	agentInstancesPath = tenantAgentsPath + "/{agentName}/instances"
	instancesPath      = tenantsPath + "/{tenantId}/instances"
	backfillPath       = "/api/v1/admin/instances/backfill"
)

// instanceDeadLetters bounds the dead letters the inspector shows of one instance.
const instanceDeadLetters = 20

// backfillBudget is how long one backfill request indexes before it answers; the client calls
// again to go on.
const backfillBudget = 20 * time.Second

// idleTimeout is how long an instance of the agent may go without a message before the
// inspector shows it idle: the agent's own timeout (agent.IdleAfter), as its hosts registered
// it, else the deployment's.
func (s *Server) idleTimeout(agent string) time.Duration {
	reg, _ := s.dir.Agent(agent)
	return reg.IdleTimeout(s.cfg.IdleTimeout)
}

// listInstances serves GET /api/v1/admin/tenants/{tenantId}/agents/{agentName}/instances: the
// agent's instances in the tenant, newest run first, from the run index.
func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	agent := r.PathValue("agentName")
	if err := ident.ValidName(agent); err != nil {
		problem.InvalidPath.Write(w, "agentName "+err.Error())
		return
	}
	opt, p := instanceListOptions(r)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	opt.IdleTimeout = s.idleTimeout(agent)
	items, next, err := s.runIndex().List(r.Context(), s.instanceStore(), c.tenant, agent, opt)
	switch {
	case errors.Is(err, instance.ErrBadCursor):
		problem.InvalidCursor.Write(w, "cursor is not the next cursor of a page of this agent's instances")
		return
	case err != nil:
		s.storeFailed(w, "listing instances", err)
		return
	}
	ans := instance.Page{Instances: make([]instance.Item, 0, len(items))}
	if next != (instance.Cursor{}) {
		ans.Next = next.String()
	}
	for _, it := range items {
		wf, _ := ident.ParseWorkflowID(it.Entry.WorkflowID)
		ans.Instances = append(ans.Instances, instanceItem(it.Record, wf, it.Status))
	}
	writeJSON(w, http.StatusOK, ans)
}

// instanceItem is what the listing, and the top of the instance view, show of an instance.
func instanceItem(rec instance.Record, wf ident.Workflow, status instance.Status) instance.Item {
	return instance.Item{WorkflowID: rec.WorkflowID, WorkflowType: wf.WorkflowType, Activation: wf.Activation,
		RunID: rec.RunID, Status: string(status), StartedAt: timefmt.Of(rec.StartedAt),
		LastActiveAt: timefmt.Of(rec.LastActiveAt), Events: rec.Events}
}

// instanceListOptions reads the listing's query: status, prefix, activeBefore, activeAfter,
// limit and cursor, each optional.
func instanceListOptions(r *http.Request) (instance.ListOptions, *problem.Problem) {
	bad := func(detail string) (instance.ListOptions, *problem.Problem) {
		return instance.ListOptions{}, problem.InvalidQuery.New(detail)
	}
	q, p := readQuery(r)
	if p != nil {
		return instance.ListOptions{}, p
	}
	var opt instance.ListOptions
	switch v := instance.Status(q.Get("status")); v {
	case "", instance.Running, instance.Completed, instance.Idle:
		opt.Status = v
	default:
		return bad("status must be running, idle or completed")
	}
	opt.Prefix = q.Get("prefix")
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"activeBefore", &opt.ActiveBefore}, {"activeAfter", &opt.ActiveAfter}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return bad(t.name + " must be an RFC 3339 time, such as 2026-11-26T09:00:00Z")
		}
		*t.dst = at
	}
	opt.Limit = instance.DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > instance.MaxListLimit {
			return bad(fmt.Sprintf("limit must be a whole number from 1 to %d", instance.MaxListLimit))
		}
		opt.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		cur, err := instance.ParseCursor(v)
		if err != nil {
			return instance.ListOptions{}, problem.InvalidCursor.New("cursor is not the next cursor of a page of this agent's instances")
		}
		opt.Before = cur
	}
	return opt, nil
}

// instanceTarget authenticates a call about one instance and reads it: the path's workflowId,
// a full workflow id or the short forms the API takes elsewhere (Agent, Agent:WorkflowType).
// Another tenant's instance is not found, exactly like a missing one. On failure it has written
// the problem and returns false.
func (s *Server) instanceTarget(w http.ResponseWriter, r *http.Request) (caller, ident.Workflow, instance.Record, bool) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return c, ident.Workflow{}, instance.Record{}, false
	}
	wf, err := ident.Resolve(r.PathValue("workflowId"), c.tenant)
	if err != nil {
		problem.InvalidWorkflow.Write(w, err.Error())
		return c, wf, instance.Record{}, false
	}
	notFound := func() (caller, ident.Workflow, instance.Record, bool) {
		problem.InstanceNotFound.Write(w, "the tenant has no instance of this workflow id")
		return c, wf, instance.Record{}, false
	}
	if wf.Tenant != c.tenant {
		return notFound()
	}
	rec, err := s.instanceStore().Get(r.Context(), c.tenant, wf.ID())
	switch {
	case errors.Is(err, instance.ErrNotFound):
		return notFound()
	case err != nil:
		s.storeFailed(w, "reading instance", err)
		return c, wf, rec, false
	}
	return c, wf, rec, true
}

// showInstance serves GET /api/v1/admin/tenants/{tenantId}/instances/{workflowId}.
func (s *Server) showInstance(w http.ResponseWriter, r *http.Request) {
	c, wf, rec, ok := s.instanceTarget(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	ans := inspect.InstanceView{
		Item:      instanceItem(rec, wf, rec.StatusAt(s.idleTimeout(wf.Agent), time.Now())),
		AgentName: wf.Agent, CompletedAt: timefmt.OfPtr(rec.CompletedAt), State: rec.State,
		EarlierRuns: rec.Runs, Waits: waitsOf(rec),
	}
	if ans.EarlierRuns == nil {
		ans.EarlierRuns = []instance.RunSummary{}
	}
	var err error
	if ans.Partition, ans.Host, err = s.inspector().Placement(ctx, wf); err != nil {
		s.storeFailed(w, "reading instance", err)
		return
	}

	var (
		wg   sync.WaitGroup
		errs [5]error
	)
	wg.Go(func() {
		ans.DeadLetters, _, errs[0] = s.dead.List(ctx, c.tenant, deadletter.ListOptions{Agent: wf.Agent, WorkflowID: wf.ID(), Limit: instanceDeadLetters})
	})
	wg.Go(func() {
		list, err := s.schedules().List(ctx, c.tenant, wf.ID())
		ans.Schedules, errs[1] = make([]schedule.Timer, 0, len(list)), err
		for _, sch := range list {
			ans.Schedules = append(ans.Schedules, scheduleOf(sch))
		}
	})
	wg.Go(func() { ans.RecentRequests, errs[2] = s.recentRequests(ctx, c.tenant, wf.ID()) })
	wg.Go(func() { ans.Queued, errs[3] = s.queuedRequests(ctx, c.tenant, wf) })
	wg.Go(func() { errs[4] = s.countHeld(ctx, c.tenant, ans.Waits) })
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		s.storeFailed(w, "reading instance", err)
		return
	}
	if ans.DeadLetters == nil {
		ans.DeadLetters = []deadletter.Letter{}
	}
	if ans.Queued == nil {
		ans.Queued = []inspect.Waiting{}
	}
	writeJSON(w, http.StatusOK, ans)
}

// countHeld sets how many requests each wait holds behind it: the messages of its subject in the
// waits stream but the first, the waiting request's own. One read of the stream a wait.
func (s *Server) countHeld(ctx context.Context, tenant string, waits []inspect.Wait) error {
	for i := range waits {
		subj := subject.Wait(tenant, waits[i].ID)
		info, err := s.res.Waits.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return fmt.Errorf("counting the requests held behind a wait: %w", err)
		}
		if n := info.State.Subjects[subj]; n > 1 {
			waits[i].Held = int(n - 1)
		}
	}
	return nil
}

// waitsOf is the instance's waiting requests (Record.Waits), by participant.
func waitsOf(rec instance.Record) []inspect.Wait {
	out := make([]inspect.Wait, 0, len(rec.Waits))
	for _, p := range slices.Sorted(maps.Keys(rec.Waits)) {
		w := rec.Waits[p]
		if w == nil {
			continue
		}
		out = append(out, inspect.Wait{ID: w.ID, ParticipantID: p, RequestID: w.RequestID, Type: w.Kind, Name: w.Name, Chat: w.Chat,
			Methods: orEmpty(w.Methods), Signals: orEmpty(w.Signals), Deadline: timefmt.OfPtr(w.Deadline), Since: timefmt.Of(w.Since)})
	}
	return out
}

// completeInstance serves POST /api/v1/admin/tenants/{tenantId}/instances/{workflowId}/complete:
// the current run is marked completed with compare-and-set, and the next message starts a new
// run. A running instance that is idle may be completed too; a completed one is a conflict.
//
// A write that meets a host's (or another operator's) pauses a little (bus.ConflictBackoff),
// reads the record again and completes the run as it is then, for as long as the request and
// bus.ConflictPatience allow; then the answer is storeFailed's.
func (s *Server) completeInstance(w http.ResponseWriter, r *http.Request) {
	c, wf, rec, ok := s.instanceTarget(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	store := s.instanceStore()
	var backoff bus.ConflictBackoff
	for {
		if rec.Status != instance.Running {
			problem.InstanceNotRunning.Write(w, "the instance's run is completed already; its next message starts a new run")
			return
		}
		now := time.Now().UTC()
		done := rec
		done.Status, done.CompletedAt, done.WriteID = instance.Completed, &now, ""
		saved, err := store.Put(ctx, done)
		if err == nil {
			// A host holding the instance in memory drops its copy. Flushed, so that the server
			// has the notice before the caller can send the next message.
			nc := s.cfg.Conn
			if err := nc.Publish(subject.InstanceNotice(c.tenant, wf.ID()), nil); err == nil {
				_ = nc.FlushWithContext(ctx)
			}
			s.log.Info("instance completed", "tenant", c.tenant, "workflowId", wf.ID(), "runId", saved.RunID, "by", c.key.ID)
			writeJSON(w, http.StatusOK, instance.CompletedRun{WorkflowID: saved.WorkflowID, RunID: saved.RunID, Status: string(saved.Status), CompletedAt: timefmt.Of(now)})
			return
		}
		if !errors.Is(err, instance.ErrConflict) {
			s.storeFailed(w, "completing instance", err)
			return
		}
		if werr := backoff.Wait(ctx); werr != nil {
			s.storeFailed(w, "completing instance", fmt.Errorf("%w: %w", err, werr))
			return
		}
		// A host wrote the record meanwhile: complete the run as it is now.
		if rec, err = store.Get(ctx, c.tenant, wf.ID()); err != nil {
			s.storeFailed(w, "completing instance", err)
			return
		}
	}
}

// backfillInstances serves POST /api/v1/admin/instances/backfill (system admins): instance
// records without an index entry get one (instance.Index.Backfill), for up to backfillBudget.
func (s *Server) backfillInstances(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, systemAccess)
	if !ok {
		return
	}
	res, err := s.runIndex().Backfill(r.Context(), s.res.Instances, s.instanceStore(), time.Now().Add(backfillBudget))
	if err != nil {
		s.storeFailed(w, "backfilling the run index", err)
		return
	}
	s.log.Info("run index backfilled", "scanned", res.Scanned, "indexed", res.Indexed, "remaining", res.Remaining, "by", c.key.ID)
	writeJSON(w, http.StatusOK, res)
}

// instanceStore and runIndex are the instance records and the run index over the ingress's bus;
// a few pointers each, made per request.
func (s *Server) instanceStore() *instance.Store {
	return instance.NewStore(s.res.Instances).Meter(s.storage.meter)
}

func (s *Server) runIndex() *instance.Index { return instance.NewIndex(s.js, s.res.Runs) }

// orEmpty is list, or an empty list for nil: the answer's arrays are never null.
func orEmpty(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}
