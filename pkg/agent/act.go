package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Post is a message an agent sends to a thread of its own instance on its own, not as the reply
// to the request in front of it (the interface's Agent2User scenario): "your report is ready".
// It is stored in the thread as an outgoing message with a request id of its own, and the
// thread's followers see it at once.
type Post struct {
	// To is the participant whose thread gets the message; empty means the participant of the
	// request being handled.
	To string
	// Text and Data are the message: text, JSON data (any value encoding/json accepts), or both.
	Text string
	Data any
	// Scope is the message's topic; Hint its hint.
	Scope string
	Hint  string
}

// Timer is a message an agent schedules to its own instance: once at a time (At), once after a
// delay (After), every interval (Every) or on a cron schedule (Cron). When it is due, the message
// is handled like any other request of its conversation: by the Data method named by Method, or,
// without one, by the Chat handler with Text. Its handler sees Message.Timer set to Name.
//
// Timers are kept by NATS JetStream (message schedules), not by a host: they survive the restart
// of every process.
type Timer struct {
	// Name identifies the timer within the instance: setting a timer of the same name replaces
	// it, and CancelTimer removes it.
	Name string
	// Exactly one of At, After, Every and Cron says when it fires.
	At    time.Time
	After time.Duration
	Every time.Duration // at least one second
	// Cron has six fields, seconds first ("0 30 9 * * MON-FRI"), or is one of @hourly, @daily,
	// @weekly, @monthly, @yearly. TimeZone, an IANA name, is the zone it is read in (UTC when
	// empty).
	Cron     string
	TimeZone string
	// To is the participant whose conversation gets the message; empty means the participant of
	// the request being handled.
	To string
	// Method names the Data method that handles the message; empty sends a Chat message.
	Method string
	// Text is the Chat message's text; Data the message's data (a Data method's parameters).
	Text string
	Data any
	// Scope is the message's topic; Hint its hint.
	Scope string
	Hint  string
}

// ErrTimer means a Timer was refused: no name, no time, or a pattern or time zone NATS does not
// accept.
var ErrTimer = errors.New("agent: invalid timer")

// IdleAfter makes the agent's instances complete after d without a message (the next message
// starts a new run with fresh state), whatever the host's IdleTimeout. An instance with a timer
// that may still fire is never completed for idleness.
func IdleAfter(d time.Duration) Option {
	return func(a *Agent) { a.idleAfter = d }
}

// effects are what a handler's request sends besides its reply: posts, timers, messages to other
// agents. Each gets an id derived from the request's id and its place among the request's
// effects, so that a handler run again after a crash or a retry, making the same effects in the
// same order, sends each once (the bus drops the repeat as a duplicate within its
// de-duplication window, 10 minutes).
type effects struct {
	h   *Host
	req *agentbusv1.Request
	// agent and seq are the request's agent and its sequence in the agent's inbox: its host
	// shows the calls it waits for (inspect.go).
	agent string
	seq   uint64

	mu sync.Mutex
	n  int
	// steps numbers the attempt's durable steps (Step); stepped tells that some attempt made
	// one, so that the request's journal is removed once it is answered.
	steps   int
	stepped bool
	// wait is the wait the attempt asked for (Wait): the request parks once the handler returns.
	wait *pendingWait
	// replay is set on an attempt that may find steps recorded (Journal): a retry, a
	// redelivery, or a request resumed after a wait.
	replay bool
}

// restart numbers the effects and the steps of a new attempt from the start again.
func (fx *effects) restart() {
	if fx == nil {
		return
	}
	fx.mu.Lock()
	fx.n, fx.steps, fx.wait = 0, 0, nil
	fx.mu.Unlock()
}

// next returns the id of the attempt's next effect of a kind.
func (fx *effects) next(kind string) string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.n++
	return fx.req.GetRequestId() + "." + kind + "." + strconv.Itoa(fx.n)
}

// Post stores a message in a thread of the instance (Agent2User). It returns once the message
// is durable; it is stored after the requests its conversation already holds, so a post to the
// request's own thread comes after the handler's reply. A handler run again (a retry, a crash)
// that posts the same messages in the same order posts each once.
func (i *Instance) Post(ctx context.Context, p Post) error {
	fx := i.fx
	if fx == nil {
		return errors.New("agent: Post needs a running handler")
	}
	to, err := i.participant(p.To)
	if err != nil {
		return err
	}
	data, err := encodeData(p.Data)
	if err != nil {
		return err
	}
	if len(p.Text) > maxStoredMessage || len(data) > maxStoredMessage {
		return fmt.Errorf("agent: a post's text and data are at most %d bytes each", maxStoredMessage)
	}
	req := fx.derived(fx.next("post"), to)
	req.Kind, req.Text, req.Data, req.Scope, req.Hint = agentbusv1.Kind_KIND_POST, p.Text, data, p.Scope, p.Hint
	return fx.publish(ctx, req)
}

// Schedule sets a timer on the instance, replacing one of the same name. A handler run again
// (a retry, a crash) that sets the same timers in the same order sets each once.
func (i *Instance) Schedule(ctx context.Context, t Timer) error {
	fx := i.fx
	if fx == nil {
		return errors.New("agent: Schedule needs a running handler")
	}
	pattern, err := t.pattern()
	if err != nil {
		return err
	}
	to, err := i.participant(t.To)
	if err != nil {
		return err
	}
	data, err := encodeData(t.Data)
	if err != nil {
		return err
	}
	id := fx.next("timer")
	req := fx.derived("", to)
	req.Kind, req.Text, req.Data, req.Scope, req.Hint = agentbusv1.Kind_KIND_CHAT, t.Text, data, t.Scope, t.Hint
	if t.Method != "" {
		req.Kind, req.Method, req.Text = agentbusv1.Kind_KIND_DATA, t.Method, ""
	}
	if err := fx.h.mayAct(ctx); err != nil {
		return err
	}
	err = fx.h.timers.Set(ctx, schedule.Schedule{
		Name: t.Name, Tenant: i.Tenant(), WorkflowID: i.WorkflowID(), Pattern: pattern, TimeZone: t.TimeZone, Request: req,
	}, subject.DedupeID(i.Tenant(), id))
	if errors.Is(err, schedule.ErrInvalid) {
		return fmt.Errorf("%w: %w", ErrTimer, err)
	}
	return err
}

// CancelTimer removes the instance's timer of that name. It reports whether there was one (a
// timer that fired once is gone).
func (i *Instance) CancelTimer(ctx context.Context, name string) (bool, error) {
	if i.fx == nil {
		return false, errors.New("agent: CancelTimer needs a running handler")
	}
	if err := i.fx.h.mayAct(ctx); err != nil {
		return false, err
	}
	return i.fx.h.timers.Cancel(ctx, i.Tenant(), i.WorkflowID(), name)
}

// pattern is when the timer fires, as a JetStream message schedule says it.
func (t Timer) pattern() (string, error) {
	set := 0
	for _, ok := range []bool{!t.At.IsZero(), t.After != 0, t.Every != 0, t.Cron != ""} {
		if ok {
			set++
		}
	}
	switch {
	case t.Name == "":
		return "", fmt.Errorf("%w: a timer needs a name", ErrTimer)
	case subject.ReservedTimerName(t.Name):
		return "", fmt.Errorf("%w: timer names starting with \"agentbus:\" are agentbus's own", ErrTimer)
	case set != 1:
		return "", fmt.Errorf("%w: set exactly one of At, After, Every and Cron", ErrTimer)
	case t.TimeZone != "" && t.Cron == "":
		return "", fmt.Errorf("%w: a time zone goes with Cron only", ErrTimer)
	case !t.At.IsZero():
		return schedule.At(t.At), nil
	case t.After < 0:
		return "", fmt.Errorf("%w: After is negative", ErrTimer)
	case t.After > 0:
		return schedule.At(time.Now().Add(t.After)), nil
	case t.Every != 0 && t.Every < time.Second:
		return "", fmt.Errorf("%w: Every is at least one second", ErrTimer)
	case t.Every != 0:
		return schedule.Every(t.Every), nil
	}
	return t.Cron, nil
}

// participant is the participant an effect goes to: to, or the request's own when empty.
func (i *Instance) participant(to string) (string, error) {
	if to == "" {
		return i.fx.req.GetParticipantId(), nil
	}
	p, err := ident.Participant(to)
	if err != nil || p == "" {
		return "", fmt.Errorf("agent: participant %s is not 1-256 characters of text", subject.Quote(to))
	}
	return p, nil
}

// encodeData encodes an effect's data as JSON; nil stays nil.
func encodeData(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, errors.New("agent: data is not valid JSON")
		}
		return raw, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("agent: encoding data: %w", err)
	}
	return data, nil
}

// derived is a request of the handler's instance to participant, with the request id id.
func (fx *effects) derived(id, participant string) *agentbusv1.Request {
	req := fx.req
	return &agentbusv1.Request{
		RequestId: id, TenantId: req.GetTenantId(), WorkflowId: req.GetWorkflowId(), AgentName: req.GetAgentName(),
		WorkflowType: req.GetWorkflowType(), ActivationName: req.GetActivationName(), ParticipantId: participant,
		CreatedAtMs: time.Now().UnixMilli(),
	}
}

// publish puts an effect's request on the inbox, de-duplicated by its request id.
func (fx *effects) publish(ctx context.Context, req *agentbusv1.Request) error {
	if err := fx.h.mayAct(ctx); err != nil {
		return err
	}
	msg, err := bus.DedupedRequest(req)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if _, err := bus.Publish(ctx, fx.h.js, msg); err != nil {
		return fmt.Errorf("publishing a message: %w", err)
	}
	return nil
}

// relayTimers moves fired timers to the inboxes until ctx ends (schedule.Store.Relay), starting
// again a second after a failure.
func relayTimers(ctx context.Context, timers *schedule.Store, log *slog.Logger) {
	for {
		err := timers.Relay(ctx, log)
		if ctx.Err() != nil {
			return
		}
		log.Warn("relaying timers; trying again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// storePost stores a post (Agent2User) in its thread as an outgoing message. No handler runs.
func (h *Host) storePost(ctx context.Context, log *slog.Logger, in *inbound) error {
	req := in.req
	l := h.live.acquire(req.GetTenantId(), req.GetWorkflowId())
	defer h.live.release(l)
	if in.recover != recoverNone {
		if err := retry(ctx, log, "reading what earlier deliveries stored", func() error {
			return l.recoverCursor(ctx, h.history, req, in.recover == recoverDeep)
		}); err != nil {
			return err
		}
	}
	out := incomingMessage(req, nil)
	out.Direction = history.Out
	if req.GetText() == "" {
		out.Text = nil
		if out.Data != nil {
			out.MessageType = history.Data
		}
	}
	x := &exchange{h: h, log: log, l: l, req: req, origin: in.origin(), in: out, inStored: true}
	return x.storeOut(ctx, out)
}
