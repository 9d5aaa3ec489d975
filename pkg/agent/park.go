package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/usage"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// How a request waits (Wait), in the host.
//
// Park: the run that calls Wait returns; the host stores the request's envelope in the waits
// stream under the wait's subject, sets a timer for its deadline, stores the request and a
// "waiting" answer in the thread, answers the caller 202 and writes the wait into the instance
// record (Record.Waits, by participant), then acknowledges the request: nothing of it stays in
// memory.
//
// Every later request of the conversation meets the wait when its instance is opened (the record
// is read anyway), so a conversation without a wait pays nothing. A request that ends the wait
// (a Chat message or a Data call it names, its deadline timer) records the event as the wait's
// step in the parked request's journal and sends the parked request back to the inbox marked to
// resume (HeaderResume), with the reply subject of its own caller; any other request is appended
// to the wait's subject (held) and answered 202. The resumed request, when it comes, sends the
// held requests back to the inbox behind itself (HeaderReleased), purges the wait's subject,
// cancels the deadline, runs its handler again and clears the wait once it has answered; a
// handler that waits again replaces it. Every step is safe to repeat after a crash: publishes
// carry de-duplication ids, the event is recorded once, and the wait is cleared last.

// waitView is how answers and the thread show a wait.
type waitView struct {
	RequestID string        `json:"requestId"`
	Name      string        `json:"name"`
	Chat      bool          `json:"chat,omitempty"`
	Methods   []string      `json:"methods,omitempty"`
	Signals   []string      `json:"signals,omitempty"`
	Deadline  *timefmt.Time `json:"deadline,omitempty"`
	Since     timefmt.Time  `json:"since"`
}

func viewOf(w *instance.Wait) waitView {
	return waitView{RequestID: w.RequestID, Name: w.Name, Chat: w.Chat, Methods: w.Methods, Signals: w.Signals, Deadline: timefmt.OfPtr(w.Deadline), Since: timefmt.Of(w.Since)}
}

// waitOf returns the wait of a conversation of the instance, nil when it has none.
func (i *Instance) waitOf(participant string) *instance.Wait {
	i.live.mu.Lock()
	defer i.live.mu.Unlock()
	return i.live.rec.Waits[participant]
}

// errTooManyWaits means the instance has MaxWaits conversations waiting already.
var errTooManyWaits = fmt.Errorf("the instance has %d conversations waiting", instance.MaxWaits)

// setWait makes w the wait of participant's conversation, or clears it (w nil) when it is still
// the wait named clear: a resumed request clears its own wait only. It writes the record with
// compare-and-set, reading it again after a conflict.
func (i *Instance) setWait(ctx context.Context, participant string, w *instance.Wait, clear string) error {
	l := i.live
	l.mu.Lock()
	defer l.mu.Unlock()
	var backoff bus.ConflictBackoff
	for {
		cur := l.rec.Waits[participant]
		switch {
		case w == nil && (cur == nil || cur.ID != clear):
			return nil
		case w != nil && cur == nil && len(l.rec.Waits) >= instance.MaxWaits:
			return errTooManyWaits
		}
		rec := l.rec
		rec.Waits = maps.Clone(rec.Waits)
		if w == nil {
			delete(rec.Waits, participant)
		} else {
			if rec.Waits == nil {
				rec.Waits = map[string]*instance.Wait{}
			}
			rec.Waits[participant] = w
		}
		if len(rec.Waits) == 0 {
			rec.Waits = nil
		}
		err := l.writeLocked(ctx, rec)
		if err == nil || !errors.Is(err, instance.ErrConflict) {
			return err
		}
		if werr := backoff.Wait(ctx); werr != nil {
			return fmt.Errorf("%w: %w", err, werr)
		}
		if err := retryUntil(ctx, func() error { return l.reloadLocked(ctx) }); err != nil {
			return err
		}
	}
}

// park makes the request wait (pw): see the top of this file. rep and out are filled as the
// caller's answer and the thread's record of it.
func (h *Host) park(ctx context.Context, log *slog.Logger, in *inbound, inst *Instance, x *exchange, pw *pendingWait, runID string) error {
	req := in.req
	wf, p := req.GetWorkflowId(), req.GetParticipantId()
	timeout := pw.f.Timeout
	if timeout == 0 {
		timeout = MaxWait
	}
	now := time.Now().UTC()
	// JetStream timers keep whole seconds: round up, so that a wait never ends early.
	deadline := now.Add(timeout + time.Second - 1).Truncate(time.Second)
	w := &instance.Wait{ID: subject.WaitID(wf, req.GetRequestId(), pw.step), RequestID: req.GetRequestId(), Kind: msgkind.Of(req.GetKind()).Name,
		Step: pw.step, Name: pw.name, Chat: pw.f.Chat, Methods: pw.f.methodsFolded(), Signals: slices.Compact(slices.Sorted(slices.Values(pw.f.Signals))),
		Deadline: &deadline, Since: now}
	if cur := inst.waitOf(p); cur == nil && h.waitsFull(inst) {
		h.refuseWait(ctx, log, in, inst, runID)
		return nil
	}
	if err := retry(ctx, log, "parking the request", func() error { return h.parkCopy(ctx, in, w) }); err != nil {
		return err
	}
	in.keepClaim = true
	if err := retry(ctx, log, "setting the wait's deadline", func() error { return h.setDeadline(ctx, inst, req, w) }); err != nil {
		return err
	}
	// The wait is recorded before the caller is told: a copy of the request delivered again
	// finds it and is answered that it waits (meetWait).
	full := false
	if err := retry(ctx, log, "recording the wait", func() error {
		err := inst.setWait(ctx, p, w, "")
		if errors.Is(err, errTooManyWaits) {
			full, err = true, nil
		}
		return err
	}); err != nil {
		return err
	}
	if full {
		// Other conversations of the instance took the last places meanwhile: the copy is
		// removed (nothing is held behind a wait never recorded) and the deadline left to expire
		// (a deadline finds no wait, and does nothing).
		if err := h.release(ctx, log, req.GetTenantId(), w); err != nil {
			log.Warn("removing the copy of a request that cannot wait", "err", err)
		}
		h.refuseWait(ctx, log, in, inst, runID)
		return nil
	}
	if err := h.answerWaiting(ctx, log, in, x, w, runID); err != nil {
		return err
	}
	log.Info("request waits", "wait", pw.name, "step", pw.step, "deadline", deadline)
	return retry(ctx, log, "recording the run", func() error { return h.finishRun(ctx, log, inst, runID) })
}

// refuseWait answers a request that cannot wait, since its instance has MaxWaits conversations
// waiting, 429 too-many-queued, and drops its journal: the request is done.
func (h *Host) refuseWait(ctx context.Context, log *slog.Logger, in *inbound, inst *Instance, runID string) {
	log.Warn("request cannot wait", "err", errTooManyWaits)
	h.reply(ctx, log, in.req, in.replyTo, webhookReply(platformError(problem.TooManyQueued, errTooManyWaits.Error()), runID))
	h.dropSteps(ctx, log, inst.fx)
}

// answerWaiting stores in the thread that the request waits (w), and answers its caller so.
func (h *Host) answerWaiting(ctx context.Context, log *slog.Logger, in *inbound, x *exchange, w *instance.Wait, runID string) error {
	req := in.req
	rep, out := waitingAnswer(req, w, runID)
	withContent := rep
	if req.GetKind() == agentbusv1.Kind_KIND_WEBHOOK {
		withContent = nil // the answer is the webhook response, not the stored message
	}
	if err := x.finish(ctx, out, withContent); err != nil {
		return err
	}
	h.reply(ctx, log, req, in.replyTo, rep)
	return nil
}

// waitingAnswer is the answer of a request that waits (w), and the thread's record of it: 202
// with {"waiting":{…}}, as a webhook's response or as the outgoing message.
func waitingAnswer(req *agentbusv1.Request, w *instance.Wait, runID string) (*agentbusv1.Reply, *history.Message) {
	view, _ := json.Marshal(map[string]any{"waiting": viewOf(w)})
	if req.GetKind() == agentbusv1.Kind_KIND_WEBHOOK {
		resp := Response{StatusCode: http.StatusAccepted, Content: view, ContentType: "application/json"}
		return webhookReply(resp, runID), webhookOutgoing(req, resp, "wait"+w.ID)
	}
	text := "waiting: " + w.Name
	out := outgoing(req, "wait"+w.ID, &text, view)
	return withMessage(&agentbusv1.Reply{StatusCode: http.StatusAccepted, RunId: runID}, out), out
}

// waitsFull reports whether the instance has as many conversations waiting as it may.
func (h *Host) waitsFull(inst *Instance) bool {
	inst.live.mu.Lock()
	defer inst.live.mu.Unlock()
	return len(inst.live.rec.Waits) >= instance.MaxWaits
}

// parkCopy stores the request's envelope, as delivered and without its reply subject, as the
// first message of the wait's subject. A subject that holds one already (a park done again after
// a crash) is left as it is.
func (h *Host) parkCopy(ctx context.Context, in *inbound, w *instance.Wait) error {
	if err := h.mayAct(ctx); err != nil {
		return err
	}
	data, err := in.envelopeKept()
	if err != nil {
		return fmt.Errorf("encoding the parked request: %w", err)
	}
	tenant := in.req.GetTenantId()
	msg := &nats.Msg{Subject: subject.Wait(tenant, w.ID), Data: data, Header: nats.Header{
		subject.HeaderMsgID: {subject.ParkMsgID(tenant, w.ID)}, jetstream.ExpectedLastSubjSeqHeader: {"0"}}}
	actx, cancel := bus.Attempt(ctx)
	defer cancel()
	ack, err := bus.Publish(actx, h.js, msg)
	if err != nil && !bus.IsConflict(err) {
		return fmt.Errorf("storing the parked request: %w", err)
	}
	h.countWaiting(tenant, msg, ack, err)
	return nil
}

// countWaiting adds a message stored in the waits stream to its tenant's usage, as payloads: a
// waiting request and the requests held behind it count while they wait (release takes them
// off). A message the stream had already (a duplicate, or a park that found the wait's subject
// written) is not counted again.
func (h *Host) countWaiting(tenant string, msg *nats.Msg, ack *jetstream.PubAck, err error) {
	if err != nil || ack == nil || ack.Duplicate {
		return
	}
	h.usage.Add(tenant, usage.Payloads, bus.RecordBytes(msg.Subject, bus.HeaderBytes(msg.Header), len(msg.Data)))
}

// setDeadline sets the timer that ends the wait at its deadline, in the conversation of the
// request.
func (h *Host) setDeadline(ctx context.Context, inst *Instance, req *agentbusv1.Request, w *instance.Wait) error {
	if err := h.mayAct(ctx); err != nil {
		return err
	}
	tr := inst.fx.derived("", req.GetParticipantId())
	tr.Kind = agentbusv1.Kind_KIND_DATA
	name := subject.WaitTimer(w.ID)
	return h.timers.Set(ctx, schedule.Schedule{Name: name, Tenant: req.GetTenantId(), WorkflowID: req.GetWorkflowId(),
		Pattern: schedule.At(*w.Deadline), Request: tr}, subject.DedupeID(req.GetTenantId(), name))
}

// meetWait handles a request of a conversation that has a wait (w), or a resumed request: it
// reports done when the request needs nothing more (it ended the wait, was held behind it, or
// is a stale copy), else the request runs (a resumed one, after its held requests were sent back
// to the inbox).
func (h *Host) meetWait(ctx context.Context, log *slog.Logger, in *inbound, inst *Instance, x *exchange, w *instance.Wait) (done bool, err error) {
	req := in.req
	switch {
	case in.resume != "" && (w == nil || w.ID != in.resume):
		log.Info("a resumed request whose wait is over already; dropping this copy", "wait", in.resume)
		return true, nil
	case in.resume != "":
		if err := retry(ctx, log, "releasing the held requests", func() error { return h.release(ctx, log, req.GetTenantId(), w) }); err != nil {
			return false, err
		}
		if _, err := h.timers.Cancel(ctx, req.GetTenantId(), req.GetWorkflowId(), subject.WaitTimer(w.ID)); err != nil {
			log.Warn("cancelling a wait's deadline; it fires into nothing", "err", err)
		}
		x.inStored = true // stored when the request parked
		return false, nil
	case req.GetRequestId() == w.RequestID:
		// The parked request delivered again after it parked (its host died before it
		// acknowledged it, or its caller sent it again after the de-duplication window): it
		// resumes from the copy the wait keeps, and its caller is told that it waits. A
		// redelivery stores what the first delivery may not have stored yet; a new copy, which
		// cannot tell, stores nothing.
		log.Info("a copy of a waiting request; it resumes from the wait's", "wait", w.ID)
		if in.recover != recoverNone {
			return true, h.answerWaiting(ctx, log, in, x, w, inst.RunID())
		}
		rep, _ := waitingAnswer(req, w, inst.RunID())
		h.reply(ctx, log, req, in.replyTo, rep)
		return true, nil
	}
	ev, ends := eventOf(req, w)
	if ends {
		won, err := h.endWait(ctx, log, in, inst, x, w, ev)
		if err != nil || won {
			return true, err
		}
	}
	return true, h.hold(ctx, log, in, w)
}

// eventOf is the event req makes for the wait w, and whether it ends it.
func eventOf(req *agentbusv1.Request, w *instance.Wait) (Event, bool) {
	ev := Event{ParticipantID: req.GetParticipantId(), RequestID: req.GetRequestId(), At: time.Now().UTC()}
	if sig := req.GetSignal(); sig != "" {
		ev.Type, ev.Method, ev.Data = EventSignal, sig, jsonOrNil(req.GetData())
		return ev, slices.Contains(w.Signals, sig)
	}
	k, ok := msgkind.Lookup(req.GetKind())
	if !ok || k.Event == "" || req.GetTimer() != "" {
		return ev, false
	}
	ev.Type = k.Event
	if k.Method {
		ev.Method, ev.Data = req.GetMethod(), jsonOrNil(req.GetData())
		return ev, slices.Contains(w.Methods, k.MethodKey(req.GetMethod()))
	}
	ev.Text = req.GetText()
	return ev, w.Chat
}

// endWait ends w with ev: it records ev as the wait's step in the parked request's journal and
// sends the parked request back to the inbox to resume. It reports false when another event ended
// the wait first (ev is then held like any request). A request's own caller gets the resumed
// request's answer when both are messages; else it is answered that the wait ended.
func (h *Host) endWait(ctx context.Context, log *slog.Logger, in *inbound, inst *Instance, x *exchange, w *instance.Wait, ev Event) (bool, error) {
	req := in.req
	data, err := json.Marshal(ev)
	if err != nil {
		return false, fmt.Errorf("encoding the wait's event: %w", err)
	}
	parked := &effects{h: h, req: &agentbusv1.Request{TenantId: req.GetTenantId(), WorkflowId: req.GetWorkflowId(), RequestId: w.RequestID}}
	stored, err := parked.recordStep(ctx, w.Step, &stepRecord{Name: w.Name, Result: data})
	switch {
	case errors.Is(err, errStepTooLarge):
		detail := fmt.Sprintf("the message is too large to end the wait of request %s", w.RequestID)
		h.reply(ctx, log, req, in.replyTo, webhookReply(platformError(problem.BodyTooLarge, detail), ""))
		return true, nil
	case err != nil:
		return false, err
	}
	var first Event
	if json.Unmarshal(stored.Result, &first) != nil || first.RequestID != ev.RequestID || first.Type != ev.Type {
		return false, nil // another event ended it first
	}
	if ev.Type != EventTimeout {
		if _, err := x.storeIn(ctx); err != nil {
			return false, err
		}
	}
	carry := in.replyTo != "" && w.Kind != msgkind.Webhook.Name && req.GetKind() != agentbusv1.Kind_KIND_WEBHOOK
	if err := retry(ctx, log, "resuming the waiting request", func() error { return h.resume(ctx, in, w, carry) }); err != nil {
		return false, err
	}
	log.Info("wait ended", "wait", w.Name, "waiting", w.RequestID, "event", ev.Type)
	switch {
	case ev.Type == EventTimeout:
	case carry && !req.GetKeepResult():
	default:
		// The caller is not answered by the resumed request (or a retry of its call with the
		// same request id is answered from the result cache): it is told what it resumed.
		resumed, _ := json.Marshal(map[string]any{"resumed": w.RequestID})
		rep := &agentbusv1.Reply{StatusCode: http.StatusOK}
		if err := x.finish(ctx, outgoing(req, "out", nil, resumed), rep); err != nil {
			return false, err
		}
		to := in.replyTo
		if carry {
			to = ""
		}
		h.reply(ctx, log, req, to, rep)
	}
	return true, nil
}

// resume sends the parked request of w back to the inbox, marked to resume, with the reply
// subject of in's caller when carry is set.
func (h *Host) resume(ctx context.Context, in *inbound, w *instance.Wait, carry bool) error {
	tenant := in.req.GetTenantId()
	raw, err := h.res.Waits.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject.Wait(tenant, w.ID)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // resumed already: its subject is purged
	}
	if err != nil {
		return fmt.Errorf("reading the parked request: %w", err)
	}
	env := new(agentbusv1.Request)
	if err := proto.Unmarshal(raw.Data, env); err != nil {
		return fmt.Errorf("decoding the parked request: %w", err)
	}
	env.ReplyTo, env.Stream = "", false
	if carry {
		env.ReplyTo, env.Stream = in.replyTo, in.req.GetStream()
	}
	data, err := proto.Marshal(env)
	if err != nil {
		return fmt.Errorf("encoding the resumed request: %w", err)
	}
	msg := inboxCopy(env, data, nats.Header{subject.HeaderResume: {w.ID}, subject.HeaderMsgID: {subject.ResumeMsgID(tenant, w.ID)}})
	if err := h.mayAct(ctx); err != nil {
		return err
	}
	_, err = bus.Publish(ctx, h.js, msg)
	return err
}

// hold appends the request to the wait's subject, to run once the waiting request resumed, and
// answers its caller 202. A wait that holds subject.MaxHeld requests refuses more (429).
func (h *Host) hold(ctx context.Context, log *slog.Logger, in *inbound, w *instance.Wait) error {
	req := in.req
	tenant := req.GetTenantId()
	data, err := in.envelopeKept()
	if err != nil {
		return fmt.Errorf("encoding the held request: %w", err)
	}
	msg := &nats.Msg{Subject: subject.Wait(tenant, w.ID), Data: data, Header: nats.Header{subject.HeaderMsgID: {subject.HoldMsgID(tenant, w.ID, in.seq)}}}
	full := false
	err = retry(ctx, log, "holding the request behind a waiting one", func() error {
		if err := h.mayAct(ctx); err != nil {
			return err
		}
		actx, cancel := bus.Attempt(ctx)
		defer cancel()
		ack, err := bus.Publish(actx, h.js, msg)
		if heldFull(err) {
			full, err = true, nil
		}
		h.countWaiting(tenant, msg, ack, err)
		return err
	})
	if err != nil {
		return err
	}
	if full {
		detail := fmt.Sprintf("%d requests are queued behind request %s, which waits", subject.MaxHeld, w.RequestID)
		h.reply(ctx, log, req, in.replyTo, webhookReply(platformError(problem.TooManyQueued, detail), ""))
		return nil
	}
	in.keepClaim = true
	view, _ := json.Marshal(map[string]any{"queued": map[string]any{"behind": viewOf(w)}})
	var rep *agentbusv1.Reply
	if req.GetKind() == agentbusv1.Kind_KIND_WEBHOOK {
		rep = webhookReply(Response{StatusCode: http.StatusAccepted, Content: view, ContentType: "application/json"}, "")
	} else {
		rep = withMessage(&agentbusv1.Reply{StatusCode: http.StatusAccepted}, outgoing(req, "held", nil, view))
	}
	h.reply(ctx, log, req, in.replyTo, rep)
	log.Info("request held behind a waiting one", "waiting", w.RequestID)
	return nil
}

// errCodeStoreFailed is JetStream's error code for a message the stream did not store; with the
// waits stream's per-subject limit it means the wait holds as many requests as it may.
const errCodeStoreFailed jetstream.ErrorCode = 10077

// heldFull reports whether err refused a held request because its wait holds subject.MaxHeld.
func heldFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed && strings.Contains(apiErr.Description, "per subject")
}

// release sends the requests held behind w back to the inbox in order, marked released, and
// purges the wait's subject; once it is purged, the tenant's usage no longer counts what it held.
func (h *Host) release(ctx context.Context, log *slog.Logger, tenant string, w *instance.Wait) error {
	subj := subject.Wait(tenant, w.ID)
	next := uint64(1)
	first := true
	var removed []bus.Stored // what the purge takes off the tenant's usage
	for {
		actx, cancel := bus.Attempt(ctx)
		raw, err := h.res.Waits.GetMsg(actx, next, jetstream.WithGetMsgSubject(subj))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading a held request: %w", err)
		}
		next = raw.Sequence + 1
		removed = append(removed, bus.Stored{Bytes: bus.StoredBytes(raw), At: raw.Time})
		if first { // the parked request itself
			first = false
			continue
		}
		env := new(agentbusv1.Request)
		if err := proto.Unmarshal(raw.Data, env); err != nil {
			log.Error("dropping an undecodable held request", "err", err)
			continue
		}
		msg := inboxCopy(env, raw.Data, nats.Header{subject.HeaderReleased: {w.ID}, subject.HeaderMsgID: {subject.ReleaseMsgID(tenant, w.ID, raw.Sequence)}})
		if err := h.mayAct(ctx); err != nil {
			return err
		}
		actx, cancel = bus.Attempt(ctx)
		_, err = bus.Publish(actx, h.js, msg)
		cancel()
		if err != nil {
			return fmt.Errorf("releasing a held request: %w", err)
		}
	}
	if err := h.mayAct(ctx); err != nil {
		return err
	}
	actx, cancel := bus.Attempt(ctx)
	defer cancel()
	if err := h.res.Waits.Purge(actx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("removing the wait's requests: %w", err)
	}
	for _, r := range removed {
		h.usage.AddAt(tenant, usage.Payloads, -r.Bytes, r.At)
	}
	return nil
}

// signal handles a signal sent over the API: it ends the wait of its conversation that names it,
// and is answered as a message that ends a wait is (endWait); when no wait of the conversation
// names it, or another event ended the wait first, it is answered 409 not-waiting. Nothing of it
// is held or stored otherwise.
func (h *Host) signal(ctx context.Context, log *slog.Logger, in *inbound) error {
	req := in.req
	refuse := func() error {
		detail := fmt.Sprintf("no request of the conversation waits for signal %s", subject.Quote(req.GetSignal()))
		h.reply(ctx, log, req, in.replyTo, webhookReply(platformError(problem.NotWaiting, detail), ""))
		return nil
	}
	a := h.agents[req.GetAgentName()]
	if a == nil || !a.hasWorkflowType(req.GetWorkflowType()) || !a.servesTenant(req.GetTenantId()) {
		h.reply(ctx, log, req, in.replyTo, webhookReply(platformError(problem.UnknownAgent, "no such agent or workflow type"), ""))
		return nil
	}
	l := h.live.acquire(req.GetTenantId(), req.GetWorkflowId())
	defer h.live.release(l)
	inst, _, err := h.open(ctx, log, in, a, l)
	if err != nil {
		return err
	}
	w := inst.waitOf(req.GetParticipantId())
	if w == nil {
		return refuse()
	}
	ev, ends := eventOf(req, w)
	if !ends {
		return refuse()
	}
	x := &exchange{h: h, log: log, l: l, req: req, origin: in.origin(), in: incomingMessage(req, nil)}
	won, err := h.endWait(ctx, log, in, inst, x, w, ev)
	if err != nil || won {
		return err
	}
	return refuse()
}

// envelopeKept is the request's envelope as the inbox delivered it (a claim check stays one),
// without its reply subject, encoded: what a wait keeps of a parked or held request, whose
// caller was answered already.
func (in *inbound) envelopeKept() ([]byte, error) {
	env := proto.Clone(&in.decoded).(*agentbusv1.Request)
	env.ReplyTo = ""
	return proto.Marshal(env)
}

// inboxCopy is an inbox message of a request a wait kept (env, encoded as data), sent to its
// conversation again with hdr.
func inboxCopy(env *agentbusv1.Request, data []byte, hdr nats.Header) *nats.Msg {
	return &nats.Msg{Subject: subject.Inbox(env.GetAgentName(), env.GetTenantId(), env.GetWorkflowId(), env.GetParticipantId()), Data: data, Header: hdr}
}

// waitDeadline handles the timer that ends a wait at its deadline: it ends the wait, unless the
// wait is over already.
func (h *Host) waitDeadline(ctx context.Context, log *slog.Logger, in *inbound, waitID string) error {
	req := in.req
	a := h.agents[req.GetAgentName()]
	if a == nil {
		return nil
	}
	l := h.live.acquire(req.GetTenantId(), req.GetWorkflowId())
	defer h.live.release(l)
	inst, _, err := h.open(ctx, log, in, a, l)
	if err != nil {
		return err
	}
	w := inst.waitOf(req.GetParticipantId())
	if w == nil || w.ID != waitID {
		return nil
	}
	x := &exchange{h: h, log: log, l: l, req: req, origin: in.origin(), in: incomingMessage(req, nil)}
	_, err = h.endWait(ctx, log, in, inst, x, w, Event{Type: EventTimeout, At: time.Now().UTC()})
	return err
}
