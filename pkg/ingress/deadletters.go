package ingress

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/problem"
)

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	c, ok := s.keyScope(w, r)
	if !ok {
		return
	}
	tenant := c.tenant
	opt, p := deadLetterListOptions(r)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	letters, next, err := s.dead.List(r.Context(), tenant, opt)
	if err != nil {
		s.deadLetterFailed(w, "listing dead letters", tenant, 0, err)
		return
	}
	if letters == nil {
		letters = []deadletter.Letter{} // an empty list, not null
	}
	writeJSON(w, http.StatusOK, deadletter.Page{DeadLetters: letters, Next: next})
}

func (s *Server) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	c, id, ok := s.deadLetterTarget(w, r)
	if !ok {
		return
	}
	tenant := c.tenant
	l, err := s.dead.Get(r.Context(), tenant, id)
	if err != nil {
		s.deadLetterFailed(w, "reading dead letter", tenant, id, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// replayDeadLetter sends a dead letter's request to the inbox again. Nobody waits for it: its
// answer goes to the thread's history, as the answer of any asynchronous send does.
func (s *Server) replayDeadLetter(w http.ResponseWriter, r *http.Request) {
	c, id, ok := s.deadLetterTarget(w, r)
	if !ok {
		return
	}
	tenant := c.tenant
	l, err := s.dead.Replay(r.Context(), tenant, id)
	if err != nil {
		s.deadLetterFailed(w, "replaying dead letter", tenant, id, err)
		return
	}
	s.log.Info("dead letter replayed", "tenant", tenant, "deadLetter", id, "requestId", l.RequestID, "by", c.key.ID)
	writeJSON(w, http.StatusAccepted, deadletter.Replayed{Replayed: id, RequestID: l.RequestID, WorkflowID: l.WorkflowID})
}

func (s *Server) discardDeadLetter(w http.ResponseWriter, r *http.Request) {
	c, id, ok := s.deadLetterTarget(w, r)
	if !ok {
		return
	}
	tenant := c.tenant
	if err := s.dead.Discard(r.Context(), tenant, id); err != nil {
		s.deadLetterFailed(w, "discarding dead letter", tenant, id, err)
		return
	}
	s.log.Info("dead letter discarded", "tenant", tenant, "deadLetter", id, "by", c.key.ID)
	w.WriteHeader(http.StatusNoContent)
}

// deadLetterTarget authenticates a call about one dead letter and reads its id from the path.
// On failure it has written the problem and returns false.
func (s *Server) deadLetterTarget(w http.ResponseWriter, r *http.Request) (c caller, id uint64, ok bool) {
	if c, ok = s.keyScope(w, r); !ok {
		return
	}
	// Ids are stream sequences, which start at 1.
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		problem.InvalidDeadLetterID.Write(w, "a dead letter id is a whole number from 1, as the list shows it")
		return c, 0, false
	}
	return c, id, true
}

// deadLetterListOptions reads the list endpoint's query: after, limit and agent, each optional
// (an empty value is as if it were not given).
func deadLetterListOptions(r *http.Request) (deadletter.ListOptions, *problem.Problem) {
	bad := func(detail string) (deadletter.ListOptions, *problem.Problem) {
		return deadletter.ListOptions{}, problem.InvalidQuery.New(detail)
	}
	q, p := readQuery(r)
	if p != nil {
		return deadletter.ListOptions{}, p
	}
	opt := deadletter.ListOptions{Limit: deadletter.DefaultLimit}
	if v := q.Get("after"); v != "" {
		// Bounded below the largest sequence, so that the store's after+1 cannot wrap to 0 and
		// start again at the oldest.
		after, err := strconv.ParseUint(v, 10, 64)
		if err != nil || after > math.MaxInt64 {
			return bad(fmt.Sprintf("after must be a dead letter id: a whole number from 0 to %d", int64(math.MaxInt64)))
		}
		opt.After = after
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > deadletter.MaxLimit {
			return bad(fmt.Sprintf("limit must be a whole number from 1 to %d", deadletter.MaxLimit))
		}
		opt.Limit = n
	}
	if v := q.Get("agent"); v != "" {
		if err := ident.ValidName(v); err != nil {
			return bad("agent " + err.Error())
		}
		opt.Agent = v
	}
	return opt, nil
}

// deadLetterFailed answers a failure of the dead-letter store. Only the causes callers can act
// on are told; any other is logged, with what was being done, and answered as internal.
func (s *Server) deadLetterFailed(w http.ResponseWriter, what, tenant string, id uint64, err error) {
	switch {
	case errors.Is(err, deadletter.ErrNotFound):
		problem.DeadLetterNotFound.Write(w, "the tenant has no dead letter with this id")
	case errors.Is(err, deadletter.ErrGone):
		problem.DeadLetterExpired.Write(w, "the dead letter's request was too large for one message and its stored copy has expired, so it cannot be sent again; discard it")
	default:
		s.log.Error(what, "tenant", tenant, "deadLetter", id, "err", err)
		problem.Internal.Write(w, "internal error")
	}
}
