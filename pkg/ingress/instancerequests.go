package ingress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// What the inspector reads of an instance's threads for its recent requests.
const (
	// recentRequestCount is how many requests it shows, newest first.
	recentRequestCount = 10
	// recentThreads is how many threads it reads: those with the newest records.
	recentThreads = 8
	// recentThreadsSeen bounds the threads whose newest record it compares to choose them.
	recentThreadsSeen = 64
	// recentPerThread is the page of messages read from each thread: room for a request and
	// its answer, and for tool calls between them.
	recentPerThread = 3 * recentRequestCount
)

// recentRequests returns the newest requests of the instance's threads, newest first: the
// threads with the newest records (of at most recentThreadsSeen) are read a page each, and each
// incoming message is paired with the answer that carries its request id.
func (s *Server) recentRequests(ctx context.Context, tenant, workflowID string) ([]inspect.RecentRequest, error) {
	threads, err := s.newestThreads(ctx, tenant, workflowID)
	if err != nil {
		return nil, err
	}
	store := s.store()
	pages := make([][]history.Message, len(threads))
	errs := make([]error, len(threads))
	var wg sync.WaitGroup
	for i, participant := range threads {
		wg.Go(func() {
			pages[i], _, errs[i] = store.Page(ctx, tenant, workflowID, participant, history.PageOptions{Size: recentPerThread})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]inspect.RecentRequest, 0, recentRequestCount)
	for _, page := range pages {
		out = append(out, pairRequests(page)...)
	}
	slices.SortFunc(out, func(a, b inspect.RecentRequest) int {
		return cmp.Or(b.ReceivedAt.Compare(a.ReceivedAt.Time), cmp.Compare(b.Pos, a.Pos))
	})
	return out[:min(len(out), recentRequestCount)], nil
}

// newestThreads returns the participants of the instance's threads whose newest records are the
// newest, at most recentThreads of them.
func (s *Server) newestThreads(ctx context.Context, tenant, workflowID string) ([]string, error) {
	info, err := s.res.Messages.Info(ctx, jetstream.WithSubjectFilter(subject.InstanceThreads(tenant, workflowID)))
	if err != nil {
		return nil, fmt.Errorf("listing threads: %w", err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	subjects = subjects[:min(len(subjects), recentThreadsSeen)]
	if len(subjects) > recentThreads {
		last := make(map[string]uint64, len(subjects))
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for _, subj := range subjects {
			wg.Go(func() {
				raw, err := s.res.Messages.GetLastMsgForSubject(ctx, subj)
				if err == nil {
					mu.Lock()
					last[subj] = raw.Sequence
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.SortFunc(subjects, func(a, b string) int { return cmp.Compare(last[b], last[a]) })
		subjects = subjects[:recentThreads]
	}
	out := make([]string, 0, len(subjects))
	for _, subj := range subjects {
		participant, err := subject.ParseToken(subj[strings.LastIndexByte(subj, '.')+1:])
		if err == nil {
			out = append(out, participant)
		}
	}
	return out, nil
}

// pairRequests reads the requests of one page of a thread (newest message first): each incoming
// message with its request's newest answer (a request that waited has its waiting answer, then
// its final one). Tool calls of a chat are part of its request.
func pairRequests(page []history.Message) []inspect.RecentRequest {
	answers := make(map[string]history.Message)
	var out []inspect.RecentRequest
	for _, m := range page {
		if m.RequestID == "" || m.Metadata[history.MetaToolCallID] != "" {
			continue
		}
		if m.Direction == history.Out {
			if _, ok := answers[m.RequestID]; !ok {
				answers[m.RequestID] = m // the page is newest first: the newest answer comes first
			}
			continue
		}
		sum := inspect.RecentRequest{RequestID: m.RequestID, ParticipantID: m.ParticipantID, Type: msgkind.OfHistory(m.MessageType).Name,
			Timer: m.Metadata[history.MetaTimer], ReceivedAt: timefmt.Of(m.CreatedAt), Pos: m.Pos}
		if msgkind.OfHistory(m.MessageType).Method && m.Text != nil {
			sum.Method = *m.Text
		}
		if a, ok := answers[m.RequestID]; ok {
			at := timefmt.Of(a.CreatedAt)
			d := at.Sub(m.CreatedAt).Milliseconds()
			sum.AnsweredAt, sum.DurationMs, sum.Status = &at, &d, answerStatus(a)
		}
		out = append(out, sum)
	}
	return out
}

// answerStatus is the status of a stored answer: a webhook handler's statusCode, a failure's
// error status, 202 for a request's waiting answer, else 200.
func answerStatus(m history.Message) int {
	var a struct {
		StatusCode int `json:"statusCode"`
		Error      struct {
			Status int `json:"status"`
		} `json:"error"`
		Waiting json.RawMessage `json:"waiting"`
	}
	if len(m.Data) > 0 && json.Unmarshal(m.Data, &a) == nil {
		if m.MessageType == history.Webhook && a.StatusCode != 0 {
			return a.StatusCode
		}
		if a.Error.Status != 0 {
			return a.Error.Status
		}
		if a.Waiting != nil {
			return http.StatusAccepted
		}
	}
	return http.StatusOK
}
