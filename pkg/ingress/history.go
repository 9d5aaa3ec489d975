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

// authenticateRead checks the Authorization header and the apikey query parameter. Every role
// may read its tenant's history.
func (s *Server) authenticateRead(r *http.Request, query url.Values) (keys.Key, *problem.Problem) {
	return s.authenticate(headerOrQueryKey, r.Header.Get("Authorization"), query.Get("apikey"))
}

// threadOf authenticates a history request and reads the thread it names: the workflow as
// workflowId, or agentName and activationName (and workflowType), and participantId. Checks go
// query string, key, tenant, workflow, participant, so a bad key gets 401 whatever else is wrong.
func (s *Server) threadOf(r *http.Request) (thread, *problem.Problem) {
	bad := func(slug, detail string) *problem.Problem {
		return &problem.Problem{Status: http.StatusBadRequest, Slug: slug, Detail: detail}
	}
	query, p := readQuery(r)
	if p != nil {
		return thread{}, p
	}
	key, p := s.authenticateRead(r, query)
	if p != nil {
		return thread{}, p
	}
	tenant, p := s.sendTenant(r, key)
	if p != nil {
		return thread{}, p
	}

	var (
		wf  ident.Workflow
		err error
	)
	id, agentName := query.Get("workflowId"), query.Get("agentName")
	activation, wfType := query.Get("activationName"), query.Get("workflowType")
	switch {
	case id != "" && (agentName != "" || activation != "" || wfType != ""):
		return thread{}, bad("invalid-query", "give workflowId, or agentName and activationName, not both")
	case id != "":
		if wf, err = ident.ParseWorkflowID(id); err != nil {
			return thread{}, bad("invalid-workflow", "workflowId: "+err.Error())
		}
		if wf.Tenant != tenant {
			return thread{}, &problem.Problem{Status: http.StatusForbidden, Slug: "forbidden", Detail: "the workflow belongs to another tenant"}
		}
	case agentName == "" && activation == "":
		return thread{}, bad("missing-parameter", "workflowId, or agentName and activationName, is required")
	case agentName == "":
		return thread{}, bad("missing-parameter", "agentName is required with activationName")
	case activation == "":
		return thread{}, bad("missing-parameter", "activationName is required with agentName")
	default:
		if wfType == "" {
			wfType = ident.DefaultWorkflowType
		}
		wf = ident.Workflow{Tenant: tenant, Agent: agentName, WorkflowType: wfType, Activation: activation}
		for _, f := range []struct{ name, v string }{
			{"agentName", wf.Agent}, {"workflowType", wf.WorkflowType}, {"activationName", wf.Activation},
		} {
			if err := ident.ValidName(f.v); err != nil {
				return thread{}, bad("invalid-workflow", f.name+" "+err.Error())
			}
		}
	}

	participant, err := ident.Participant(query.Get("participantId"))
	if err != nil {
		return thread{}, bad("invalid-participant", err.Error())
	}
	if participant == "" {
		return thread{}, bad("missing-parameter", "participantId is required")
	}
	return thread{Key: key, Tenant: tenant, WorkflowID: wf.ID(), Participant: participant, Query: query}, nil
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
	if p != nil {
		problem.Write(w, *p)
		return
	}
	fail := func(status int, slug, detail string) {
		problem.Write(w, problem.Problem{Status: status, Slug: slug, Detail: detail})
	}
	size, err := intParam(th.Query, "pageSize", history.DefaultPageSize, 1, history.MaxPageSize)
	if err != nil {
		fail(http.StatusBadRequest, "invalid-query", err.Error())
		return
	}
	page, err := intParam(th.Query, "page", 1, 1, maxPageWalk)
	if err != nil {
		fail(http.StatusBadRequest, "invalid-query", err.Error())
		return
	}
	var before uint64
	if c := th.Query.Get("before"); c != "" {
		if th.Query.Has("page") {
			fail(http.StatusBadRequest, "invalid-query", "give page or before, not both")
			return
		}
		if before, page, err = parseCursor(c); err != nil {
			fail(http.StatusBadRequest, "invalid-cursor", "before is not a cursor this endpoint answered")
			return
		}
	} else if (page-1)*size > maxPageWalk {
		fail(http.StatusBadRequest, "invalid-query", fmt.Sprintf("page may skip at most %d messages; follow next instead", maxPageWalk))
		return
	}
	topic := th.Query.Get("topic")
	if len(topic) > 256 {
		fail(http.StatusBadRequest, "invalid-query", "topic is longer than 256 characters")
		return
	}

	store := s.store()
	opt := history.PageOptions{Size: size, Before: before, Scope: topic}
	var (
		msgs []history.Message
		next uint64
	)
	// Without a cursor, walk to the page asked for; with one, this is a single read.
	for n := 1; ; n++ {
		msgs, next, err = store.Page(r.Context(), th.Tenant, th.WorkflowID, th.Participant, opt)
		if err != nil {
			break
		}
		if before != 0 || n == page {
			break
		}
		if next == 0 {
			msgs = []history.Message{}
			break
		}
		opt.Before = next
	}
	switch {
	case errors.Is(err, history.ErrBadCursor):
		fail(http.StatusBadRequest, "invalid-cursor", "before is a cursor of another thread")
		return
	case err != nil:
		s.readFailed(w, r, "reading history", err)
		return
	}
	ans := historyPageAnswer{threadAnswer: th.answer(), Page: page, PageSize: size, Messages: msgs}
	if next != 0 {
		ans.Next = formatCursor(next, page+1)
	}
	writeJSON(w, http.StatusOK, ans)
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
	problem.Write(w, problem.Problem{Status: http.StatusServiceUnavailable, Slug: "bus-unavailable", Detail: "history could not be read; try again", RetryAfter: 1})
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
