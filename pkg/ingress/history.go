package ingress

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
)

// History reading limits.
const (
	// maxPageWalk bounds how many messages a page number may skip: page N without a cursor
	// reads the N-1 pages before it, so deep pages must be reached with before.
	maxPageWalk = 10000
	// maxResumeWalk bounds how many messages listen reads looking for Last-Event-ID.
	maxResumeWalk = 10000
	// resumePageSize is the page size of that walk.
	resumePageSize = history.MaxPageSize
)

// thread is the conversation thread a history request names, with its query.
type thread struct {
	Key         keys.Key // the caller's
	Tenant      string
	WorkflowID  string
	Participant string
	Query       url.Values
}

// threadAnswer are the fields every history answer starts with.
type threadAnswer struct {
	WorkflowID    string `json:"workflowId"`
	ParticipantID string `json:"participantId"`
	ThreadID      string `json:"threadId"`
}

func (t thread) answer() threadAnswer {
	return threadAnswer{WorkflowID: t.WorkflowID, ParticipantID: t.Participant, ThreadID: subject.ThreadID(t.WorkflowID, t.Participant)}
}

// store is the history store over the ingress's bus. A Store is a few pointers and an empty
// map; its topic cache only matters to writers, so one per request costs nothing that counts.
func (s *Server) store() *history.Store {
	return history.NewStore(s.res.Messages, s.res.Topics, s.js)
}

// threadOf authenticates a history request and reads the thread it names: the workflow as
// workflowId, or agentName and activationName (and workflowType), and participantId. Checks go
// query string, key, tenant, workflow, participant, so a bad key gets 401 whatever else is wrong.
func (s *Server) threadOf(r *http.Request) (thread, *problem.Problem) {
	query, p := readQuery(r)
	if p != nil {
		return thread{}, p
	}
	c, p := s.identify(r, query, readAccess)
	if p != nil {
		return thread{}, p
	}
	tenant := c.tenant

	wf, p := workflowOf(query, tenant)
	if p != nil {
		return thread{}, p
	}
	participant, err := ident.Participant(query.Get("participantId"))
	if err != nil {
		return thread{}, problem.InvalidParticipant.New(err.Error())
	}
	if participant == "" {
		return thread{}, problem.MissingParameter.New("participantId is required")
	}
	return thread{Key: c.key, Tenant: tenant, WorkflowID: wf.ID(), Participant: participant, Query: query}, nil
}

// workflowOf reads the workflow instance a query names, of tenant: workflowId, or agentName and
// activationName (and workflowType).
func workflowOf(query url.Values, tenant string) (ident.Workflow, *problem.Problem) {
	var (
		wf  ident.Workflow
		err error
	)
	id, agentName := query.Get("workflowId"), query.Get("agentName")
	activation, wfType := query.Get("activationName"), query.Get("workflowType")
	switch {
	case id != "" && (agentName != "" || activation != "" || wfType != ""):
		return ident.Workflow{}, problem.InvalidQuery.New("give workflowId, or agentName and activationName, not both")
	case id != "":
		if wf, err = ident.ParseWorkflowID(id); err != nil {
			return ident.Workflow{}, problem.InvalidWorkflow.New("workflowId: " + err.Error())
		}
		if wf.Tenant != tenant {
			return ident.Workflow{}, problem.Forbidden.New("the workflow belongs to another tenant")
		}
	case agentName == "" && activation == "":
		return ident.Workflow{}, problem.MissingParameter.New("workflowId, or agentName and activationName, is required")
	case agentName == "":
		return ident.Workflow{}, problem.MissingParameter.New("agentName is required with activationName")
	case activation == "":
		return ident.Workflow{}, problem.MissingParameter.New("activationName is required with agentName")
	default:
		if wfType == "" {
			wfType = ident.DefaultWorkflowType
		}
		wf = ident.Workflow{Tenant: tenant, Agent: agentName, WorkflowType: wfType, Activation: activation}
		for _, f := range []struct{ name, v string }{
			{"agentName", wf.Agent}, {"workflowType", wf.WorkflowType}, {"activationName", wf.Activation},
		} {
			if err := ident.ValidName(f.v); err != nil {
				return ident.Workflow{}, problem.InvalidWorkflow.New(f.name + " " + err.Error())
			}
		}
	}
	return wf, nil
}

// historyPageAnswer is the answer of the history endpoint.
type historyPageAnswer struct {
	threadAnswer
	Page     int               `json:"page"`
	PageSize int               `json:"pageSize"`
	Messages []history.Message `json:"messages"`
	Next     string            `json:"next,omitempty"`
}

// historyPage serves GET …/messaging/history: a page of a thread, newest first, optionally of
// one topic. A page is chosen by before, the cursor the previous page answered as next, or by
// number; page N without a cursor reads the N-1 pages before it from the newest, so its cost
// grows with N and it is bounded to maxPageWalk skipped messages. Cursors cost the same at any
// depth.
func (s *Server) historyPage(w http.ResponseWriter, r *http.Request) {
	th, p := s.threadOf(r)
	var q pageQuery
	if p == nil {
		q, p = readPageQuery(th.Query)
	}
	if p != nil {
		problem.Write(w, *p)
		return
	}
	msgs, next, err := s.walkToPage(r.Context(), th, q)
	switch {
	case errors.Is(err, history.ErrBadCursor):
		problem.InvalidCursor.Write(w, "before is a cursor of another thread")
		return
	case err != nil:
		s.readFailed(w, r, "reading history", err)
		return
	}
	ans := historyPageAnswer{threadAnswer: th.answer(), Page: q.page, PageSize: q.size, Messages: msgs}
	if next != 0 {
		ans.Next = formatCursor(next, q.page+1)
	}
	writeJSON(w, http.StatusOK, ans)
}

// pageQuery is the page of a thread a history call asks for.
type pageQuery struct {
	size, page int
	// before is the cursor's message sequence, 0 without a cursor.
	before uint64
	topic  string
}

// readPageQuery reads pageSize, page, before and topic.
func readPageQuery(query url.Values) (pageQuery, *problem.Problem) {
	var (
		q   pageQuery
		err error
	)
	if q.size, err = intParam(query, "pageSize", history.DefaultPageSize, 1, history.MaxPageSize); err != nil {
		return q, problem.InvalidQuery.New(err.Error())
	}
	if q.page, err = intParam(query, "page", 1, 1, maxPageWalk); err != nil {
		return q, problem.InvalidQuery.New(err.Error())
	}
	if c := query.Get("before"); c != "" {
		if query.Has("page") {
			return q, problem.InvalidQuery.New("give page or before, not both")
		}
		if q.before, q.page, err = parseCursor(c); err != nil {
			return q, problem.InvalidCursor.New("before is not a cursor this endpoint answered")
		}
	} else if (q.page-1)*q.size > maxPageWalk {
		return q, problem.InvalidQuery.New(fmt.Sprintf("page may skip at most %d messages; follow next instead", maxPageWalk))
	}
	if q.topic = query.Get("topic"); len(q.topic) > 256 {
		return q, problem.InvalidQuery.New("topic is longer than 256 characters")
	}
	return q, nil
}

// walkToPage reads the page q asks for: with a cursor, one read; without, the pages from the
// newest up to q.page.
func (s *Server) walkToPage(ctx context.Context, th thread, q pageQuery) ([]history.Message, uint64, error) {
	store := s.store()
	opt := history.PageOptions{Size: q.size, Before: q.before, Scope: q.topic}
	for n := 1; ; n++ {
		msgs, next, err := store.Page(ctx, th.Tenant, th.WorkflowID, th.Participant, opt)
		if err != nil || q.before != 0 || n == q.page {
			return msgs, next, err
		}
		if next == 0 {
			return []history.Message{}, 0, nil
		}
		opt.Before = next
	}
}

// historyTopicsAnswer is the answer of the topics endpoint.
type historyTopicsAnswer struct {
	threadAnswer
	Topics []string `json:"topics"`
}

// historyTopics serves GET …/messaging/topics: the topics (scopes) seen in a thread, sorted.
func (s *Server) historyTopics(w http.ResponseWriter, r *http.Request) {
	th, p := s.threadOf(r)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	topics, err := s.store().Topics(r.Context(), th.Tenant, th.WorkflowID, th.Participant)
	if err != nil {
		s.readFailed(w, r, "reading topics", err)
		return
	}
	writeJSON(w, http.StatusOK, historyTopicsAnswer{threadAnswer: th.answer(), Topics: topics})
}

// findSeq returns the stream sequence of the thread's message id, walking the thread from the
// newest message, at most maxResumeWalk messages; 0 when it is not among them.
func findSeq(ctx context.Context, store *history.Store, th thread, id string) (uint64, error) {
	opt := history.PageOptions{Size: resumePageSize}
	for read := 0; read < maxResumeWalk; {
		msgs, next, err := store.Page(ctx, th.Tenant, th.WorkflowID, th.Participant, opt)
		if err != nil {
			return 0, err
		}
		for _, m := range msgs {
			if m.ID == id {
				return m.Pos, nil
			}
		}
		if next == 0 {
			return 0, nil
		}
		read += len(msgs)
		opt.Before = next
	}
	return 0, nil
}

// readFailed answers a history read that failed on the bus; the cause is only logged.
func (s *Server) readFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	if r.Context().Err() != nil {
		// The client is gone; nobody reads the answer.
		return
	}
	s.log.Error(what, "err", err)
	problem.BusUnavailable.Write(w, "history could not be read; try again")
}

// intParam reads an optional whole-number query parameter between lo and hi.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s must be a whole number from %d to %d", name, lo, hi)
	}
	return n, nil
}

// formatCursor is the opaque next cursor: the sequence the next page starts before and that
// page's number, so that a page reached by cursor still knows its number.
func formatCursor(seq uint64, page int) string {
	b := binary.AppendUvarint(nil, seq)
	b = binary.AppendUvarint(b, uint64(page))
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseCursor reverses formatCursor. A cursor names a sequence, not a thread: Page refuses one
// of another thread, so a cursor never reads what the caller may not.
func parseCursor(c string) (seq uint64, page int, err error) {
	errBad := errors.New("bad cursor")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, 0, errBad
	}
	seq, n := binary.Uvarint(b)
	if n <= 0 || seq == 0 {
		return 0, 0, errBad
	}
	p, m := binary.Uvarint(b[n:])
	if m <= 0 || n+m != len(b) || p < 2 || p > 1<<31 {
		return 0, 0, errBad
	}
	return seq, int(p), nil
}
