package agent

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// What a host holds, for an operator (package inspect, docs/hosts-inspection.md).
//
// The host answers on its inspect subject from what it keeps in memory: per conversation, the
// requests it holds in inbox order, and what each waits for. The answer is read under the host's
// lock in one pass over the conversations asked about, bounded by inspect.MaxConversations,
// inspect.MaxRequests and inspect.MaxAnswerRequests; the requests are decoded after the lock is
// let go. Nothing is changed but a retry an operator asks for.

// deliveryWait is what a running request's handler waits for. Guarded by Host.mu.
type deliveryWait struct {
	// attempt is the attempt next or running once a retry counted it (0: the delivery count).
	attempt int
	// until and now are set while the request waits to be retried: closing now retries it at
	// once.
	until time.Time
	now   chan struct{}
	// calls are the Agent2Agent calls its handler waits for.
	calls []*pendingCall
}

// pendingCall is an Agent2Agent call a handler waits for.
type pendingCall struct {
	agent, workflowID, method string
	since                     time.Time
}

// waitLocked returns d's wait, made when it has none.
func (d *delivery) waitLocked() *deliveryWait {
	if d.wait == nil {
		d.wait = new(deliveryWait)
	}
	return d.wait
}

// backingOff notes that the request d waits until until before its attempt next, and returns
// the channel that is closed to retry it at once.
func (h *Host) backingOff(d *delivery, until time.Time, next int) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := d.waitLocked()
	w.attempt, w.until, w.now = next, until, make(chan struct{})
	return w.now
}

// backedOff notes that the request d's backoff is over: its next attempt begins.
func (h *Host) backedOff(d *delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := d.wait; w != nil {
		w.until, w.now = time.Time{}, nil
	}
	d.started = time.Now()
}

// calling notes that the handler of the held request waits for the answer of the call req; the
// function it returns notes the end of the wait.
func (h *Host) calling(held heldKey, req *agentbusv1.Request) func() {
	c := &pendingCall{agent: req.GetAgentName(), workflowID: req.GetWorkflowId(), method: req.GetMethod(), since: time.Now()}
	h.mu.Lock()
	d := h.held[held]
	if d != nil {
		w := d.waitLocked()
		w.calls = append(w.calls, c)
	}
	h.mu.Unlock()
	return func() {
		if d == nil {
			return
		}
		h.mu.Lock()
		if w := d.wait; w != nil {
			w.calls = slices.DeleteFunc(w.calls, func(p *pendingCall) bool { return p == c })
		}
		h.mu.Unlock()
	}
}

// serveInspect subscribes the host to its inspect subject.
func (h *Host) serveInspect() (*nats.Subscription, error) {
	return h.cfg.Conn.Subscribe(subject.Inspect(h.cfg.ID), h.answerInspect)
}

// answerInspect answers one query of the inspect subject.
func (h *Host) answerInspect(m *nats.Msg) {
	var q inspect.Query
	var ans any
	if err := json.Unmarshal(m.Data, &q); err != nil {
		ans = inspect.Held{Host: h.cfg.ID, At: timefmt.Now(), Error: "the query is not JSON: " + err.Error()}
	} else {
		switch q.Op {
		case inspect.OpHeld:
			ans = h.heldView(q)
		case inspect.OpRetry:
			ans = h.retryNow(q)
		default:
			ans = inspect.Held{Host: h.cfg.ID, At: timefmt.Now(), Error: "unknown op " + strconv.Quote(q.Op)}
		}
	}
	data, err := json.Marshal(ans)
	if err != nil {
		h.log.Error("encoding an inspect answer", "err", err)
		return
	}
	if err := m.Respond(data); err != nil {
		h.log.Debug("answering an inspect query", "err", err)
	}
}

// heldRequest is a request as read under the host's lock: its state is set, the rest is read
// from msg once the lock is let go.
type heldRequest struct {
	msg jetstream.Msg
	inspect.Request
}

// heldConversation is a conversation as read under the host's lock.
type heldConversation struct {
	key   string
	count int
	reqs  []heldRequest
}

// queryMatch returns whether a conversation (its stored subject) is one q asks about.
func queryMatch(q inspect.Query) func(key string) bool {
	switch {
	case q.WorkflowID != "":
		tok := subject.Token(q.WorkflowID)
		return func(key string) bool { return subject.IsInstanceInbox(key, q.Tenant, tok) }
	case q.Tenant != "":
		return func(key string) bool { return subject.StoredInboxTenant(key) == q.Tenant }
	default:
		return func(string) bool { return true }
	}
}

// heldView answers OpHeld: the requests the host holds of the conversations q asks about.
func (h *Host) heldView(q inspect.Query) inspect.Held {
	match := queryMatch(q)
	ans := inspect.Held{Host: h.cfg.ID, Conversations: []inspect.Conversation{}}
	var convs []heldConversation
	budget := inspect.MaxAnswerRequests
	h.mu.Lock()
	ans.At = timefmt.Now()
	ans.InFlight = len(h.held)
	for _, d := range h.held {
		if d.running {
			ans.Running++
		}
	}
	for key, c := range h.convs {
		if len(c.queue) == 0 || !match(key) {
			continue
		}
		if len(convs) == inspect.MaxConversations {
			ans.Truncated = true
			break
		}
		hc := h.heldConversationLocked(c, budget)
		budget -= len(hc.reqs)
		ans.Truncated = ans.Truncated || len(hc.reqs) < min(hc.count, inspect.MaxRequests)
		convs = append(convs, hc)
	}
	h.mu.Unlock()

	slices.SortFunc(convs, func(a, b heldConversation) int { return strings.Compare(a.key, b.key) })
	for _, hc := range convs {
		in, err := subject.ParseStoredInbox(hc.key)
		if err != nil {
			continue
		}
		p, _ := strconv.Atoi(in.Partition)
		conv := inspect.Conversation{Agent: in.Agent, Partition: p, Tenant: in.Tenant, WorkflowID: in.WorkflowID,
			ParticipantID: in.Participant, Count: hc.count, Requests: make([]inspect.Request, 0, len(hc.reqs))}
		for _, r := range hc.reqs {
			conv.Requests = append(conv.Requests, describeHeld(r))
		}
		ans.Conversations = append(ans.Conversations, conv)
	}
	return ans
}

// heldConversationLocked reads the state of a conversation's requests, its first
// inspect.MaxRequests and at most budget.
func (h *Host) heldConversationLocked(c *conversation, budget int) heldConversation {
	n := max(0, min(len(c.queue), inspect.MaxRequests, budget))
	hc := heldConversation{key: c.key, count: len(c.queue), reqs: make([]heldRequest, 0, n)}
	for i, d := range c.queue {
		if i == n {
			break
		}
		hc.reqs = append(hc.reqs, heldRequest{msg: d.msg, Request: h.stateLocked(c, i, d)})
	}
	return hc
}

// stateLocked is the state of the request d at place i of its conversation's queue.
func (h *Host) stateLocked(c *conversation, i int, d *delivery) inspect.Request {
	r := inspect.Request{Sequence: d.seq}
	at := func(t time.Time) *timefmt.Time { return &timefmt.Time{Time: t} }
	w := d.wait
	if w != nil {
		r.Attempt = w.attempt
	}
	switch {
	case d.running && w != nil && w.now != nil:
		r.State, r.Reason, r.Until = inspect.StateHeld, inspect.ReasonRetryBackoff, at(w.until)
	case d.running && w != nil && len(w.calls) > 0:
		call := w.calls[0]
		r.State, r.Reason, r.Since = inspect.StateHeld, inspect.ReasonWaitingForCall, at(call.since)
		r.Call = &inspect.Call{Agent: call.agent, WorkflowID: call.workflowID, Method: call.method, Since: timefmt.Of(call.since)}
	case d.running && !d.started.IsZero():
		r.State, r.Since = inspect.StateRunning, at(d.started)
	case d.running: // a slot took it; its attempt has not begun
		r.State, r.Reason = inspect.StateQueued, inspect.ReasonNext
	case i > 0:
		r.State, r.Reason, r.EarlierSequence = inspect.StateQueued, inspect.ReasonBehind, c.queue[i-1].seq
	case h.waitsLocked(c):
		r.State, r.Reason, r.EarlierSequence = inspect.StateHeld, inspect.ReasonEarlierElsewhere, d.part.others[c.key][0]
	case c.ready:
		r.State, r.Reason = inspect.StateQueued, inspect.ReasonWaitingForSlot
	default:
		r.State, r.Reason = inspect.StateQueued, inspect.ReasonNext
	}
	return r
}

// describeHeld completes a held request's description from its delivery.
func describeHeld(r heldRequest) inspect.Request {
	out := r.Request
	if md, err := r.msg.Metadata(); err == nil {
		out.StoredAt = timefmt.Of(md.Timestamp)
		if out.Attempt == 0 {
			out.Attempt = int(md.NumDelivered)
		}
	}
	req := new(agentbusv1.Request)
	if err := proto.Unmarshal(r.msg.Data(), req); err == nil {
		out.RequestID, out.Type, out.Method = req.GetRequestId(), msgkind.Of(req.GetKind()).Name, req.GetMethod()
	}
	return out
}

// retryNow answers OpRetry: a request of the instance q names, held here in retry backoff, runs
// at once.
func (h *Host) retryNow(q inspect.Query) inspect.Retried {
	ans := inspect.Retried{Host: h.cfg.ID, Outcome: inspect.RetryNotHeld}
	if q.WorkflowID == "" || q.RequestID == "" {
		ans.Error = "a retry names a workflow instance and a request"
		return ans
	}
	// The request ids of the instance's requests are read from their messages, outside the lock.
	match := queryMatch(q)
	type candidate struct {
		key heldKey
		msg jetstream.Msg
	}
	var cands []candidate
	h.mu.Lock()
	for key, c := range h.convs {
		if !match(key) {
			continue
		}
		for _, d := range c.queue {
			cands = append(cands, candidate{d.key(), d.msg})
		}
	}
	h.mu.Unlock()
	var key heldKey
	for _, cd := range cands {
		req := new(agentbusv1.Request)
		if proto.Unmarshal(cd.msg.Data(), req) == nil && req.GetRequestId() == q.RequestID {
			key = cd.key
			break
		}
	}
	if key.seq == 0 {
		return ans
	}
	var held heldRequest
	h.mu.Lock()
	d := h.held[key]
	if d != nil {
		i := slices.Index(d.conv.queue, d)
		if i >= 0 {
			held = heldRequest{msg: d.msg, Request: h.stateLocked(d.conv, i, d)}
		}
		if w := d.wait; i >= 0 && w != nil && w.now != nil {
			close(w.now)
			w.now = nil
			ans.Outcome = inspect.RetryStarted
		} else if i >= 0 {
			ans.Outcome = inspect.RetryNotInBackoff
		}
	}
	h.mu.Unlock()
	if ans.Outcome != inspect.RetryNotHeld {
		r := describeHeld(held)
		ans.Request = &r
	}
	if ans.Outcome == inspect.RetryStarted {
		h.log.Info("retrying a request now, as an operator asked", "agent", key.agent, "seq", key.seq, "requestId", q.RequestID)
	}
	return ans
}
