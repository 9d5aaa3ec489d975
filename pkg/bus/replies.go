package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/retry"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Replies routes replies published by workflow hosts to the requests of this ingress instance
// that wait for them, and the inbox's acknowledgements of those requests (Waiter.Send). One
// subscription serves every waiter: the subject's last tokens name it.
type Replies struct {
	instance string
	nc       *nats.Conn
	sub      *nats.Subscription
	log      *slog.Logger
	next     atomic.Uint64

	mu      sync.Mutex
	waiters map[string]*Waiter
}

// NewReplies subscribes to the reply subjects of the ingress instance named instance.
func NewReplies(nc *nats.Conn, instance string, log *slog.Logger) (*Replies, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Replies{instance: instance, nc: nc, log: log, waiters: make(map[string]*Waiter)}
	sub, err := nc.Subscribe(subject.ReplyPrefix(instance), r.deliver)
	if err != nil {
		return nil, fmt.Errorf("subscribing to replies: %w", err)
	}
	// Replies must not be dropped when many arrive at once.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("setting reply subscription limits: %w", err)
	}
	r.sub = sub
	return r, nil
}

// Waiter is one pending request's place to receive its reply: partial replies of a streamed
// request first, in order, then the final one.
type Waiter struct {
	r       *Replies
	token   string
	owner   string // whose wait it is (WaitFor), for Withdraw
	Subject string

	// accepted is what the inbox said of the request sent with Send (ackPending, ackAccepted,
	// ackWanted); an acknowledgement that refuses it is ackFailure.
	accepted atomic.Int32
	msg      *nats.Msg // the request sent with Send, for a retry

	// The request's kept result, which Await reads when the reply is late (LookUpResult).
	results     jetstream.KeyValue
	resultKey   string
	fingerprint string
	looking     atomic.Bool       // a lookup is under way
	kept        *agentbusv1.Reply // the kept result a lookup handed to Await; guarded by mu
	duplicate   atomic.Bool       // the inbox held the request already: any kept result answers it

	mu         sync.Mutex
	queue      []*agentbusv1.Reply
	first      [1]*agentbusv1.Reply // queue's first backing array: most calls get one reply
	ackFailure error                // the inbox refused the request, or ErrDuplicate
	withdrawn  error                // Withdraw's error: the wait is over, its reply is not handed on
	notify     chan struct{}        // has a token while queue or ackFailure is not empty
}

// What a waiter knows of its request's acknowledgement.
const (
	ackPending  = iota
	ackAccepted // stored: the reply will come
	ackWanted   // Await waits for the acknowledgement itself: its reply's time is up
)

// Errors of Await.
var (
	// ErrDuplicate means the inbox already held a request with the same de-duplication id: no
	// reply comes for this one.
	ErrDuplicate = errors.New("duplicate request")
	// ErrNotAccepted means the inbox did not store the request (wrapped with the reason): it
	// will not be processed.
	ErrNotAccepted = errors.New("request not accepted")
	// ErrReplyTimeout means the request was stored but its reply did not come in time.
	ErrReplyTimeout = errors.New("timed out waiting for the reply")
	// ErrReused means the inbox held a request with the same de-duplication id whose kept
	// result is for a different request (another fingerprint): the id was reused.
	ErrReused = errors.New("request id reused for a different request")
)

// lookupEvery is how often Await reads a late reply's kept result again (LookUpResult), and
// lookupTimeout how long one read may take: while the results bucket elects a leader a read
// gets no answer, and the next one goes to the new leader.
var (
	lookupEvery   = time.Second
	lookupTimeout = time.Second
)

// LookUpResult makes Await read the request's kept result (results, key; a workflow host
// writes it before it sends the reply) when the reply is late: when neither the reply nor,
// for a request not yet acknowledged, the acknowledgement came within resendAfter of Send, and
// then every lookupEvery until one of them comes. A kept result with the request's fingerprint
// answers Await as the reply would. A reply can be lost where an acknowledged request is not: it
// goes over core NATS, and dies with the NATS server it passes through.
//
// With it, a duplicate (the inbox held a request with the same de-duplication id) does not end
// Await with ErrDuplicate: the kept result is read at once, and then ever more slowly, up to
// every lookupEvery, until it is there or the reply's time is up (the first request may still
// run); a kept result with another fingerprint ends Await with ErrReused. Call it before Await,
// for a request sent with a de-duplication id.
func (w *Waiter) LookUpResult(results jetstream.KeyValue, key, fingerprint string) {
	w.results, w.resultKey, w.fingerprint = results, key, fingerprint
}

// lookUp reads the request's kept result in a goroutine of its own, unless a read is under way,
// and hands it to Await as a reply when it is the request's; ctx ends the read.
func (w *Waiter) lookUp(ctx context.Context) {
	if !w.looking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer w.looking.Store(false)
		ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		e, err := w.results.Get(ctx, w.resultKey)
		if err != nil {
			return // not kept yet, or no answer from the bucket: read again later
		}
		rep := new(agentbusv1.Reply)
		if err := proto.Unmarshal(e.Value(), rep); err != nil {
			return
		}
		if rep.GetFingerprint() != w.fingerprint {
			if w.duplicate.Load() {
				w.fail(ErrReused)
			}
			// Otherwise the result of an earlier request whose id's de-duplication window
			// ended: the host runs this one and writes its result over it.
			return
		}
		w.mu.Lock()
		w.kept = rep
		w.mu.Unlock()
		w.push(rep)
	}()
}

// FromKeptResult reports whether rep, returned by Await, is the request's kept result rather
// than its reply (LookUpResult).
func (w *Waiter) FromKeptResult(rep *agentbusv1.Reply) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return rep != nil && rep == w.kept
}

// Wait registers a new waiter; call Done when no longer waiting.
func (r *Replies) Wait() *Waiter { return r.WaitFor("") }

// WaitFor registers a new waiter on behalf of owner (an API key's id, say), whose waits Withdraw
// ends; call Done when no longer waiting.
func (r *Replies) WaitFor(owner string) *Waiter {
	token := strconv.FormatUint(r.next.Add(1), 36)
	w := &Waiter{r: r, token: token, owner: owner, Subject: subject.Reply(r.instance, token), notify: make(chan struct{}, 1)}
	w.queue = w.first[:0]
	r.mu.Lock()
	r.waiters[token] = w
	r.mu.Unlock()
	return w
}

// Withdraw ends the waits of owner's waiters (WaitFor): their Await and Receive return err at
// once, and no reply is handed on after it. It returns how many waits it ended; an owner ""
// has none. It goes through every waiter, for an event as rare as a revoked API key: waiting
// costs a call nothing more.
func (r *Replies) Withdraw(owner string, err error) int {
	if owner == "" {
		return 0
	}
	var ended []*Waiter
	r.mu.Lock()
	for _, w := range r.waiters {
		if w.owner == owner {
			ended = append(ended, w)
		}
	}
	r.mu.Unlock()
	for _, w := range ended {
		w.mu.Lock()
		w.withdrawn = err
		w.mu.Unlock()
		w.wake()
	}
	return len(ended)
}

// Done forgets the waiter; a reply arriving later is dropped (it is still in the result cache
// when the request was idempotent).
func (w *Waiter) Done() {
	w.r.mu.Lock()
	delete(w.r.waiters, w.token)
	w.r.mu.Unlock()
}

// Receive waits for the next reply (partial or final) or for ctx to end. Once the wait is
// withdrawn (Withdraw) it returns Withdraw's error.
func (w *Waiter) Receive(ctx context.Context) (*agentbusv1.Reply, error) {
	for {
		w.mu.Lock()
		rep, withdrawn := w.take(), w.withdrawn
		w.mu.Unlock()
		if withdrawn != nil {
			return nil, withdrawn
		}
		if rep != nil {
			return rep, nil
		}
		select {
		case <-w.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Send publishes m, a request for a stream, with the waiter's acknowledgement subject as its
// reply subject, without waiting: Await reads the acknowledgement as it reads the reply. A
// synchronous call so costs one wait, where Publish and then Receive cost two.
func (w *Waiter) Send(m *nats.Msg) error {
	m.Reply = subject.ReplyAck(w.r.instance, w.token)
	w.msg = m
	if err := w.r.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAccepted, err)
	}
	return nil
}

// Await waits for the final reply to the request sent with Send, dropping partial ones. The
// request must be stored within accept (else ErrNotAccepted) and answered within timeout of the
// call (else ErrReplyTimeout, once it is known to be stored). While no stream answers (a stream
// leader being elected) it publishes the request again, as Publish does, until accept or timeout
// is up, whichever comes first. It returns ErrDuplicate when the inbox held the request already
// (unless LookUpResult was called), ctx's error when ctx ends first, and Withdraw's error once
// the wait is withdrawn.
func (w *Waiter) Await(ctx context.Context, accept, timeout time.Duration) (*agentbusv1.Reply, error) {
	a := awaiting{w: w, start: time.Now(), accept: accept, timeout: timeout}
	a.arm()
	defer a.disarm()
	for {
		w.mu.Lock()
		rep, failure, withdrawn := w.take(), w.ackFailure, w.withdrawn
		w.ackFailure = nil
		w.mu.Unlock()
		if withdrawn != nil {
			return nil, withdrawn
		}
		if rep != nil {
			// A reply means the request was stored, whatever became of its acknowledgement.
			if !rep.GetPartial() {
				return rep, nil
			}
			continue
		}
		if failure != nil {
			if err := a.refused(ctx, failure); err != nil {
				return nil, err
			}
			continue
		}
		if a.late && w.accepted.Load() == ackAccepted {
			return nil, ErrReplyTimeout
		}
		if err := a.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// awaiting is the state of one Await call.
type awaiting struct {
	w               *Waiter
	start           time.Time
	accept, timeout time.Duration
	t               *time.Timer // fires when accept or timeout is up, whichever is next
	resend          *time.Timer
	resendC         <-chan time.Time // nil: nothing to send again
	backoff         noStreamBackoff
	late            bool // the reply's time is up; only the acknowledgement is awaited
	lookups         int  // after a duplicate, the reads of the kept result so far (lookupPolicy)
	lookupCtx       context.Context
	lookupStop      context.CancelFunc // ends the reads of the kept result when Await returns
}

// lookUp starts a read of the kept result (Waiter.lookUp) in a context that ends with Await,
// made on the first read: a call answered in time pays nothing for it.
func (a *awaiting) lookUp(ctx context.Context) {
	if a.lookupStop == nil {
		a.lookupCtx, a.lookupStop = context.WithCancel(ctx)
	}
	a.w.lookUp(a.lookupCtx)
}

// arm takes a's timers from the pool and starts them.
//
// A request with a de-duplication id whose acknowledgement does not come (the server that took
// it died, or the connection to it did) is sent again every resendAfter: the id keeps the inbox
// from storing it twice. A new stream leader that has not applied the first copy yet may store
// it again; the host then answers the copy from the result cache, as it does a caller's retry,
// or, when that is not found, tells it from the first copy's messages in the request's thread
// (the copy sent again is marked, markResent).
// The same timer paces the reads of the kept result (LookUpResult).
func (a *awaiting) arm() {
	a.t = timers.Get().(*time.Timer)
	a.t.Reset(min(a.accept, a.timeout))
	if a.w.msg.Header.Get(jetstream.MsgIDHeader) != "" {
		a.resend = timers.Get().(*time.Timer)
		a.resend.Reset(resendAfter)
		a.resendC = a.resend.C
	}
}

// startResend sets the resend timer to fire after d, taking it from the pool if a request
// without a de-duplication id had none.
func (a *awaiting) startResend(d time.Duration) {
	if a.resend == nil {
		a.resend = timers.Get().(*time.Timer)
	}
	a.resend.Reset(d)
	a.resendC = a.resend.C
}

// disarm stops a's timers and returns them to the pool. Since Go 1.23 a stopped timer's
// channel holds no stale value: it can be reused.
func (a *awaiting) disarm() {
	if a.lookupStop != nil {
		a.lookupStop()
	}
	if a.resend != nil {
		a.resend.Stop()
		timers.Put(a.resend)
	}
	a.t.Stop()
	timers.Put(a.t)
}

// refused handles an acknowledgement that did not accept the request. It returns nil when the
// request was published again because no stream answered yet, and otherwise the error that
// ends Await.
func (a *awaiting) refused(ctx context.Context, failure error) error {
	switch {
	case errors.Is(failure, ErrDuplicate) && a.w.results != nil:
		// Stored before, by this call's first copy whose acknowledgement was lost or by an
		// earlier call: the reply comes here, or the kept result answers.
		a.w.duplicate.Store(true)
		a.w.accepted.Store(ackAccepted)
		a.lookUp(ctx)
		a.lookups = 1
		a.startResend(lookupPolicy().Delay(a.lookups))
		return nil
	case errors.Is(failure, ErrDuplicate), errors.Is(failure, ErrReused):
		return failure
	case notStoredYet(failure):
		again, err := a.backoff.pause(ctx, a.start.Add(min(a.accept, a.timeout)))
		if err != nil {
			return err
		}
		if !again {
			return fmt.Errorf("%w: %w", ErrNotAccepted, noStreamErr(failure))
		}
		if !errors.Is(failure, nats.ErrNoResponders) {
			markResent(a.w.msg)
		}
		if err := a.w.r.nc.PublishMsg(a.w.msg); err != nil {
			return fmt.Errorf("%w: %w", ErrNotAccepted, err)
		}
		return nil
	default:
		return fmt.Errorf("%w: %w", ErrNotAccepted, failure)
	}
}

// wait blocks until deliver signals the waiter, the request is due to be sent again, or a
// timer fires. It returns the error that ends Await, if any.
func (a *awaiting) wait(ctx context.Context) error {
	select {
	case <-a.w.notify:
	case <-ctx.Done():
		return ctx.Err()
	case <-a.resendC:
		if a.w.results != nil {
			a.lookUp(ctx)
		}
		if a.w.accepted.Load() == ackAccepted {
			switch {
			case a.w.results == nil:
				a.resendC = nil
			case a.lookups > 0: // after a duplicate: the first request may be about done
				a.lookups++
				a.resend.Reset(lookupPolicy().Delay(a.lookups))
			default:
				a.resend.Reset(lookupEvery)
			}
			return nil
		}
		markResent(a.w.msg)
		if err := a.w.r.nc.PublishMsg(a.w.msg); err != nil {
			return fmt.Errorf("%w: %w", ErrNotAccepted, err)
		}
		a.resend.Reset(resendAfter)
	case <-a.t.C:
		return a.timeUp()
	}
	return nil
}

// timeUp handles the firing of a.t: it returns ErrReplyTimeout or ErrNotAccepted when the
// corresponding time is up, and otherwise sets the timer for the next deadline.
func (a *awaiting) timeUp() error {
	elapsed := time.Since(a.start)
	accepted := a.w.accepted.Load() == ackAccepted
	switch {
	case accepted && elapsed >= a.timeout:
		return ErrReplyTimeout
	case accepted:
		a.t.Reset(a.timeout - elapsed)
	case elapsed >= a.accept:
		return fmt.Errorf("%w: %w", ErrNotAccepted, nats.ErrTimeout)
	default:
		// The reply's time is up, but the request may still be stored: wait for the
		// acknowledgement itself, which deliver now signals.
		a.late = true
		a.w.accepted.CompareAndSwap(ackPending, ackWanted)
		a.t.Reset(a.accept - elapsed)
	}
	return nil
}

// timers are Await's stopped timers, one per call otherwise.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// take removes the first queued reply; w.mu is held.
func (w *Waiter) take() *agentbusv1.Reply {
	if len(w.queue) == 0 {
		return nil
	}
	rep := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	return rep
}

// acknowledged records the inbox's acknowledgement of the request: an accepted request is
// noted without waking Await (its reply follows), unless Await waits for the acknowledgement
// itself; a refusal or a duplicate wakes it.
func (w *Waiter) acknowledged(m *nats.Msg) {
	var failure error
	if len(m.Data) == 0 && m.Header.Get(statusHeader) == noRespondersStatus {
		failure = nats.ErrNoResponders
	} else if ack, err := parsePubAck(m.Data); err != nil {
		failure = err
	} else if ack.Duplicate {
		failure = ErrDuplicate
	}
	if failure == nil {
		if w.accepted.Swap(ackAccepted) != ackWanted {
			return
		}
	} else {
		w.mu.Lock()
		w.ackFailure = failure
		w.mu.Unlock()
	}
	w.wake()
}

// The server answers a request nobody subscribes to with an empty message whose status header
// says 503 (nats.go's unexported statusHdr and noResponders).
const (
	statusHeader       = "Status"
	noRespondersStatus = "503"
)

// fail hands Await an error that ends it.
func (w *Waiter) fail(err error) {
	w.mu.Lock()
	w.ackFailure = err
	w.mu.Unlock()
	w.wake()
}

func (w *Waiter) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }

// lookupPolicy paces the reads of a duplicate's kept result: 50 ms doubling up to lookupEvery
// (a variable tests shorten).
func lookupPolicy() retry.Policy { return retry.Policy{First: 50 * time.Millisecond, Max: lookupEvery} }

func (w *Waiter) push(rep *agentbusv1.Reply) {
	w.mu.Lock()
	w.queue = append(w.queue, rep)
	w.mu.Unlock()
	w.wake()
}

func (r *Replies) deliver(m *nats.Msg) {
	token, ack, ok := subject.ReplyWaiter(r.instance, m.Subject)
	if !ok {
		return
	}
	r.mu.Lock()
	w := r.waiters[token]
	r.mu.Unlock()
	if w == nil {
		return // the caller gave up; nothing waits
	}
	if ack {
		w.acknowledged(m)
		return
	}
	rep := new(agentbusv1.Reply)
	if err := proto.Unmarshal(m.Data, rep); err != nil {
		r.log.Error("decoding reply", "err", err)
		rep = &agentbusv1.Reply{StatusCode: 502, Error: "bad-reply"}
	}
	w.push(rep)
}

// Close unsubscribes.
func (r *Replies) Close() error {
	if err := r.sub.Unsubscribe(); err != nil {
		return fmt.Errorf("unsubscribing replies: %w", err)
	}
	return nil
}
