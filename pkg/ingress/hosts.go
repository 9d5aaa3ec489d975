package ingress

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/problem"
)

// Paths of the hosts and queue views (docs/hosts-inspection.md).
const (
	hostsPath         = "/api/v1/admin/hosts"
	tenantHostsPath   = tenantsPath + "/{tenantId}/hosts"
	instanceQueuePath = tenantsPath + "/{tenantId}/instances/{workflowId}/queue"
)

// inspector asks the workflow hosts what they hold and reads the inbox; a few pointers, made
// per request.
func (s *Server) inspector() *inspect.Client {
	return &inspect.Client{NC: s.cfg.Conn, JS: s.js, Dir: s.dir, Partitions: s.res.PartitionsOf, Queues: s.tenantQueues}
}

// listHosts serves GET /api/v1/admin/hosts (system admins: every host and agent) and
// GET /api/v1/admin/tenants/{tenantId}/hosts (the tenant's admins: the hosts and partitions of
// the agents the tenant may use).
func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) {
	a := systemAccess
	if r.Pattern == tenantHostsPath {
		a = adminAccess
	}
	c, ok := s.identifyAdmin(w, r, a)
	if !ok {
		return
	}
	view, err := s.inspector().Hosts(r.Context(), c.tenant)
	if err != nil {
		s.storeFailed(w, "reading the hosts", err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// queueTarget authenticates a call about one instance's queue and resolves the path's
// workflowId: a full workflow id, or the short forms the API takes elsewhere (Agent,
// Agent:WorkflowType). Another tenant's instance, or one of an agent the tenant may not use, is
// not found, exactly like a missing one. On failure it has written the problem and returns
// false.
func (s *Server) queueTarget(w http.ResponseWriter, r *http.Request) (caller, ident.Workflow, bool) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return c, ident.Workflow{}, false
	}
	wf, err := ident.Resolve(r.PathValue("workflowId"), c.tenant)
	if err != nil {
		problem.InvalidWorkflow.Write(w, err.Error())
		return c, wf, false
	}
	if reg, known := s.dir.Agent(wf.Agent); wf.Tenant != c.tenant || known && !reg.VisibleTo(c.tenant) {
		instanceNotFound(w)
		return c, wf, false
	}
	return c, wf, true
}

func instanceNotFound(w http.ResponseWriter) {
	problem.InstanceNotFound.Write(w, "the tenant has no instance of this workflow id")
}

// instanceQueue serves GET /api/v1/admin/tenants/{tenantId}/instances/{workflowId}/queue: the
// requests waiting for the instance, by conversation, and why each waits. An instance with no
// record and nothing waiting is not found.
func (s *Server) instanceQueue(w http.ResponseWriter, r *http.Request) {
	c, wf, ok := s.queueTarget(w, r)
	if !ok {
		return
	}
	view, err := s.inspector().Instance(r.Context(), c.tenant, wf.ID())
	if err != nil {
		s.storeFailed(w, "reading an instance's queue", err)
		return
	}
	if view.Empty() {
		_, err := instance.NewStore(s.res.Instances).Get(r.Context(), c.tenant, wf.ID())
		switch {
		case errors.Is(err, instance.ErrNotFound):
			instanceNotFound(w)
			return
		case err != nil:
			s.storeFailed(w, "reading an instance", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, view)
}

// retriedAnswer is the answer of a retry: the request as it stood.
type retriedAnswer struct {
	WorkflowID string                `json:"workflowId"`
	Request    inspect.QueuedRequest `json:"request"`
}

// retryQueued serves POST /api/v1/admin/tenants/{tenantId}/instances/{workflowId}/queue/
// {requestId}/retry: a request of the instance waiting in retry backoff runs now. 404
// request-not-queued when no host holds it, 409 request-not-in-backoff when it does not wait to
// be retried.
func (s *Server) retryQueued(w http.ResponseWriter, r *http.Request) {
	c, wf, ok := s.queueTarget(w, r)
	if !ok {
		return
	}
	requestID := r.PathValue("requestId")
	req, err := s.inspector().Retry(r.Context(), c.tenant, wf.ID(), requestID)
	switch {
	case errors.Is(err, inspect.ErrNotHeld):
		problem.RequestNotQueued.Write(w, "no workflow host holds a request of this id for the instance: it was handled, or never sent")
	case errors.Is(err, inspect.ErrNotInBackoff):
		detail := fmt.Sprintf("the request is %s", req.State)
		if req.Reason != "" {
			detail += " (" + req.Reason + ")"
		}
		problem.RequestNotInBackoff.Write(w, detail+", not waiting to be retried")
	case err != nil:
		s.storeFailed(w, "retrying a queued request", err)
	default:
		s.log.Info("queued request retried now", "tenant", c.tenant, "workflowId", wf.ID(), "requestId", requestID, "host", req.Host, "by", c.key.ID)
		writeJSON(w, http.StatusAccepted, retriedAnswer{WorkflowID: wf.ID(), Request: req})
	}
}
