package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// process handles one request and acknowledges it. It returns false if it gave the request back
// to the bus unfinished (the host is shutting down), to be delivered again.
func (h *Host) process(ctx context.Context, d *delivery) (finished bool) {
	ctx = withFence(ctx, d.part)
	if err := h.mayAct(ctx); err != nil {
		return h.notActed(h.log, d, err)
	}
	in, log, ok := h.decode(d)
	if !ok {
		return true
	}
	if h.erasedBefore(in.req.GetTenantId(), d.stored) {
		log.Info("dropping, unrun, a request of a tenant whose data was erased after it was stored")
		return h.finish(ctx, log, d, nil)
	}
	if h.tracer != nil {
		var span trace.Span
		ctx, span = h.startSpan(ctx, in.header, in)
		defer func() { endSpan(span, in, finished) }()
	}
	if settled, finished := h.settleHandled(ctx, log, d, in); settled {
		return finished
	}
	claim := in.req.GetEnvelopeRef()
	if claim != nil {
		if settled, finished := h.loadClaim(ctx, log, d, in); settled {
			return finished
		}
	}
	if settled, finished := h.settleEarly(ctx, log, d, in); settled {
		return finished
	}
	if err := h.handle(ctx, log, in); err != nil {
		if errors.Is(err, errFenced) {
			return h.notActed(log, d, err)
		}
		log.Warn("request not finished; giving it back", "err", err)
		return h.giveBack(log, d)
	}
	if !h.finish(ctx, log, d, nil) {
		return false
	}
	if claim != nil && !in.deadLettered && !in.keepClaim {
		if err := h.claims.Delete(ctx, claim); err != nil {
			log.Warn("deleting request claim", "err", err)
		}
	}
	return true
}

// decode reads a delivery's request, where its reply goes and how often it was delivered. A
// delivery that can never be handled (no metadata, an undecodable request) is terminated, and
// ok is false.
func (h *Host) decode(d *delivery) (in *inbound, log *slog.Logger, ok bool) {
	h.mu.Lock()
	m := d.msg
	d.started = time.Now()
	h.mu.Unlock()
	md, err := m.Metadata()
	if err != nil {
		h.log.Error("dropping a delivery without metadata", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return nil, nil, false
	}
	// One allocation holds what the request's handling needs of its delivery: the request, its
	// attempts and its logger.
	in = &inbound{seq: d.seq, stored: d.stored, agent: d.part.key.agent, data: m.Data(), header: m.Headers(),
		delivered: md.NumDelivered,
		tries: attempts{n: int(md.NumDelivered), max: h.cfg.MaxDeliveries, backoff: h.cfg.RetryBackoff, stopping: h.stopping,
			h: h, d: d}}
	req := &in.decoded
	if err := proto.Unmarshal(m.Data(), req); err != nil {
		h.log.Error("dropping undecodable request", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return nil, nil, false
	}
	if md.NumDelivered > 1 {
		h.metrics.redelivered(d.part.key.agent, req)
	}
	in.req, in.replyTo = req, replySubject(m.Headers(), req)
	in.resume, in.released = m.Headers().Get(subject.HeaderResume), m.Headers().Get(subject.HeaderReleased) != ""
	in.replayed = m.Headers().Get(subject.HeaderReplay) != ""
	in.resent = m.Headers().Get(subject.HeaderResent) != ""
	switch {
	case in.replayed:
		in.recover = recoverDeep // later requests of its conversation ran after its attempts
	case md.NumDelivered > 1:
		in.recover = recoverTail
	}
	in.logHandler = requestHandler{base: h.log.Handler(), req: req, seq: d.seq, delivered: md.NumDelivered}
	in.log = *slog.New(&in.logHandler)
	return in, &in.log, true
}

// loadClaim replaces a request sent as a claim check with the whole request. A request whose
// stored copy is gone can never run and must not hold up its conversation: it is dead-lettered,
// and settled is true, as it is when the copy cannot be read now (the request is given back).
// A copy delivered again whose own record, or a later request's, is its thread's newest was
// finished before (a host deletes the stored copy only after it acknowledged the request, and
// the acknowledgement was lost): it is acknowledged, as is a second copy the inbox stored whose
// first copy stored its messages (storedEarlier).
func (h *Host) loadClaim(ctx context.Context, log *slog.Logger, d *delivery, in *inbound) (settled, finished bool) {
	full, err := h.readClaim(ctx, log, in.req.GetEnvelopeRef())
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		if in.recover == recoverTail {
			if newest, ok := h.newestOrigin(ctx, log, in); ok && (newest == in.origin() || in.origin().Before(newest)) {
				log.Info("request finished before (its stored copy is deleted, and its record or a later one is its thread's newest); acknowledging this copy", "seq", in.seq)
				return true, h.finish(ctx, log, d, nil)
			}
		}
		if h.storedEarlier(ctx, log, in) {
			log.Warn("request stored twice, and its first copy was handled (its stored copy is deleted, and its messages are in its thread); acknowledging this copy", "seq", in.seq)
			h.answerHandled(ctx, log, in)
			return true, h.finish(ctx, log, d, nil)
		}
		return true, h.deadLetterUnrun(ctx, log, d, in, "the request's stored copy is missing")
	case err != nil:
		return true, h.giveBack(log, d)
	}
	in.req = full
	return false, false
}

// settleEarly finishes a request that must not run: one answered before (its kept result is the
// answer; one whose result is missing is acknowledged when this host finished it lately, or,
// delivered again, when its thread shows it was handled), or one delivered more often than it
// may be tried (dead-lettered).
//
// A request with a caller-chosen requestId may have been handled already: redelivered because
// its acknowledgement was lost, or stored twice because the stream's leader failed while the
// caller's first attempt was being accepted (a NATS cluster checks Nats-Msg-Id on the leader
// only, so a retry reaching a new leader before it applied the first copy is stored again).
func (h *Host) settleEarly(ctx context.Context, log *slog.Logger, d *delivery, in *inbound) (settled, finished bool) {
	if in.req.GetKeepResult() && in.resume == "" && !in.released {
		// A resumed or released request's cached answer is the 202 it got when it waited or
		// was held: it runs.
		// Read while the bus recovers: a request given back at once would come back at once,
		// and a NATS leader election would use its attempts up in milliseconds.
		var answered bool
		err := retry(ctx, log, "reading the result cache", func() (err error) {
			answered, err = h.answerFromCache(ctx, log, in.req, in.replyTo, in.replayed)
			return err
		})
		if err != nil {
			log.Warn("request not started; giving it back", "err", err)
			return true, h.giveBack(log, d)
		}
		if answered {
			return true, h.finish(ctx, log, d, nil)
		}
		// The result is not there: the request is new, or its result could not be kept, went
		// with its window, or was not read back. A copy this host finished lately (unless it is
		// a replayed dead letter, which ran and failed), one delivered again after a later
		// request of its conversation stored messages, or a second copy stored of a request whose
		// first copy stored its messages, ran: running it again would repeat it.
		lately := !in.replayed && h.live.keptLately(in.req, h.res.Config.DedupeWindow)
		if lately {
			log.Warn("request finished on this host lately, but its kept result is missing; acknowledging this copy")
		}
		if lately || h.ranBefore(ctx, log, in) {
			h.answerHandled(ctx, log, in)
			return true, h.finish(ctx, log, d, nil)
		}
	}
	if in.tries.overdrawn() {
		// Delivered more often than it may be tried: the hosts that had it died with it, which a
		// request that crashes its host does every time.
		cause := fmt.Sprintf("delivered %d times without being finished: the hosts handling it stopped or crashed", in.delivered-1)
		return true, h.deadLetterUnrun(ctx, log, d, in, cause)
	}
	return false, false
}

// answerHandled answers a caller waiting for a copy of a request that was handled before, and
// whose kept result was not found: from the result if a second read finds it (the first may have
// missed it while the bus recovered), else with 502 reply-unavailable: its answer is gone. That
// answer is not kept in the result cache, where it could take the result's place.
func (h *Host) answerHandled(ctx context.Context, log *slog.Logger, in *inbound) {
	if in.replyTo == "" {
		return
	}
	if answered, err := h.answerFromCache(ctx, log, in.req, in.replyTo, false); answered || err != nil {
		return // an error: the caller's own reads of the result answer it, or its time runs out
	}
	if err := h.mayAct(ctx); err != nil { // as reply: a host whose partition was taken over is quiet
		log.Warn("answer of a request handled before not sent", "err", err)
		return
	}
	rep := webhookReply(platformError(problem.ReplyUnavailable, "the request was handled before, and its answer is no longer kept"), "")
	rep.RequestId, rep.Fingerprint = in.req.GetRequestId(), in.req.GetFingerprint()
	data, err := proto.Marshal(rep)
	if err == nil {
		err = h.cfg.Conn.Publish(in.replyTo, data)
	}
	if err != nil {
		log.Warn("publishing the answer of a request handled before", "err", err)
	}
}

// deadLetterUnrun keeps a request that must not run as a dead letter, answers a caller still
// waiting for it as after failed attempts, and finishes it; it returns what finish does. Nothing
// is stored in the thread: no handler ran.
func (h *Host) deadLetterUnrun(ctx context.Context, log *slog.Logger, d *delivery, in *inbound, cause string) bool {
	if err := h.deadLetter(ctx, log, in, cause); err != nil {
		return h.finish(ctx, log, d, err)
	}
	h.reply(ctx, log, in.req, in.replyTo, webhookReply(deadLetterResponse(in, cause), ""))
	return h.finish(ctx, log, d, nil)
}

// settleHandled acknowledges, without running it, a copy of a request delivered again after a
// later request of its conversation stored a record in the thread (the thread's newest record
// names a request the inbox stored after this one): the request was handled before, and its
// acknowledgement was lost. A conversation's requests run one at a time in inbox order, so a later
// one stores nothing before this one was finished. This catches what the host's own memory of its
// acknowledgements (dispatch.go) cannot: a copy delivered to another host, or long after.
// A request with a kept result is answered from it instead, and settled by the same check when
// its result is missing (settleEarly), unless it was released from behind a waiting request:
// its kept result is the 202 it got when it was held, and it is settled here. A request whose
// thread cannot be read within threadCheckPatience is handled as any redelivered one.
//
// A second copy of a request, stored because it was sent again (subject.HeaderResent), is
// acknowledged without running when the first copy's messages are in the thread (storedEarlier).
func (h *Host) settleHandled(ctx context.Context, log *slog.Logger, d *delivery, in *inbound) (settled, finished bool) {
	if (in.req.GetKeepResult() && !in.released) || !h.ranBefore(ctx, log, in) {
		return false, false
	}
	return true, h.finish(ctx, log, d, nil)
}

// ranBefore reports whether in's thread shows that in ran before: it was delivered again after
// a later request of its conversation stored a record (handledBefore), or it is a copy sent
// again whose first copy stored its messages (storedEarlier). It logs which.
func (h *Host) ranBefore(ctx context.Context, log *slog.Logger, in *inbound) bool {
	switch {
	case in.recover == recoverTail && h.handledBefore(ctx, log, in):
		log.Info("request handled before (a later request of its conversation stored its messages); acknowledging this copy",
			"later", in.thread.newest.Seq)
	case h.storedEarlier(ctx, log, in):
		log.Warn("request stored twice, and its first copy was handled (its messages are in its thread); acknowledging this copy")
	default:
		return false
	}
	return true
}

// handledBefore reports whether the newest record of in's thread names a request the inbox
// stored after in (newestOrigin): in was handled before.
func (h *Host) handledBefore(ctx context.Context, log *slog.Logger, in *inbound) bool {
	newest, ok := h.newestOrigin(ctx, log, in)
	return ok && in.origin().Before(newest)
}

// newestOrigin reads which request stored the newest record of in's thread, retrying for up to
// threadCheckPatience; ok is false when the thread could not be read. The answer is kept in in:
// a request's thread is read at most once.
func (h *Host) newestOrigin(ctx context.Context, log *slog.Logger, in *inbound) (newest history.Origin, ok bool) {
	if in.thread != nil {
		return in.thread.newest, in.thread.ok
	}
	in.thread = new(threadCheck)
	ctx, cancel := context.WithTimeout(ctx, threadCheckPatience)
	defer cancel()
	req := in.req
	err := retry(ctx, log, "reading the request's thread", func() (err error) {
		newest, err = h.history.NewestOrigin(ctx, req.GetTenantId(), req.GetWorkflowId(), req.GetParticipantId())
		return err
	})
	if err != nil {
		log.Warn("could not tell whether a request delivered again was handled before", "err", err)
		return history.Origin{}, false
	}
	in.thread.newest, in.thread.ok = newest, true
	return newest, true
}

// storedEarlier reports whether in is a second copy of a request that the inbox stored twice,
// whose first copy was handled: in was sent again (subject.HeaderResent; a NATS cluster may
// store such a copy twice through a failover), and its thread's newest records hold messages
// of its request id stored by a request the inbox stored before in, within the de-duplication
// window (history.Store.HeldEarlier). A conversation's requests run one at a time in inbox
// order, so the first copy was finished before this one is delivered. This catches what the
// kept result and the host's memory of its requests cannot: a first copy whose result was not
// kept or read back, handled on another host or long ago.
//
// A replayed or resumed request is never such a copy: it ran before, and runs again. A released
// one is (a request held behind a waiting one stores nothing before it is released). A thread
// that cannot be read within threadCheckPatience counts as no: the copy runs, as it would
// without the check. Only copies sent again pay the read, once: the answer is kept in in.
func (h *Host) storedEarlier(ctx context.Context, log *slog.Logger, in *inbound) bool {
	if !in.resent || in.replayed || in.resume != "" {
		return false
	}
	if in.earlier != nil {
		return *in.earlier
	}
	in.earlier = new(bool)
	ctx, cancel := context.WithTimeout(ctx, threadCheckPatience)
	defer cancel()
	req := in.req
	var held bool
	err := retry(ctx, log, "reading the request's thread", func() (err error) {
		held, err = h.history.HeldEarlier(ctx, req.GetTenantId(), req.GetWorkflowId(), req.GetParticipantId(),
			req.GetRequestId(), in.origin(), h.res.Config.DedupeWindow)
		return err
	})
	if err != nil {
		log.Warn("could not tell whether a request sent again was stored twice", "err", err)
		return false
	}
	*in.earlier = held
	return held
}

// threadCheck is what newestOrigin read of a request's thread.
type threadCheck struct {
	newest history.Origin
	ok     bool
}

// origin names the request as the history records it stores do.
func (in *inbound) origin() history.Origin { return history.Origin{Seq: in.seq, Stored: in.stored} }

// threadCheckPatience bounds settleHandled's read of a thread.
const threadCheckPatience = 5 * time.Second

// inbound is a request being processed: what the inbox delivered and how often it was tried.
type inbound struct {
	seq     uint64
	stored  int64  // when the inbox stored the request (Unix nanoseconds)
	agent   string // the agent of the partition it came from
	data    []byte // the inbox message's payload, as delivered
	req     *agentbusv1.Request
	header  nats.Header // the inbox message's headers
	replyTo string
	// replayed is set on a dead letter an operator replayed (HeaderReplay).
	replayed bool
	// resent is set on a copy its publisher sent again after an earlier send went
	// unacknowledged (HeaderResent): the inbox may hold it twice (storedEarlier).
	resent bool
	// delivered is how often the inbox delivered the request, this time included.
	delivered uint64
	tries     attempts
	// recover is set when earlier deliveries may have stored messages of the request (it is
	// redelivered, or replayed): they are read back before any is stored, so that none is stored
	// twice (history.Store.Recover).
	recover recovery
	// deadLettered is set once the request was kept as a dead letter (its claim stays), as
	// deadID.
	deadLettered bool
	deadID       uint64
	// thread is set once newestOrigin read the request's thread; earlier once storedEarlier did.
	thread  *threadCheck
	earlier *bool
	// resume is the wait a resumed request ends (HeaderResume); released is set on a request
	// that was held behind a waiting one (HeaderReleased). keepClaim is set once the request's
	// envelope is kept by a wait: its stored copy (a claim check) must stay.
	resume    string
	released  bool
	keepClaim bool

	// decoded, logHandler and log are the storage of req as delivered and of the request's
	// logger (requestLog), kept here to spare them allocations of their own.
	decoded    agentbusv1.Request
	logHandler requestHandler
	log        slog.Logger
}

// recovery is how a request's host looks for messages its earlier deliveries stored.
type recovery int

const (
	recoverNone recovery = iota // a first delivery
	recoverTail                 // redelivered: they are the thread's newest records
	recoverDeep                 // replayed: they are among the thread's last records
)

// readClaim reads the whole request a claim check stands for, retrying while the bus recovers.
func (h *Host) readClaim(ctx context.Context, log *slog.Logger, ref *agentbusv1.BlobRef) (*agentbusv1.Request, error) {
	full := new(agentbusv1.Request)
	missing := false
	err := retry(ctx, log, "reading the claimed request", func() error {
		data, err := h.claims.Get(ctx, ref)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			missing = true
			return nil
		}
		if err != nil {
			return err
		}
		return proto.Unmarshal(data, full)
	})
	switch {
	case err != nil:
		return nil, err
	case missing:
		return nil, jetstream.ErrObjectNotFound
	}
	return full, nil
}

// finish acknowledges a request the host is done with; a dead-lettering that failed (err) gives
// it back instead.
func (h *Host) finish(ctx context.Context, log *slog.Logger, d *delivery, err error) bool {
	if err != nil {
		log.Warn("request not finished; giving it back", "err", err)
		return h.giveBack(log, d)
	}
	if err := h.mayAct(ctx); err != nil {
		return h.notActed(log, d, err)
	}
	h.mu.Lock()
	m := d.msg
	d.part.noteAckedLocked(d.seq, m.Reply())
	h.acked.add(d.part.inbox.salt+d.seq, d.stored)
	h.mu.Unlock()
	if err := m.Ack(); err != nil {
		log.Warn("acknowledging request", "err", err)
	}
	d.part.inbox.keeper.Acked()
	return true
}

// giveBack returns a request to the bus unfinished, for the partition's owner to take again.
// A request the host may not act on any more (lease.go) is left to the bus's ack wait.
func (h *Host) giveBack(log *slog.Logger, d *delivery) bool {
	if !h.leaseHeld() || d.part.fenced.Load() {
		log.Warn("request not given back: the host's lease lapsed; it comes back after the ack wait", "seq", d.seq)
		return false
	}
	h.mu.Lock()
	m := d.msg
	h.mu.Unlock()
	if err := m.Nak(); err != nil {
		log.Debug("giving a request back", "err", err)
	}
	return false
}

// notActed ends the processing of a request the host may not act on (lease.go): a fenced one is
// left to the host that took its partition over; one whose act was cut short (the host stops)
// comes back after the ack wait. It is neither acknowledged nor given back.
func (h *Host) notActed(log *slog.Logger, d *delivery, err error) bool {
	if errors.Is(err, errFenced) {
		log.Warn("late act refused: another host took the request's partition over", "seq", d.seq, "agent", d.part.key.agent, "partition", d.part.key.n)
		return true
	}
	log.Warn("request left to the bus: the host could not act on it", "seq", d.seq, "err", err)
	return false
}

// replySubject is where the request's waiter wants the reply: the envelope's reply_to, or the
// Agentbus-Reply-To header where an ingress puts it while some host of the agent does not read
// the envelope's (registry.FeatureReplyTo). A replayed dead letter answers no waiter.
func replySubject(hdr nats.Header, req *agentbusv1.Request) string {
	if hdr.Get(subject.HeaderReplay) != "" {
		return ""
	}
	if to := req.GetReplyTo(); to != "" {
		return to
	}
	return hdr.Get(subject.HeaderReplyTo)
}
