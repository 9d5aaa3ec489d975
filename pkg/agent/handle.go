package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/jsonenc"
	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// maxStoredBody bounds how much of a webhook body or answer is kept in history; the rest is
// summarised by size (bodies may be megabytes, history messages are not).
const maxStoredBody = 64 << 10

// handle runs the request's handler on its instance, stores the incoming and outgoing messages in
// history, replies and records the run. A handler that panics or fails with a Retryable error is
// run again after a backoff while attempts are left; then the request is kept as a dead letter
// and answered so. handle returns an error only when the host is shutting down before the
// request could be finished.
func (h *Host) handle(ctx context.Context, log *slog.Logger, in *inbound) error {
	req := in.req
	if req.GetKind() == agentbusv1.Kind_KIND_POST {
		return h.storePost(ctx, log, in)
	}
	if waitID, ok := subject.WaitOfTimer(req.GetTimer()); ok {
		return h.waitDeadline(ctx, log, in, waitID)
	}
	if req.GetSignal() != "" {
		return h.signal(ctx, log, in)
	}
	a, target, refusal := h.route(req)
	if refusal != nil {
		if in.replyTo == "" && !req.GetKeepResult() {
			// Nobody waits for the answer (a timer, a tell): the log is all that is left of it.
			log.Warn("request refused", "method", req.GetMethod(), "problem", refusal.GetError(), "detail", string(refusal.GetContent()))
		}
		h.reply(ctx, log, req, in.replyTo, refusal)
		return nil
	}
	l := h.live.acquire(req.GetTenantId(), req.GetWorkflowId())
	defer h.live.release(l)
	inst, runID, err := h.open(ctx, log, in, a, l)
	if err != nil {
		return err
	}
	x := &exchange{h: h, log: log, l: l, req: req, origin: in.origin(), in: incomingMessage(req, req.GetBody())}
	if w := inst.waitOf(req.GetParticipantId()); w != nil || in.resume != "" {
		if done, err := h.meetWait(ctx, log, in, inst, x, w); done || err != nil {
			return err
		}
	}
	if req.GetKind() == agentbusv1.Kind_KIND_CHAT && !x.inStored {
		// Followers of the thread see a chat message while the model answers it.
		if _, err := x.storeIn(ctx); err != nil {
			return err
		}
	}
	var (
		rep *agentbusv1.Reply
		out *history.Message
	)
	if target.webhook != nil {
		out, err = h.runWebhook(ctx, log, in, target.webhook, inst, runID)
	} else {
		rep, out, err = h.runMessage(ctx, log, in, target.handler, h.messageWithTools(a, x, inst))
		if rep != nil {
			rep.RunId = runID
		}
	}
	if errors.Is(err, errParked) {
		return h.park(ctx, log, in, inst, x, inst.fx.waiting(), runID)
	}
	if err != nil {
		return err
	}
	if err := x.finish(ctx, out, rep); err != nil {
		return err
	}
	if rep != nil {
		h.reply(ctx, log, req, in.replyTo, rep)
	}
	if req.GetKeepResult() {
		l.noteKept(req) // answered: a copy that comes again must not run (settleEarly)
	}
	if in.resume != "" {
		// Until the wait is cleared, a copy of the resumed request delivered again runs again,
		// and needs its journal: the steps are dropped after.
		if err := retry(ctx, log, "clearing the wait", func() error {
			return inst.setWait(ctx, req.GetParticipantId(), nil, in.resume)
		}); err != nil {
			return err
		}
	}
	h.dropSteps(ctx, log, inst.fx)
	return retry(ctx, log, "recording the run", func() error { return h.finishRun(ctx, log, inst, runID) })
}

// errParked means the handler's run asked to wait (Wait): the request parks instead of being
// answered.
var errParked = errors.New("the request waits")

// target is the handler a request names: a webhook handler, or the handler of a Chat, Data or
// File message.
type target struct {
	webhook WebhookHandler
	handler Handler
}

// route finds the agent and the handler of a request, or the reply that refuses it: nothing is
// stored of a refused request. The ingress checks the agent, the tenant and a Data call's
// parameters too; a request that reached the inbox otherwise (a dead letter replayed after the
// agent was restricted, an older ingress, a timer, an Agent2Agent call) is refused here.
func (h *Host) route(req *agentbusv1.Request) (*Agent, target, *agentbusv1.Reply) {
	a := h.agents[req.GetAgentName()]
	if a == nil || !a.hasWorkflowType(req.GetWorkflowType()) || !a.servesTenant(req.GetTenantId()) {
		return nil, target{}, webhookReply(platformError(problem.UnknownAgent, "no such agent or workflow type"), "")
	}
	var t target
	switch req.GetKind() {
	case agentbusv1.Kind_KIND_WEBHOOK:
		t.webhook = a.webhooks[req.GetMethod()]
	case agentbusv1.Kind_KIND_CHAT:
		t.handler = a.chat
	case agentbusv1.Kind_KIND_DATA:
		if dm := a.data[strings.ToLower(req.GetMethod())]; dm != nil {
			if err := dm.checkParams(h.log, req.GetData()); err != nil {
				return nil, target{}, webhookReply(platformError(problem.InvalidMethodParameters, jsonschema.ParamsDetail(dm.name, err)), "")
			}
			t.handler = dm.handler
		}
	case agentbusv1.Kind_KIND_FILE:
		t.handler = a.file
	}
	if t.webhook == nil && t.handler == nil {
		return nil, target{}, webhookReply(platformError(problem.UnknownMethod, "the agent has no such method"), "")
	}
	return a, t, nil
}

// open starts or loads the request's instance and, for a request delivered before, reads what
// the earlier deliveries stored in its thread. It returns the instance and its run id.
func (h *Host) open(ctx context.Context, log *slog.Logger, in *inbound, a *Agent, l *liveInstance) (*Instance, string, error) {
	var inst *Instance
	if err := retry(ctx, log, "starting instance", func() (err error) {
		inst, err = h.startOrLoad(ctx, log, a, l)
		return err
	}); err != nil {
		return nil, "", err
	}
	inst.requestID = in.req.GetRequestId()
	inst.fx = &effects{h: h, req: in.req, agent: in.agent, seq: in.seq}
	if in.recover != recoverNone {
		if err := retry(ctx, log, "reading what earlier deliveries stored", func() error {
			return l.recoverCursor(ctx, h.history, in.req, in.recover == recoverDeep)
		}); err != nil {
			return nil, "", err
		}
	}
	return inst, inst.RunID(), nil
}

// messageWithTools builds what a Chat, Data or File handler sees, with what a chat needs to call
// the agent's Data methods as tools.
func (h *Host) messageWithTools(a *Agent, x *exchange, inst *Instance) *Message {
	req, log := x.req, x.log
	m := h.message(req, x, inst)
	m.tools = &toolEnv{
		agent:   a,
		req:     req,
		log:     log,
		tracer:  h.tracer,
		history: func(pos uint64) historyFunc { return h.historyBefore(req, pos) },
		store: func(ctx context.Context, hm *history.Message) error {
			if _, err := x.storeIn(ctx); err != nil {
				return err
			}
			return retry(ctx, log, "storing a tool call", func() error { return x.store(ctx, hm) })
		},
	}
	return m
}

// runWebhook calls a webhook handler until it answers or its attempts are used up, and returns
// the outgoing message to store. The answer goes to the caller as soon as there is one (early,
// when the handler calls Respond).
func (h *Host) runWebhook(ctx context.Context, log *slog.Logger, in *inbound, hd WebhookHandler, inst *Instance, runID string) (*history.Message, error) {
	req := in.req
	hm := h.metrics.handler(req)
	var answered Response
	respond := func(resp Response) {
		answered = resp
		h.reply(ctx, log, req, in.replyTo, webhookReply(resp, runID))
	}
	var wr *WebhookRequest
	var resp Response
	dead, err := h.attempt(ctx, log, in, inst, nil, func() (bool, error) {
		wr = &WebhookRequest{
			Method:        req.GetMethod(),
			Params:        nonNil(req.GetParams()),
			Body:          req.GetBody(),
			ContentType:   req.GetContentType(),
			Header:        bus.ParseHeaders(req.GetHeaders()),
			RequestID:     req.GetRequestId(),
			ParticipantID: req.GetParticipantId(),
			Attempt:       in.tries.n,
			inst:          inst,
			log:           log,
			respond:       respond,
		}
		resp = callWebhook(ctx, log, hd, wr)
		return resp.retry != nil, resp.retry
	}, "webhook handler failed; retrying", slog.String("method", req.GetMethod()))
	switch {
	case err != nil:
		return nil, err
	case inst.fx.waiting() != nil:
		return nil, errParked
	case dead:
		kept := deadLetterResponse(in, failedAttempts(in))
		respond(kept)
		return webhookOutgoing(req, kept, "dead"), nil
	}
	wr.Respond(resp)
	hm.answered(answered.StatusCode)
	return webhookOutgoing(req, answered, "out"), nil
}

// runMessage calls a Chat, Data or File handler until it answers or its attempts are used up,
// and returns the reply to send and the outgoing message to store. The caller of a streamed
// request is told before each attempt after the first (a retry, or a redelivery) that the answer
// starts over: what earlier attempts streamed is to be discarded.
func (h *Host) runMessage(ctx context.Context, log *slog.Logger, in *inbound, hd Handler, m *Message) (*agentbusv1.Reply, *history.Message, error) {
	req := in.req
	hm := h.metrics.handler(req)
	streamed := req.GetStream() && in.replyTo != ""
	if streamed {
		m.delta = func(text string) {
			h.reply(ctx, log, req, in.replyTo, &agentbusv1.Reply{Partial: true, Delta: text, StatusCode: http.StatusOK})
		}
		if m.tools != nil {
			m.tools.event = func(rep *agentbusv1.Reply) {
				rep.Partial, rep.StatusCode = true, http.StatusOK
				h.reply(ctx, log, req, in.replyTo, rep)
			}
		}
	}
	before := func() {
		m.Attempt = in.tries.n
		if streamed && in.tries.n > 1 {
			h.reply(ctx, log, req, in.replyTo, &agentbusv1.Reply{Partial: true, Restart: true, Attempt: int32(in.tries.n), StatusCode: http.StatusOK})
		}
	}
	var reply Reply
	var failure error
	dead, err := h.attempt(ctx, log, in, m.inst, before, func() (bool, error) {
		reply, failure = callHandler(ctx, log, hd, m)
		return IsRetryable(failure), failure
	}, "handler failed; retrying", slog.Any("type", msgkind.Of(req.GetKind()).History))
	switch {
	case err != nil:
		return nil, nil, err
	case m.inst.fx.waiting() != nil:
		return nil, nil, errParked
	case dead:
		kept := deadLetterResponse(in, failedAttempts(in))
		rep, out := errorReply(req, kept.StatusCode, kept.platformError, string(kept.Content), "dead")
		return rep, out, nil
	}
	rep, out := messageReply(req, reply, failure, log)
	hm.answered(int(rep.GetStatusCode()))
	return rep, out, nil
}

// attempt is the host's attempt loop of one request: it prepares each attempt (rerun, then
// before, when not nil), calls call, times it and records its error on the trace. While call
// answers a failure worth retrying (again true), it waits (in.tries.wait) and tries again, or,
// once the attempts are used up, keeps the request as a dead letter and answers dead. Each
// retry is counted and logged as retrying, with label and the attempt. An error means the
// request was not finished (the host is stopping, or ctx ended).
func (h *Host) attempt(ctx context.Context, log *slog.Logger, in *inbound, inst *Instance, before func(),
	call func() (again bool, failure error), retrying string, label slog.Attr) (dead bool, err error) {
	hm := h.metrics.handler(in.req)
	for {
		if err := h.rerun(ctx, log, in, inst); err != nil {
			return false, err
		}
		if before != nil {
			before()
		}
		start := time.Now()
		again, failure := call()
		hm.observe(start)
		recordAttempt(ctx, failure)
		if !again {
			return false, nil
		}
		if !in.tries.exhausted() {
			hm.count(outcomeRetried)
			log.Warn(retrying, label, "attempt", in.tries.n, "err", failure)
			if err := in.tries.wait(ctx); err != nil {
				return false, err
			}
			continue
		}
		if err := h.deadLetter(ctx, log, in, failure.Error()); err != nil {
			return false, err
		}
		return true, nil
	}
}

// rerun prepares an attempt after the first (a redelivery or a retry): the state goes back to
// where the request found it, retrying while the bus recovers.
func (h *Host) rerun(ctx context.Context, log *slog.Logger, in *inbound, inst *Instance) error {
	inst.fx.restart()
	if in.tries.n <= 1 && in.resume == "" {
		return nil
	}
	inst.fx.mu.Lock()
	inst.fx.replay = true
	inst.fx.mu.Unlock()
	return retry(ctx, log, "undoing an earlier attempt", func() error { return inst.rewind(ctx) })
}

// exchange stores a request's incoming message and its reply in the request's thread. The
// incoming message waits to be stored with the reply, as one record (one store instead of two),
// unless something needs it stored earlier: the handler reading the history before it, a tool
// call stored after it, or a chat message, which the thread's followers see at once.
type exchange struct {
	h      *Host
	log    *slog.Logger
	l      *liveInstance
	req    *agentbusv1.Request
	origin history.Origin // the request's, written on the records it stores
	in     *history.Message

	mu       sync.Mutex
	inStored bool
}

// storeIn stores the incoming message unless it is stored already, retrying while the bus
// recovers, and returns its position.
func (x *exchange) storeIn(ctx context.Context) (uint64, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.inStored {
		if err := retry(ctx, x.log, "storing the incoming message", func() error { return x.store(ctx, x.in) }); err != nil {
			return 0, err
		}
		x.inStored = true
	}
	return x.in.Pos, nil
}

// storeOut stores the reply, with the incoming message when that still waits, retrying while the
// bus recovers.
func (x *exchange) storeOut(ctx context.Context, out *history.Message) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	msgs := []*history.Message{out}
	if !x.inStored {
		msgs = []*history.Message{x.in, out}
	}
	if err := retry(ctx, x.log, "storing the reply", func() error { return x.store(ctx, msgs...) }); err != nil {
		return err
	}
	x.inStored = true
	return nil
}

// finish stores what the request leaves in its thread: the reply, with the incoming message when
// that still waits, or the incoming message alone when the handler answered nothing to keep. A
// reply without an error carries the outgoing message, as its caller sees it, as its content
// (withMessage).
func (x *exchange) finish(ctx context.Context, out *history.Message, rep *agentbusv1.Reply) error {
	if out == nil {
		_, err := x.storeIn(ctx)
		return err
	}
	if err := x.storeOut(ctx, out); err != nil {
		return err
	}
	if rep != nil && rep.Error == "" {
		withMessage(rep, out)
	}
	return nil
}

// withMessage makes out, as its caller sees it (history.Message.Reply), the content of rep, the
// reply of a Chat, Data or File request. A synchronous endpoint writes it into its answer as it
// is, and an agent's call reads its data.
func withMessage(rep *agentbusv1.Reply, out *history.Message) *agentbusv1.Reply {
	r := out.Reply()
	size := 192 + len(r.Data)
	if r.Text != nil {
		size += len(*r.Text)
	}
	rep.Content, _ = r.AppendJSON(make([]byte, 0, size))
	rep.ContentType = history.ReplyContentType
	return rep
}

// store appends msgs (one, or a request and its reply) to the request's thread as one record
// that names the request (history.Origin), reloading the thread's append cursor when another
// writer got there first.
func (x *exchange) store(ctx context.Context, msgs ...*history.Message) error {
	h, l, req := x.h, x.l, x.req
	if err := h.mayAct(ctx); err != nil {
		return err
	}
	tenant, wf, p := req.GetTenantId(), req.GetWorkflowId(), req.GetParticipantId()
	cur, err := l.cursor(ctx, h.history, tenant, p)
	if err != nil {
		return err
	}
	cur.Origin = x.origin
	// History keeps a shortened copy of a message too large to store; the caller still gets m.
	stored := make([]history.Message, len(msgs))
	ptrs := make([]*history.Message, len(msgs))
	for i, m := range msgs {
		stored[i] = *m
		fitForHistory(&stored[i])
		ptrs[i] = &stored[i]
	}
	err = h.history.Append(ctx, tenant, wf, p, cur, ptrs...)
	for i, m := range msgs {
		m.ID, m.CreatedAt, m.Pos = stored[i].ID, stored[i].CreatedAt, stored[i].Pos
	}
	if errors.Is(err, history.ErrConflict) {
		l.staleCursor(p)
	}
	return err
}

// maxStoredMessage bounds a stored message's text and data, so that it always fits in one NATS
// message (1 MiB by default, and JSON escaping can make text up to six times longer). A message
// that could not be stored would block its conversation.
const maxStoredMessage = 128 << 10

// fitForHistory shrinks a message too large to store: its text is cut, and its data replaced by
// a note of its size. The handler still got the whole message; only history keeps less.
func fitForHistory(m *history.Message) {
	if len(m.Data) > maxStoredMessage {
		m.Data, _ = json.Marshal(map[string]any{"truncated": true, "size": len(m.Data)})
	}
	if m.Text == nil {
		return
	}
	text := *m.Text
	// JSON escaping makes text at most six times longer, plus the quotes: a text that fits
	// even so needs no measuring.
	if 6*len(text)+2 <= 2*maxStoredMessage {
		return
	}
	// Measure it encoded.
	for limit := maxStoredMessage; ; limit /= 2 {
		enc, _ := json.Marshal(text)
		if len(enc) <= 2*maxStoredMessage {
			break
		}
		text = strings.ToValidUTF8(text[:min(limit, len(text))], "") + "…"
	}
	m.Text = &text
}

// message builds what a Chat, Data or File handler sees of the request x stores.
func (h *Host) message(req *agentbusv1.Request, x *exchange, inst *Instance) *Message {
	in := x.in
	m := &Message{
		Type:          in.MessageType,
		Text:          req.GetText(),
		Data:          json.RawMessage(req.GetData()),
		Hint:          req.GetHint(),
		Scope:         req.GetScope(),
		RequestID:     req.GetRequestId(),
		ParticipantID: req.GetParticipantId(),
		ID:            in.ID,
		Timer:         req.GetTimer(),
		inst:          inst,
	}
	if req.GetKind() == agentbusv1.Kind_KIND_DATA {
		m.Text = req.GetMethod()
	}
	if f := req.GetFile(); f != nil {
		m.File = &File{Name: f.GetFileName(), ContentType: f.GetContentType(), Size: f.GetSize(), SHA256: f.GetSha256(),
			Tenant: req.GetTenantId(), Empty: f.GetEmpty(), Invalid: f.GetInvalid(), object: f.GetObject(), store: h.res.Files}
	}
	m.history = func(ctx context.Context, opt HistoryOptions) ([]history.Message, uint64, error) {
		// Reading before the message needs its position: it is stored now.
		pos, err := x.storeIn(ctx)
		if err != nil {
			return nil, 0, err
		}
		return h.historyBefore(req, pos)(ctx, opt)
	}
	return m
}

// historyFunc reads a page of a message's thread (Message.History).
type historyFunc func(ctx context.Context, opt HistoryOptions) ([]history.Message, uint64, error)

// historyBefore reads the request's thread before the message stored at position pos: never the
// message being handled, nor anything after it.
func (h *Host) historyBefore(req *agentbusv1.Request, pos uint64) historyFunc {
	tenant, wf, p := req.GetTenantId(), req.GetWorkflowId(), req.GetParticipantId()
	return func(ctx context.Context, opt HistoryOptions) ([]history.Message, uint64, error) {
		before := opt.Before
		if before == 0 || before > pos {
			before = pos
		}
		return h.history.Page(ctx, tenant, wf, p, history.PageOptions{Size: opt.Size, Before: before, Scope: opt.Scope})
	}
}

// callHandler runs a Chat, Data or File handler, turning a panic into a retryable error.
func callHandler(ctx context.Context, log *slog.Logger, hd Handler, m *Message) (reply Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("handler panicked", "panic", p, "stack", string(debug.Stack()))
			reply, err = NoReply, Retryable(fmt.Errorf("panic: %v", p))
		}
	}()
	return hd.ServeMessage(context.WithValue(ctx, messageKey{}, m), m)
}

// messageReply turns a handler's reply or error into the bus reply and the outgoing message to
// store (nil when the handler sent no reply).
func messageReply(req *agentbusv1.Request, reply Reply, err error, log *slog.Logger) (*agentbusv1.Reply, *history.Message) {
	if err != nil {
		status, slug, detail := failure(log, err)
		return errorReply(req, status, slug, detail, "out")
	}
	if reply.Text == nil && reply.Data == nil {
		return &agentbusv1.Reply{StatusCode: http.StatusOK}, nil
	}
	var data json.RawMessage
	if reply.Data != nil {
		b, err := json.Marshal(reply.Data)
		if err != nil {
			log.Error("encoding reply data", "err", err)
			detail := "the handler's reply could not be encoded"
			return &agentbusv1.Reply{StatusCode: int32(problem.HandlerError.Status), Error: problem.HandlerError.Slug, Content: []byte(detail)}, nil
		}
		data = b
	}
	return &agentbusv1.Reply{StatusCode: http.StatusOK}, outgoing(req, "out", reply.Text, data)
}

// errorReply is the bus reply of a failed message (a problem of type slug) and the outgoing
// message that keeps the failure in history; part names the outgoing message (see outgoing).
func errorReply(req *agentbusv1.Request, status int, slug, detail, part string) (*agentbusv1.Reply, *history.Message) {
	data, _ := json.Marshal(map[string]any{"error": map[string]any{"status": status, "message": detail}})
	out := outgoing(req, part, &detail, data)
	return &agentbusv1.Reply{StatusCode: int32(status), Error: slug, Content: []byte(detail), ContentType: "text/plain; charset=utf-8"}, out
}

// deadLetterResponse is the answer of a request kept as a dead letter; why is what became of
// its attempts (failedAttempts when its handler failed on every one).
func deadLetterResponse(in *inbound, why string) Response {
	return platformError(problem.DeadLettered,
		fmt.Sprintf("%s; the request was kept as dead letter %d, for an operator to replay or discard", why, in.deadID))
}

// failedAttempts says that the handler of in failed on every attempt.
func failedAttempts(in *inbound) string {
	return fmt.Sprintf("the handler failed on all %d attempts", in.tries.n)
}

// incomingMessage is the stored form of the request.
func incomingMessage(req *agentbusv1.Request, body []byte) *history.Message {
	k := msgkind.Of(req.GetKind())
	m := &history.Message{
		ID:            req.GetMessageId(),
		CreatedAt:     createdAt(req.GetCreatedAtMs()),
		Direction:     history.In,
		MessageType:   k.History,
		Hint:          req.GetHint(),
		RequestID:     req.GetRequestId(),
		ParticipantID: req.GetParticipantId(),
		WorkflowID:    req.GetWorkflowId(),
		Scope:         req.GetScope(),
	}
	if m.ID == "" {
		// Ingress names the message; a request without a name gets one derived from its id, so
		// that a redelivery stores it only once.
		m.ID = messageID(req, "")
	}
	if t := req.GetTimer(); t != "" {
		m.Metadata = map[string]string{history.MetaTimer: t}
	}
	// The text is the method of a kind that names one; the data is kept as the kind carries it.
	text := req.GetText()
	if k.Method {
		text = req.GetMethod()
	}
	m.Text = &text
	switch k.Payload {
	case msgkind.HTTPBody:
		m.Data = appendWebhookCall(make([]byte, 0, 64+summaryRoom(body)), req.GetParams(), body)
		m.DataCompact = true
	case msgkind.StoredFile:
		if f := req.GetFile(); f != nil {
			m.Data, _ = json.Marshal(map[string]any{"fileName": f.GetFileName(), "contentType": f.GetContentType(), "fileSize": f.GetSize(), "sha256": f.GetSha256()})
		}
	default:
		m.Data = jsonOrNil(req.GetData())
	}
	return m
}

// outgoing is the stored form of a reply: it carries the request's id, scope and hint, so that a
// thread read by topic shows both sides. Its id derives from the request and part ("out" for the
// handler's answer, "dead" for a dead letter's), so that a redelivery does not store it twice
// while a replayed dead letter's answer is stored beside the dead letter's.
func outgoing(req *agentbusv1.Request, part string, text *string, data json.RawMessage) *history.Message {
	return &history.Message{
		ID:            messageID(req, part),
		CreatedAt:     time.Now().UTC(),
		Direction:     history.Out,
		MessageType:   msgkind.Of(req.GetKind()).History,
		Text:          text,
		Data:          data,
		Hint:          req.GetHint(),
		RequestID:     req.GetRequestId(),
		ParticipantID: req.GetParticipantId(),
		WorkflowID:    req.GetWorkflowId(),
		Scope:         req.GetScope(),
	}
}

func webhookOutgoing(req *agentbusv1.Request, resp Response, part string) *history.Message {
	m := outgoing(req, part, nil, appendWebhookAnswer(make([]byte, 0, 64+summaryRoom(resp.Content)), resp))
	m.DataCompact = true
	return m
}

// appendWebhookCall appends how a webhook call is kept in history:
// {"params":{…},"body":…}, with the parameters in name order and the body as appendBodySummary
// writes it.
func appendWebhookCall(dst []byte, params map[string]string, body []byte) []byte {
	dst = append(dst, `{"params":{`...)
	var room [8]string
	names := room[:0]
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonenc.AppendString(dst, name)
		dst = append(dst, ':')
		dst = jsonenc.AppendString(dst, params[name])
	}
	dst = append(dst, `},"body":`...)
	dst = appendBodySummary(dst, body)
	return append(dst, '}')
}

// appendWebhookAnswer appends how a webhook handler's answer is kept in history:
// {"statusCode":…,"contentType":…,"content":…}, the content as appendBodySummary writes it.
func appendWebhookAnswer(dst []byte, resp Response) []byte {
	dst = append(dst, `{"statusCode":`...)
	dst = jsonenc.AppendInt(dst, int64(resp.StatusCode))
	dst = append(dst, `,"contentType":`...)
	dst = jsonenc.AppendString(dst, resp.ContentType)
	dst = append(dst, `,"content":`...)
	dst = appendBodySummary(dst, resp.Content)
	return append(dst, '}')
}

// summaryRoom is the room to make for appendBodySummary's summary of b: b's length when it is
// kept (escapes or base64 may need more), a few bytes when only its size is: a body of megabytes
// costs no buffer of its size.
func summaryRoom(b []byte) int {
	if len(b) > maxStoredBody {
		return len(`{"size":,"truncated":true}`) + 20
	}
	return len(b)
}

// appendBodySummary appends how a raw body is kept in history: as text when it is short UTF-8,
// else its size (and, when short, base64): {"size":…,"truncated":true} or
// {"base64":…,"size":…}.
func appendBodySummary(dst, b []byte) []byte {
	switch {
	case len(b) > maxStoredBody:
		dst = append(dst, `{"size":`...)
		dst = jsonenc.AppendInt(dst, int64(len(b)))
		return append(dst, `,"truncated":true}`...)
	case utf8.Valid(b):
		return jsonenc.AppendString(dst, string(b))
	default:
		dst = append(dst, `{"base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, b)
		dst = append(dst, `","size":`...)
		dst = jsonenc.AppendInt(dst, int64(len(b)))
		return append(dst, '}')
	}
}

// createdAt is when ingress accepted a request, or now when the envelope names no usable time.
func createdAt(ms int64) time.Time {
	t := time.UnixMilli(ms).UTC()
	if ms <= 0 || !history.Storable(t) {
		return time.Now().UTC()
	}
	return t
}

func jsonOrNil(b []byte) json.RawMessage {
	if len(b) == 0 || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(b)
}
