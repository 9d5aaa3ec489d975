package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// maxAnswer bounds an agent's answer: room for a webhook answer that holds the largest webhook
// body (32 MiB) in base64, as Echo's echo answers a binary body, within the answer's JSON.
const maxAnswer = 64 << 20

// maxInlineFile bounds the content of a File message sent inline to an agent.
const maxInlineFile = 4 << 20

// caller makes a registration's requests to its endpoint, through a pool of keep-alive
// connections that makes each call on the handler's goroutine (pool.go).
type caller struct {
	reg    Registration
	allow  *outbound.AllowList
	public *pool // names must resolve to public addresses
	any    *pool // any address: system admins' registrations, allow-list entries naming one
	log    *slog.Logger
}

// newCaller returns the caller of a registration. Its pools keep a connection for each request
// that may be in flight: keep-alive is most of an endpoint's speed.
func newCaller(reg Registration, allow *outbound.AllowList, log *slog.Logger) *caller {
	timeout := time.Duration(reg.TimeoutSeconds) * time.Second
	return &caller{reg: reg, allow: allow,
		public: newPool(outbound.Dialer(timeout, false).DialContext, nil, reg.MaxConcurrent),
		any:    newPool(outbound.Dialer(timeout, true).DialContext, nil, reg.MaxConcurrent),
		log:    log.With("agent", reg.Name)}
}

// close closes the idle connections to the endpoint.
func (c *caller) close() {
	c.public.close()
	c.any.close()
}

// agent builds the agent whose handlers call the endpoint.
func (c *caller) agent() *agent.Agent {
	var opts []agent.Option
	if len(c.reg.WorkflowTypes) > 0 {
		opts = append(opts, agent.WorkflowTypes(c.reg.WorkflowTypes...))
	}
	if len(c.reg.Tenants) > 0 {
		opts = append(opts, agent.Tenants(c.reg.Tenants...))
	}
	a := agent.New(c.reg.Name, append(opts, agent.Partitions(c.reg.Partitions))...)
	if c.reg.Chat {
		a.ChatFunc(c.message("Chat"))
	}
	if c.reg.File {
		a.FileFunc(c.message("File"))
	}
	for _, m := range c.reg.Methods {
		mopts := []agent.MethodOption{agent.Describe(m.Description)}
		if len(m.Schema) > 0 {
			// Compiled at registration, and again by each process when the method is first
			// called there: hosting the agent costs no compilation. One stored before schemas
			// were compiled at registration may not compile: its calls are then not checked.
			mopts = append(mopts, agent.LazySchema(m.Schema))
		}
		a.DataFunc(m.Name, c.message("Data"), mopts...)
	}
	for _, w := range c.reg.Webhooks {
		a.WebhookFunc(w, c.webhook)
	}
	return a
}

// request starts the request of one message to the instance.
func (c *caller) request(typ string, inst *agent.Instance, participant, requestID string, attempt int) *Request {
	wf, _ := ident.ParseWorkflowID(inst.WorkflowID())
	return &Request{
		Protocol: ProtocolVersion, Type: typ, Agent: c.reg.Name, TenantID: inst.Tenant(),
		WorkflowID: inst.WorkflowID(), WorkflowType: wf.WorkflowType, Activation: wf.Activation,
		RunID: inst.RunID(), HostID: inst.HostID(), ParticipantID: participant, RequestID: requestID, Attempt: attempt,
	}
}

// message returns the handler of Chat, Data or File messages.
func (c *caller) message(typ string) func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
	return func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		req := c.request(typ, m.Instance(), m.ParticipantID, m.RequestID, m.Attempt)
		req.Stream = m.Streaming()
		req.Message = &Message{Text: m.Text, Data: m.Data, Scope: m.Scope, Hint: m.Hint, Timer: m.Timer}
		if typ == "Data" {
			req.Message.Method = m.Text
		}
		if f := m.File; f != nil {
			req.Message.File = &File{Name: f.Name, ContentType: f.ContentType, Size: f.Size, SHA256: f.SHA256, Invalid: f.Invalid}
			if f.Size <= maxInlineFile && !f.Empty && !f.Invalid {
				content, err := f.Bytes(ctx)
				if err != nil {
					return agent.Reply{}, agent.Retryable(fmt.Errorf("reading the file: %w", err))
				}
				req.Message.File.Content = content
			}
		}
		ans, err := c.exchange(ctx, m.Instance(), m, req, m.Delta)
		if err != nil {
			return agent.Reply{}, err
		}
		if ans.Reply == nil {
			return agent.Reply{}, nil
		}
		return agent.Reply{Text: ans.Reply.Text, Data: dataOf(ans.Reply.Data)}, nil
	}
}

// webhook is the handler of the agent's webhook methods.
func (c *caller) webhook(ctx context.Context, r *agent.WebhookRequest) agent.Response {
	req := c.request("Webhook", r.Instance(), r.ParticipantID, r.RequestID, r.Attempt)
	req.Webhook = &Webhook{Method: r.Method, Params: r.Params, Headers: r.Header, ContentType: r.ContentType, Body: r.Body}
	if req.Webhook.Body == nil {
		req.Webhook.Body = []byte{}
	}
	ans, err := c.exchange(ctx, r.Instance(), nil, req, nil)
	var failed *agent.Error
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrWaiting):
		return agent.Fail(err) // the request waits: the host answers for it
	case agent.IsRetryable(err):
		return agent.Retry(err)
	case errors.As(err, &failed):
		return agent.Text(failed.Status, failed.Message)
	default:
		return agent.Text(http.StatusBadGateway, "the agent failed")
	}
	resp := ans.Response
	if resp == nil {
		return agent.Status(http.StatusOK)
	}
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	body := []byte(resp.Body)
	if resp.BodyBase64 != nil {
		body = resp.BodyBase64
	}
	return agent.Bytes(status, resp.ContentType, body)
}

// exchange sends the request with the instance's state, writes the state the answer gives, null
// included (with compare-and-set: when the state changed meanwhile, the request goes again with
// the new state), then sends what the answer asks for: posts, timers and tells. An answer without
// state leaves it. A failed request (the answer's error) is returned as the error of a Go
// handler.
func (c *caller) exchange(ctx context.Context, inst *agent.Instance, msg *agent.Message, req *Request, onDelta func(string)) (*Answer, error) {
	if err := inst.State(&req.State); err != nil {
		return nil, err
	}
	if err := c.journal(ctx, req); err != nil {
		return nil, err
	}
	ans, err := c.stepThrough(ctx, inst, msg, req, onDelta)
	if err != nil {
		return nil, err
	}
	if ans.Error == nil && ans.Wait != nil {
		return nil, c.wait(ctx, ans.Wait)
	}
	if ans.Error == nil && ans.State != nil {
		sent := req.State
		err := inst.UpdateRawState(ctx, func(old json.RawMessage) (json.RawMessage, error) {
			if bytes.Equal(old, sent) {
				return ans.State, nil
			}
			req.State, sent = old, old
			again, err := c.post(ctx, req, nil)
			if err != nil {
				return nil, err
			}
			if again.Error == nil && again.asksStepOrWait() {
				// The newer state took the agent elsewhere: the request runs again from the start.
				return nil, agent.Retryable(errors.New("the agent asked for a step, a wait, a call or a history read when sent a newer state"))
			}
			ans = again
			if again.Error != nil || again.State == nil {
				return old, nil
			}
			return again.State, nil
		})
		if err != nil {
			return nil, err
		}
	}
	if e := ans.Error; e != nil {
		if e.Retry {
			return nil, agent.Retryable(fmt.Errorf("the agent asked for a retry: %s", e.Message))
		}
		status := e.Status
		if status < 400 || status > 599 {
			status = http.StatusInternalServerError
		}
		return nil, agent.Errorf(status, "%s", e.Message)
	}
	if err := c.act(ctx, inst, ans); err != nil {
		return nil, err
	}
	if ans.Complete {
		inst.Complete()
	}
	return ans, nil
}

// maxJournal bounds the journal a request carries to a remote agent, encoded.
const maxJournal = 16 << 20

// journal puts on req what the request's steps recorded so far (agent.Journal).
func (c *caller) journal(ctx context.Context, req *Request) error {
	recorded, err := agent.Journal(ctx)
	if err != nil {
		return err
	}
	req.Journal = make([]JournalEntry, 0, len(recorded))
	for _, e := range recorded {
		req.Journal = append(req.Journal, entryOf(e.Name, e.Result, e.Err))
	}
	return nil
}

// entryOf is the journal entry of a step's outcome.
func entryOf(name string, result json.RawMessage, err error) JournalEntry {
	e := JournalEntry{Name: name, Result: result}
	if err == nil {
		if e.Result == nil {
			e.Result = json.RawMessage("null")
		}
		return e
	}
	var (
		he *agent.Error
		ce *agent.CallError
	)
	e.Result, e.Error = nil, &StepError{Status: http.StatusInternalServerError, Message: err.Error()}
	switch {
	case errors.As(err, &he):
		e.Error.Status, e.Error.Message = he.Status, he.Message
	case errors.As(err, &ce):
		e.Error.Status, e.Error.Message = ce.Status, ce.Message
	}
	return e
}

// stepThrough sends the request, and again after each step the answer asks to record, with the
// step in its journal, until an answer asks for none. A streamed answer's deltas reach onDelta
// once: the agent runs its handler from the start on every send, and streams again what it
// streamed before the step (newDeltas).
func (c *caller) stepThrough(ctx context.Context, inst *agent.Instance, msg *agent.Message, req *Request, onDelta func(string)) (*Answer, error) {
	size := 0
	for _, e := range req.Journal {
		size += len(e.Name) + len(e.Result) + 64
	}
	var streamed strings.Builder
	for {
		if size > maxJournal {
			return nil, agent.Errorf(http.StatusInternalServerError, "the request's journal is over %d bytes, more than a remote agent is sent", maxJournal)
		}
		ans, err := c.post(ctx, req, newDeltas(&streamed, onDelta))
		if err != nil || ans.Error != nil || !ans.asksStep() {
			return ans, err
		}
		e, err := c.recordStep(ctx, inst, msg, ans)
		if err != nil {
			return nil, err
		}
		req.Journal = append(req.Journal, e)
		size += len(e.Name) + len(e.Result) + 64
	}
}

// newDeltas returns the delta handler of one send of a request: it passes to onDelta the text
// that goes beyond what the earlier sends streamed (streamed, which it extends), and drops the
// text this send streams again. Text that differs from what was streamed before (a handler that
// does not stream the same on every run) is passed on from where it differs. Nil when onDelta is.
func newDeltas(streamed *strings.Builder, onDelta func(string)) func(string) {
	if onDelta == nil {
		return nil
	}
	at, differs := 0, false // how much of streamed this send streamed again
	return func(d string) {
		if !differs {
			before := streamed.String()[at:]
			n := min(len(before), len(d))
			if before[:n] != d[:n] {
				differs = true
			} else {
				at += n
				d = d[n:]
			}
		}
		if d == "" {
			return
		}
		streamed.WriteString(d)
		at = streamed.Len()
		onDelta(d)
	}
}

// recordStep records a step the agent ran (agent.Step), and returns its journal entry: what the
// agent gave, or what another run of the request recorded first. A step the host cannot record
// as asked (a name that is none, a result too large, more steps than a request makes) fails the
// request (502): sent again, the agent would ask for the same.
func (c *caller) recordStep(ctx context.Context, inst *agent.Instance, msg *agent.Message, ans *Answer) (JournalEntry, error) {
	name, work, err := stepWork(inst, msg, ans)
	if err != nil {
		return JournalEntry{}, err
	}
	res, err := agent.Step(ctx, name, work)
	var (
		he *agent.Error
		ce *agent.CallError
	)
	switch {
	case err == nil, !agent.IsRetryable(err) && (errors.As(err, &he) || errors.As(err, &ce)):
		return entryOf(name, res, err), nil
	case agent.IsRetryable(err), errors.Is(err, agent.ErrStepMismatch):
		return JournalEntry{}, err
	}
	return JournalEntry{}, agent.Errorf(http.StatusBadGateway, "the agent's step %s: %v", subject.Quote(name), err)
}

// stepWork is the name and the work of the step an answer asks for: recording what the agent
// ran (step), an Agent2Agent call (call) or a read of the request's thread (history).
func stepWork(inst *agent.Instance, msg *agent.Message, ans *Answer) (string, func(context.Context) (json.RawMessage, error), error) {
	switch {
	case ans.Step != nil:
		st := ans.Step
		return st.Name, func(context.Context) (json.RawMessage, error) {
			if e := st.Error; e != nil {
				status := e.Status
				if status < 400 || status > 599 {
					status = http.StatusInternalServerError
				}
				return nil, agent.Errorf(status, "%s", e.Message)
			}
			if st.Result == nil {
				return json.RawMessage("null"), nil
			}
			return st.Result, nil
		}, nil
	case ans.Call != nil:
		call := ans.Call
		peer := agent.Peer{Agent: call.Agent, WorkflowType: call.WorkflowType, Activation: call.Activation, WorkflowID: call.WorkflowID}
		return call.Name, func(ctx context.Context) (json.RawMessage, error) {
			var out json.RawMessage
			if err := inst.Call(ctx, peer, call.Method, dataOf(call.Params), &out); err != nil {
				return nil, err
			}
			if out == nil {
				out = json.RawMessage("null")
			}
			return out, nil
		}, nil
	}
	read := ans.History
	if msg == nil {
		return "", nil, agent.Errorf(http.StatusBadGateway, "the agent's history read %s: a webhook call has no thread to read", subject.Quote(read.Name))
	}
	if err := read.checkSize(); err != nil {
		return "", nil, agent.Errorf(http.StatusBadGateway, "the agent's history read %s: %v", subject.Quote(read.Name), err)
	}
	return read.Name, func(ctx context.Context) (json.RawMessage, error) {
		msgs, _, err := msg.History(ctx, agent.HistoryOptions{Size: read.Size, Scope: read.Scope})
		if err != nil {
			return nil, agent.Retryable(err)
		}
		if msgs == nil {
			return json.RawMessage(`{"messages":[]}`), nil
		}
		return json.Marshal(map[string]any{"messages": msgs})
	}, nil
}

// maxHistoryRead bounds the messages of one history read (HistoryRead.Size).
const maxHistoryRead = 100

// checkSize tells whether a host reads as many messages as r asks for.
func (r *HistoryRead) checkSize() error {
	if r.Size < 0 || r.Size > maxHistoryRead {
		return fmt.Errorf("size is 1 to %d", maxHistoryRead)
	}
	return nil
}

// checkTimeout tells whether a host waits as long as w asks (at most agent.MaxWait).
func (w *Wait) checkTimeout() error {
	if w.TimeoutMs < 0 || w.TimeoutMs > agent.MaxWait.Milliseconds() {
		return fmt.Errorf("timeoutMs is 0 to %d", agent.MaxWait.Milliseconds())
	}
	return nil
}

// wait parks the request as the answer asks (agent.Wait): it returns agent.ErrWaiting, which the
// handler returns. A wait the host cannot make as asked (a name that is none, nothing to wait
// for, a timeout out of bounds) fails the request (502).
func (c *caller) wait(ctx context.Context, w *Wait) error {
	what := "wait " + subject.Quote(w.Name)
	if err := w.checkTimeout(); err != nil {
		return agent.Errorf(http.StatusBadGateway, "the agent's %s: %v", what, err)
	}
	_, err := agent.Wait(ctx, w.Name, agent.For{Chat: w.Chat, Methods: w.Methods, Signals: w.Signals,
		Timeout: time.Duration(w.TimeoutMs) * time.Millisecond})
	switch {
	case errors.Is(err, agent.ErrWaiting), agent.IsRetryable(err), errors.Is(err, agent.ErrStepMismatch):
		return err
	case err == nil:
		// Another run of the request recorded the wait's event since this one read the journal:
		// the request runs again, with the event in its journal.
		return agent.Retryable(fmt.Errorf("the agent's %s: its journal holds the wait's event already", what))
	}
	return agent.Errorf(http.StatusBadGateway, "the agent's %s: %v", what, err)
}

// act sends the posts, timers, cancellations and tells of an answer, in that order.
func (c *caller) act(ctx context.Context, inst *agent.Instance, ans *Answer) error {
	for _, p := range ans.Posts {
		if err := inst.Post(ctx, agent.Post{To: p.ParticipantID, Text: p.Text, Data: dataOf(p.Data), Scope: p.Scope, Hint: p.Hint}); err != nil {
			return c.actionFailed("post", err)
		}
	}
	for _, t := range ans.Timers {
		timer, err := timerOf(t)
		if err == nil {
			err = inst.Schedule(ctx, timer)
		}
		if err != nil {
			return c.actionFailed("timer "+subject.Quote(t.Name), err)
		}
	}
	for _, name := range ans.CancelTimers {
		if _, err := inst.CancelTimer(ctx, name); err != nil {
			return c.actionFailed("cancelling timer "+subject.Quote(name), err)
		}
	}
	for _, t := range ans.Tells {
		peer := agent.Peer{Agent: t.Agent, WorkflowType: t.WorkflowType, Activation: t.Activation, WorkflowID: t.WorkflowID}
		if peer.Agent == "" && peer.WorkflowID == "" {
			peer.Agent = c.reg.Name
		}
		letter := agent.Letter{Text: t.Text, Data: dataOf(t.Data), Scope: t.Scope, Hint: t.Hint}
		if t.Type == "Data" || t.Method != "" {
			letter.Method = t.Method
		}
		if err := inst.Tell(ctx, peer, letter); err != nil {
			return c.actionFailed("tell", err)
		}
	}
	return nil
}

// actionFailed is the error of an answer's action the host could not carry out: retried when
// the bus failed, the agent's mistake otherwise.
func (c *caller) actionFailed(what string, err error) error {
	if agent.IsRetryable(err) {
		return err
	}
	var refused *agent.Error
	if errors.As(err, &refused) {
		return agent.Errorf(refused.Status, "the agent's %s: %s", what, refused.Message)
	}
	if errors.Is(err, agent.ErrTimer) || errors.Is(err, agent.ErrPeerNotFound) {
		return agent.Errorf(http.StatusBadGateway, "the agent's %s: %v", what, err)
	}
	return agent.Retryable(fmt.Errorf("the agent's %s: %w", what, err))
}

// timerOf reads an answer's timer.
func timerOf(t Timer) (agent.Timer, error) {
	out := agent.Timer{Name: t.Name, Cron: t.Cron, TimeZone: t.TimeZone, Method: t.Method, Text: t.Text, Data: dataOf(t.Data), To: t.ParticipantID}
	if t.At != nil {
		out.At = t.At.Time
	}
	if t.AfterMs > 0 {
		out.After = time.Duration(t.AfterMs) * time.Millisecond
	}
	if t.Every != "" {
		d, err := time.ParseDuration(t.Every)
		if err != nil {
			return agent.Timer{}, fmt.Errorf("%w: every %s is not a duration such as 1m", agent.ErrTimer, subject.Quote(t.Every))
		}
		out.Every = d
	}
	return out, nil
}

// hasValue reports whether an optional JSON field was given a value other than null.
func hasValue(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// dataOf is an optional JSON field as a value to encode again: nil when left out or null.
func dataOf(raw json.RawMessage) any {
	if !hasValue(raw) {
		return nil
	}
	return raw
}

// errEndpoint is a failed call to the endpoint.
var errEndpoint = errors.New("the agent's endpoint failed")

// post makes one call of the request and reads the answer, passing a streamed answer's deltas
// to onDelta. An endpoint that cannot be reached, does not answer in time, answers 5xx or 429 or
// breaks the connection before its answer was read whole is a retryable error; another status or
// an answer that is not a protocol answer fails the request (502).
func (c *caller) post(ctx context.Context, req *Request, onDelta func(string)) (*Answer, error) {
	u, anyAddress, err := c.target()
	if err != nil {
		return nil, agent.Retryable(err)
	}
	deadline := time.Now().Add(time.Duration(c.reg.TimeoutSeconds) * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	req.Deadline = timefmt.Of(deadline)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	hdr, err := webhooksig.Standard{Secret: c.reg.Secret}.Sign(req.RequestID, time.Now(), body)
	if err != nil {
		return nil, fmt.Errorf("signing the request: %w", err)
	}
	for k, v := range hdr {
		hreq.Header.Set(k, v)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(HeaderProtocol, strconv.Itoa(ProtocolVersion))
	hreq.Header.Set("User-Agent", "agentbus-host")
	pool := c.public
	if anyAddress {
		pool = c.any
	}
	resp, err := pool.roundTrip(hreq)
	if err != nil {
		return nil, agent.Retryable(fmt.Errorf("%w: %w", errEndpoint, err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, agent.Retryable(fmt.Errorf("%w: it answered %d", errEndpoint, resp.StatusCode))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		c.log.Warn("the agent's endpoint refused a request", "status", resp.StatusCode, "requestId", req.RequestID)
		return nil, agent.Errorf(http.StatusBadGateway, "the agent's endpoint answered %d", resp.StatusCode)
	}
	ans, err := readAnswer(resp, onDelta)
	if err != nil {
		if errors.Is(err, errAnswerCut) || ctx.Err() != nil {
			return nil, agent.Retryable(fmt.Errorf("%w: reading its answer: %w", errEndpoint, err))
		}
		c.log.Warn("the agent's endpoint gave an invalid answer", "requestId", req.RequestID, "err", err)
		return nil, agent.Errorf(http.StatusBadGateway, "the agent's endpoint gave an answer that is not a protocol answer (docs/remote-agents.md)")
	}
	return ans, nil
}

// target is the URL to call and whether it may be an internal address: a system admin's
// registration may; a tenant's must be on the allow-list now.
func (c *caller) target() (string, bool, error) {
	if c.reg.Owner == "" {
		return c.reg.URL, true, nil
	}
	u, literal, err := c.allow.Check(c.reg.URL)
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", errEndpoint, err)
	}
	return u.String(), literal, nil
}

// errAnswerCut is an answer whose body could not be read to its end: the connection broke
// after the status line (the endpoint died or reset it, the deadline passed). The endpoint
// failed; its answer is not known to be wrong.
var errAnswerCut = errors.New("the answer was cut off")

// readAnswer reads a JSON answer, or a streamed one: deltas, one per line, then the answer. An
// answer cut off by a failed read of the body is errAnswerCut; any other error means the answer,
// read whole, is not a protocol answer.
func readAnswer(resp *http.Response, onDelta func(string)) (*Answer, error) {
	src := &bodyReader{r: resp.Body}
	ans, err := parseAnswer(io.LimitReader(src, maxAnswer), resp.Header.Get("Content-Type"), onDelta)
	if err != nil && src.err != nil {
		return nil, fmt.Errorf("%w: %w", errAnswerCut, src.err)
	}
	return ans, err
}

// bodyReader keeps the first error, other than the end, of reading a body.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// parseAnswer reads an answer of content type ct from body: one JSON answer, or a stream of
// deltas ending with the answer, as NDJSON lines or as server-sent events.
func parseAnswer(body io.Reader, ct string, onDelta func(string)) (*Answer, error) {
	switch {
	case isNDJSON(ct):
		return parseStream(body, ndjsonItems, onDelta)
	case isEventStream(ct):
		return parseStream(body, eventItems, onDelta)
	}
	ans := new(Answer)
	if err := json.NewDecoder(body).Decode(ans); err != nil {
		return nil, err
	}
	return ans, nil
}

// parseStream reads a streamed answer whose items (JSON objects) items splits from body: a
// {"delta": text} for each piece of the reply, passed to onDelta, then the answer.
func parseStream(body io.Reader, items func(io.Reader, func([]byte) error) error, onDelta func(string)) (*Answer, error) {
	var last []byte
	err := items(body, func(item []byte) error {
		if last != nil {
			return errors.New("an item after the answer")
		}
		var d delta
		if json.Unmarshal(item, &d) == nil && d.Delta != nil {
			if onDelta != nil {
				onDelta(*d.Delta)
			}
			return nil
		}
		last = append([]byte(nil), item...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if last == nil {
		return nil, errors.New("a stream without an answer")
	}
	ans := new(Answer)
	if err := json.Unmarshal(last, ans); err != nil {
		return nil, err
	}
	return ans, nil
}

// ndjsonItems passes each non-blank line of body to item.
func ndjsonItems(body io.Reader, item func([]byte) error) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxAnswer)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := item(line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// eventItems passes the data of each server-sent event of body to item, as package sse reads
// an event stream (the HTML standard's rules); event names, ids and retry fields are ignored.
func eventItems(body io.Reader, item func([]byte) error) error {
	var itemErr error
	err := sse.NewReaderSize(body, maxAnswer).Each(func(ev sse.Event) bool {
		itemErr = item([]byte(ev.Data))
		return itemErr == nil
	})
	if itemErr != nil {
		return itemErr
	}
	return err
}

func isNDJSON(ct string) bool { return hasMediaType(ct, "application/x-ndjson") }

func isEventStream(ct string) bool { return hasMediaType(ct, "text/event-stream") }

// hasMediaType reports whether the Content-Type ct names the media type mt (in any case), with
// or without parameters.
func hasMediaType(ct, mt string) bool {
	return len(ct) >= len(mt) && strings.EqualFold(ct[:len(mt)], mt) && (len(ct) == len(mt) || ct[len(mt)] == ';' || ct[len(mt)] == ' ')
}
