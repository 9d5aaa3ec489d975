package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// CheckResult is the outcome of one case of Check.
type CheckResult struct {
	Case string `json:"case"`
	OK   bool   `json:"ok"`
	// Skipped is a case that does not apply to the registration (it takes no Chat messages, no
	// files, has no webhook methods); OK is true and Detail starts with "skipped: ".
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail"`
}

// The cases of Check, in the order it runs them. Those named per method ("Data sum answered",
// "webhook echo answered") are listed once for each method the registration names.
const (
	CaseUnsigned       = "unsigned request refused with 401"
	CaseWronglySigned  = "wrongly signed request refused with 401"
	CaseProtocol       = "protocol version 2 refused with 400"
	CaseChat           = "Chat answered"
	CaseChatStreamed   = "Chat streamed"
	CaseFile           = "File answered"
	CaseWebhookAnswers = "webhook responses: a status of 200-599, and a content type with a body"
	CaseJournal        = "journal: a request sent with a journal is answered from it"
	CaseState          = "state is sent and an answer's state is valid JSON"
	CaseOrder          = "order: 3 requests of one conversation, each sent with the state the previous one answered"
	CaseStateConflict  = "state conflict: a request sent again with a fresher state is answered from that state"
	CaseRetry          = "retry: a request sent again as attempt 2 is answered, not refused"
	CaseKeepAlive      = "keep-alive: a second request reuses the connection"
)

// orderRequests is how many requests of one conversation the order case sends.
const orderRequests = 3

// maxFollowed bounds the steps and waits Check follows in one request: as many as a host
// records (agent.MaxSteps).
const maxFollowed = agent.MaxSteps

// Check drives an agent's endpoint through the protocol's cases (docs/remote-agents.md), as a
// workflow host would call it, and reports each, in this order:
//
//   - signatures: an unsigned and a wrongly signed request are refused with 401;
//   - a request of protocol version 2 is refused with 400;
//   - Chat answered and Chat streamed (plain and streamed chats get a protocol answer), File
//     answered: skipped when the registration takes no Chat messages, no files;
//   - "Data M answered" for each Data method and "webhook W answered" for each webhook method
//     the registration names: a protocol answer;
//   - webhook responses: each webhook method's response has a status of 200 to 599 (or none:
//     200) and a content type when it has a body; a method without a protocol answer fails it
//     too; skipped without webhook methods;
//   - journal: the first request whose answers asked for steps or waits, sent again with its
//     whole journal, is answered without a new step or wait; without one, a request sent with a
//     journal of one entry is answered;
//   - state: a request sent with a state gets an answer whose state, if any, is valid JSON;
//   - order: three requests of one conversation, sent one after another, each with the state
//     the previous answer gave, are all answered;
//   - state conflict: a request answered for a stale state and sent again (same requestId) with
//     a fresher one, as a host does when its compare-and-set of the state failed, is answered,
//     and answered from the state sent: when the order case showed that the agent's new state
//     depends on the state it is sent, the second answer's state must not be the first's;
//   - retry: a request sent again with the same requestId and attempt 2 is answered, without
//     an error when attempt 1 had none: not refused as a duplicate;
//   - keep-alive: the second of two requests reuses the first one's connection.
//
// The order, state-conflict and retry cases use the first request of the registration that was
// answered with a state (Chat, then each Data method, then each webhook), so that they see how
// the agent's state evolves; when no answer carries a state, the request of the signature cases.
// Their details name that request.
//
// Every case follows steps and waits as a host does: an answer that asks for a step is followed by
// the request sent again with the step in its journal, and one that asks for a wait by the
// request sent again with the wait's entry, the event of its deadline ({"type":"timeout"}), at
// once. An answer that asks for an Agent2Agent call is followed by the request sent again with
// the call failed (503: Check calls no other agent), and one that asks for a read of the thread
// with a thread without messages ({"messages":[]}). A step, wait, call or read a host would
// refuse (a name that is none, nothing to wait for, a result over 256 KiB, a call without a
// method, a read in a webhook request or of more than 100 messages) fails the case.
//
// A Data method gets the first of its schema's examples as its parameters; a method without
// examples, the smallest object its schema takes when one can be made from the schema's required
// properties, else {}; the method's case says which it sent. A method that a registration would
// refuse (its examples do not match its schema, say) fails its case without a call. Webhooks get
// a JSON body {}. Every request is a real call of the endpoint. Nothing is registered and no host
// is involved: it is for agent authors, before they register.
func Check(ctx context.Context, reg Registration) []CheckResult {
	c := &checker{reg: reg, client: &http.Client{Timeout: 30 * time.Second}, workflow: "check:" + reg.Name + ":Supervisor Workflow:check-" + randomHex(4)}
	defer c.client.CloseIdleConnections()
	c.params = make(map[string]checkParams, len(reg.Methods))
	c.waits, c.calls, c.reads = map[string]int{}, map[string]int{}, map[string]int{}
	for _, m := range reg.Methods {
		c.params[m.Name] = paramsFor(m)
	}
	first := c.pick()
	c.signatureCases(ctx, first)
	c.chatCases(ctx)
	c.fileCase(ctx)
	c.methodCases(ctx)
	c.webhookCases(ctx)
	detail, err := c.journalCase(ctx, first)
	c.add(CaseJournal, err, detail)
	c.add(CaseState, c.state(ctx), "ok")
	c.sequenceCases(ctx, first)
	return c.out
}

// add records a case's result: passed with detail ok, or failed with err.
func (c *checker) add(name string, err error, ok string) {
	r := CheckResult{Case: name, OK: err == nil, Detail: ok}
	if err != nil {
		r.Detail = err.Error()
	}
	c.out = append(c.out, r)
}

// skip records a case skipped, and why.
func (c *checker) skip(name, why string) {
	c.out = append(c.out, CheckResult{Case: name, OK: true, Skipped: true, Detail: "skipped: " + why})
}

// keep notes req as the request of the order, conflict and retry cases when it is the first
// answered with a state, and as the journal case's when it is the first that made steps or waits.
func (c *checker) keep(req *Request, ans *Answer) {
	if c.stateful == nil && ans != nil && ans.Error == nil && ans.State != nil {
		r := *req
		r.Stream = false
		c.stateful = &r
	}
	if c.stepped == nil && ans != nil && len(req.Journal) > 0 {
		r := *req
		r.Stream = false
		c.stepped, c.steppedAnswer = &r, ans
	}
}

// exchange sends a signed request as a host does, and follows its steps and waits: after an
// answer that asks for a step, the request goes again with the step in its journal; after one
// that asks for a wait, with the wait's entry, the event of its deadline. It returns the last
// answer and the parts of its stream (as call); req.Journal ends with what it followed.
func (c *checker) exchange(ctx context.Context, req *Request) (*Answer, int, error) {
	for {
		ans, parts, err := c.call(ctx, req, c.reg.Secret)
		if err != nil || ans.Error != nil || !ans.asksStepOrWait() {
			return ans, parts, err
		}
		n := len(req.Journal) + 1
		if n > maxFollowed {
			return nil, 0, fmt.Errorf("more than %d steps and waits, more than a host records: does the agent replay its journal?", maxFollowed)
		}
		var e JournalEntry
		switch {
		case ans.Step != nil:
			st := ans.Step
			if err := checkStep(st); err != nil {
				return nil, 0, fmt.Errorf("step %d: %w", n, err)
			}
			e = JournalEntry{Name: st.Name, Result: st.Result, Error: st.Error}
			if e.Error != nil {
				e.Result = nil
			} else if e.Result == nil {
				e.Result = json.RawMessage("null")
			}
		case ans.Call != nil:
			if err := checkCall(ans.Call); err != nil {
				return nil, 0, fmt.Errorf("call %d: %w", n, err)
			}
			e = JournalEntry{Name: ans.Call.Name, Error: &StepError{Status: http.StatusServiceUnavailable, Message: checkCallFailure}}
			c.calls[req.RequestID]++
		case ans.History != nil:
			if err := checkHistory(req, ans.History); err != nil {
				return nil, 0, fmt.Errorf("history read %d: %w", n, err)
			}
			e = JournalEntry{Name: ans.History.Name, Result: json.RawMessage(`{"messages":[]}`)}
			c.reads[req.RequestID]++
		default:
			if err := checkWait(ans.Wait); err != nil {
				return nil, 0, fmt.Errorf("wait %d: %w", n, err)
			}
			ev, _ := json.Marshal(map[string]any{"type": "timeout", "at": timefmt.Of(time.Now())})
			e = JournalEntry{Name: ans.Wait.Name, Result: ev}
			c.waits[req.RequestID]++
		}
		req.Journal = append(req.Journal, e)
	}
}

// checkStep tells whether a host records the step an answer asks for.
func checkStep(st *Step) error {
	if err := subject.CheckName("", st.Name); err != nil {
		return fmt.Errorf("its name %s is not 1 to %d bytes of text", subject.Quote(st.Name), subject.MaxNameBytes)
	}
	if st.Error == nil && st.Result != nil {
		var b bytes.Buffer
		if err := json.Compact(&b, st.Result); err != nil {
			return fmt.Errorf("%s: its result is not JSON", subject.Quote(st.Name))
		}
		var esc bytes.Buffer
		json.HTMLEscape(&esc, b.Bytes())
		if esc.Len() > agent.MaxStepResult {
			return fmt.Errorf("%s: its result is %d bytes encoded, more than %d", subject.Quote(st.Name), esc.Len(), agent.MaxStepResult)
		}
	}
	return nil
}

// checkCallFailure is the failure Check records for every Agent2Agent call an answer asks for:
// it calls no other agent.
const checkCallFailure = "agentbus agent check makes no Agent2Agent calls"

// checkCall tells whether a host makes the call an answer asks for: one without a method fails
// the request.
func checkCall(call *Call) error {
	if err := subject.CheckName("", call.Name); err != nil {
		return fmt.Errorf("its name %s is not 1 to %d bytes of text", subject.Quote(call.Name), subject.MaxNameBytes)
	}
	if call.Method == "" {
		return fmt.Errorf("%s: a call needs a method", subject.Quote(call.Name))
	}
	return nil
}

// checkHistory tells whether a host makes the read of the thread an answer asks for: in a Chat,
// Data or File request, of 1 to 100 messages (0: the default).
func checkHistory(req *Request, read *HistoryRead) error {
	if err := subject.CheckName("", read.Name); err != nil {
		return fmt.Errorf("its name %s is not 1 to %d bytes of text", subject.Quote(read.Name), subject.MaxNameBytes)
	}
	if req.Type == "Webhook" {
		return fmt.Errorf("%s: a webhook request has no thread to read", subject.Quote(read.Name))
	}
	if err := read.checkSize(); err != nil {
		return fmt.Errorf("%s: %w", subject.Quote(read.Name), err)
	}
	return nil
}

// checkWait tells whether a host makes the wait an answer asks for.
func checkWait(w *Wait) error {
	if err := subject.CheckName("", w.Name); err != nil {
		return fmt.Errorf("its name %s is not 1 to %d bytes of text", subject.Quote(w.Name), subject.MaxNameBytes)
	}
	if !w.Chat && len(w.Methods) == 0 && len(w.Signals) == 0 && w.TimeoutMs == 0 {
		return fmt.Errorf("%s: a wait needs chat, methods, signals or timeoutMs", subject.Quote(w.Name))
	}
	if err := w.checkTimeout(); err != nil {
		return fmt.Errorf("%s: %w", subject.Quote(w.Name), err)
	}
	for _, m := range append(slices.Clone(w.Methods), w.Signals...) {
		if subject.CheckName("", m) != nil {
			return fmt.Errorf("%s: the method or signal %s is not 1 to %d bytes of text", subject.Quote(w.Name), subject.Quote(m), subject.MaxNameBytes)
		}
	}
	return nil
}

// followed says how many steps and waits exchange followed in req, for a case's detail: "" for
// none.
func (c *checker) followed(req *Request) string {
	waits, calls, reads := c.waits[req.RequestID], c.calls[req.RequestID], c.reads[req.RequestID]
	steps := len(req.Journal) - waits - calls - reads
	var parts, notes []string
	if steps > 0 {
		parts = append(parts, plural(steps, "step"))
	}
	if waits > 0 {
		parts = append(parts, plural(waits, "wait"))
		notes = append(notes, "each wait ended by its deadline")
	}
	if calls > 0 {
		parts = append(parts, plural(calls, "call"))
		notes = append(notes, fmt.Sprintf("each call failed with 503, %q", checkCallFailure))
	}
	if reads > 0 {
		parts = append(parts, plural(reads, "history read"))
		notes = append(notes, "each history read found no messages")
	}
	if len(parts) == 0 {
		return ""
	}
	list := strings.Join(parts, " and ")
	if len(parts) > 2 {
		list = strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	}
	if len(notes) == 0 {
		return "; " + list + " followed"
	}
	return "; " + list + " followed (" + strings.Join(notes, "; ") + ")"
}

// plural is n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// journalCase sends the first request that made steps or waits again, with its whole journal,
// as a host does after a state conflict: the agent must answer it from the journal, without a
// new step or wait. Without such a request, it sends first with a journal of one entry, which an
// agent that makes no steps must take.
func (c *checker) journalCase(ctx context.Context, first Request) (string, error) {
	if c.stepped != nil {
		req := *c.stepped
		what := fmt.Sprintf("%s sent again with its journal of %d entries", describe(req), len(req.Journal))
		ans, _, err := c.call(ctx, &req, c.reg.Secret)
		switch {
		case err != nil:
			return "", fmt.Errorf("%s: %w", what, err)
		case ans.Error == nil && ans.asksStepOrWait():
			return "", fmt.Errorf("%s: it asked for another step or wait: a step or wait whose place the journal holds is answered from it", what)
		case c.steppedAnswer.Error == nil && ans.Error != nil:
			return "", fmt.Errorf("%s: refused: %d %s", what, ans.Error.Status, ans.Error.Message)
		}
		return what + ": answered from it, without a new step or wait", nil
	}
	req := c.again(first)
	req.Journal = []JournalEntry{{Name: "check", Result: json.RawMessage(`{"checked":true}`)}}
	if _, _, err := c.call(ctx, &req, c.reg.Secret); err != nil {
		return "", fmt.Errorf("%s sent with a journal of one entry: %w", describe(req), err)
	}
	return describe(req) + ": answered when sent with a journal of one entry (no request made steps or waits)", nil
}

// signatureCases: a request unsigned, one signed with another secret, and one of an unknown
// protocol version are refused.
func (c *checker) signatureCases(ctx context.Context, first Request) {
	c.add(CaseUnsigned, c.expectStatus(ctx, first, "", http.StatusUnauthorized), "401")
	c.add(CaseWronglySigned, c.expectStatus(ctx, first, webhooksig.NewStandardSecret(), http.StatusUnauthorized), "401")
	v2 := first
	v2.Protocol = 2
	c.add(CaseProtocol, c.expectStatus(ctx, v2, c.reg.Secret, http.StatusBadRequest), "400")
}

// chatCases: a Chat message is answered with a reply, and streamed with deltas and the answer.
func (c *checker) chatCases(ctx context.Context) {
	if !c.reg.Chat {
		c.skip(CaseChat, "the registration takes no Chat messages")
		c.skip(CaseChatStreamed, "the registration takes no Chat messages")
		return
	}
	req := c.request("Chat", "hello", "")
	ans, _, err := c.exchange(ctx, req)
	if err == nil && (ans.Reply == nil || ans.Reply.Text == nil || *ans.Reply.Text == "") && ans.Error == nil {
		err = errors.New("the answer has neither reply.text nor error")
	}
	if err == nil {
		c.keep(req, ans)
	}
	c.add(CaseChat, err, "reply")
	req = c.request("Chat", "hello", "")
	req.Stream = true
	ans, parts, err := c.exchange(ctx, req)
	if err == nil && ans.Error == nil && (ans.Reply == nil || ans.Reply.Text == nil) {
		err = errors.New("the streamed answer's last part has no reply.text")
	}
	c.add(CaseChatStreamed, err, fmt.Sprintf("%d deltas and the answer", parts-1))
}

// fileCase: a File message is answered.
func (c *checker) fileCase(ctx context.Context) {
	if !c.reg.File {
		c.skip(CaseFile, "the registration takes no files")
		return
	}
	req := c.request("File", "check.txt", "")
	req.Message.File = &File{Name: "check.txt", ContentType: "text/plain", Size: 5, SHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", Content: []byte("hello")}
	_, _, err := c.exchange(ctx, req)
	c.add(CaseFile, err, "answer")
}

// methodCases: each Data method is answered, with the parameters its schema gives.
func (c *checker) methodCases(ctx context.Context) {
	for _, m := range c.reg.Methods {
		params := c.params[m.Name]
		if params.refused != nil {
			c.add("Data "+m.Name+" answered", params.refused, "")
			continue
		}
		req := c.dataRequest(m.Name)
		ans, _, err := c.exchange(ctx, req)
		if err == nil {
			c.keep(req, ans)
		} else {
			err = fmt.Errorf("%w; %s", err, params)
		}
		c.add("Data "+m.Name+" answered", err, "answer; "+params.String()+c.followed(req))
	}
}

// webhookCases: each webhook method is answered, with a response the ingress can send on.
func (c *checker) webhookCases(ctx context.Context) {
	var responses []webhookAnswer
	for _, w := range c.reg.Webhooks {
		req := c.webhookRequest(w)
		ans, _, err := c.exchange(ctx, req)
		if err == nil {
			c.keep(req, ans)
		}
		responses = append(responses, webhookAnswer{method: w, ans: ans})
		c.add("webhook "+w+" answered", err, "answer"+c.followed(req))
	}
	if len(c.reg.Webhooks) == 0 {
		c.skip(CaseWebhookAnswers, "the registration has no webhook methods")
		return
	}
	detail, err := checkResponses(responses)
	c.add(CaseWebhookAnswers, err, detail)
}

// sequenceCases: the order, state-conflict and retry cases on the first request answered with
// a state (else first), and the keep-alive case.
func (c *checker) sequenceCases(ctx context.Context, first Request) {
	tmpl := c.stateful
	if tmpl == nil {
		tmpl = &first
	}
	states, detail, err := c.order(ctx, *tmpl)
	c.add(CaseOrder, err, detail)
	detail, err = c.conflict(ctx, *tmpl, states)
	c.add(CaseStateConflict, err, detail)
	detail, err = c.retry(ctx, *tmpl)
	c.add(CaseRetry, err, detail)
	c.add(CaseKeepAlive, c.keepAlive(ctx), "reused")
}

// webhookAnswer is a webhook method's answer, for checkResponses; ans is nil when the call
// failed.
type webhookAnswer struct {
	method string
	ans    *Answer
}

// checkResponses checks the webhook answers' responses: a status the host can answer the
// caller with (200 to 599; none is 200), and a content type with a body, which would otherwise
// reach the caller as application/json. A webhook without a protocol answer fails it too: there
// was nothing to check.
func checkResponses(answers []webhookAnswer) (string, error) {
	var bad []string
	judged := 0
	for _, a := range answers {
		if a.ans == nil {
			bad = append(bad, fmt.Sprintf("webhook %s: no protocol answer to check", a.method))
			continue
		}
		resp := a.ans.Response
		if a.ans.Error != nil || resp == nil {
			continue // a failed request, or an empty 200: nothing to judge
		}
		judged++
		if resp.Status != 0 && (resp.Status < 200 || resp.Status > 599) {
			bad = append(bad, fmt.Sprintf("webhook %s: response.status %d is not from 200 to 599", a.method, resp.Status))
		}
		if (resp.Body != "" || len(resp.BodyBase64) > 0) && resp.ContentType == "" {
			bad = append(bad, fmt.Sprintf("webhook %s: the response has a body but no contentType (the caller would get it as application/json)", a.method))
		}
	}
	if len(bad) > 0 {
		return "", errors.New(strings.Join(bad, "; "))
	}
	return fmt.Sprintf("%d responses", judged), nil
}

// order sends orderRequests requests of one conversation one after another, each with the
// state the previous answer gave (null first), and returns the states sent, then the last
// answer's: orderRequests+1 states.
func (c *checker) order(ctx context.Context, tmpl Request) ([]json.RawMessage, string, error) {
	states := []json.RawMessage{json.RawMessage("null")}
	changes, stateless := 0, true
	for i := range orderRequests {
		req := c.again(tmpl)
		req.State = states[i]
		ans, _, err := c.exchange(ctx, &req)
		if err != nil {
			return nil, "", fmt.Errorf("request %d of %d: %w", i+1, orderRequests, err)
		}
		next := states[i]
		if ans.Error == nil && ans.State != nil {
			if !json.Valid(ans.State) {
				return nil, "", fmt.Errorf("request %d of %d: the answer's state is not JSON", i+1, orderRequests)
			}
			stateless = false
			next = ans.State
			if !jsonEqual(next, states[i]) {
				changes++
			}
		}
		states = append(states, next)
	}
	if stateless {
		return states, fmt.Sprintf("%s: %d requests answered; the answers carry no state", describe(tmpl), orderRequests), nil
	}
	return states, fmt.Sprintf("%s: %d requests answered; the state changed %d times", describe(tmpl), orderRequests, changes), nil
}

// conflict sends a request with the first state of the order case, then again (same requestId,
// same attempt) with a fresher one, as a host does after its compare-and-set of the state
// failed. The second answer must be given, and, when the order case showed that the agent's
// new state depends on the state it is sent, must not carry the state answered to the first.
func (c *checker) conflict(ctx context.Context, tmpl Request, states []json.RawMessage) (string, error) {
	if len(states) < orderRequests+1 {
		return "", errors.New("not run: the order case failed")
	}
	stale, fresh := states[0], states[orderRequests-1]
	req := c.again(tmpl)
	req.State = stale
	first, _, err := c.exchange(ctx, &req)
	if err != nil {
		return "", fmt.Errorf("the request with the stale state: %w", err)
	}
	req.State = fresh // sent again with the steps and waits it made: its journal
	second, _, err := c.exchange(ctx, &req)
	if err != nil {
		return "", fmt.Errorf("the request sent again with the fresher state: %w", err)
	}
	if first.Error == nil && second.Error != nil {
		return "", fmt.Errorf("the request sent again with the fresher state was refused: %d %s", second.Error.Status, second.Error.Message)
	}
	if !dependsOnState(states) {
		return describe(tmpl) + ": answered; the agent's state does not visibly depend on the state sent", nil
	}
	if first.Error == nil && second.Error == nil && first.State != nil && second.State != nil && jsonEqual(first.State, second.State) {
		return "", errors.New("sent again with a fresher state, the request got the state answered to the stale one: " +
			"compute the answer from the request's state, not from an earlier answer to its requestId")
	}
	return describe(tmpl) + ": answered from the fresher state", nil
}

// dependsOnState reports whether the order case's states, after the first (null), are all set
// and all different: then the agent's new state is a function of the state it is sent.
func dependsOnState(states []json.RawMessage) bool {
	for i := 1; i < len(states); i++ {
		for j := 0; j < i; j++ {
			if jsonEqual(states[i], states[j]) {
				return false
			}
		}
	}
	return len(states) > 2
}

// retry sends a request, then the same one (same requestId) as attempt 2: the second must be
// answered, and, when the first was answered without an error, without one.
func (c *checker) retry(ctx context.Context, tmpl Request) (string, error) {
	req := c.again(tmpl)
	first, _, err := c.exchange(ctx, &req)
	if err != nil {
		return "", fmt.Errorf("attempt 1: %w", err)
	}
	req.Attempt = 2 // with the steps and waits attempt 1 made: its journal
	second, _, err := c.exchange(ctx, &req)
	if err != nil {
		return "", fmt.Errorf("attempt 2: %w", err)
	}
	if first.Error == nil && second.Error != nil {
		return "", fmt.Errorf("attempt 2 was refused: %d %s", second.Error.Status, second.Error.Message)
	}
	return describe(tmpl) + ": attempt 2 answered", nil
}

// describe names the request a case sent: "Chat", "Data count", "webhook echo".
func describe(req Request) string {
	switch {
	case req.Webhook != nil:
		return "webhook " + req.Webhook.Method
	case req.Type == "Data" && req.Message != nil:
		return "Data " + req.Message.Method
	}
	return req.Type
}

// jsonEqual reports whether two JSON values are equal, whatever their spacing and key order.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

type checker struct {
	reg      Registration
	client   *http.Client
	workflow string
	// params are the parameters each Data method is sent, by name.
	params map[string]checkParams
	n      int

	// out are the cases' results so far; stateful is the first request answered with a state;
	// stepped is the first that made steps or waits, with its journal, and steppedAnswer its
	// answer.
	out           []CheckResult
	stateful      *Request
	stepped       *Request
	steppedAnswer *Answer
	// waits, calls and reads count the waits, calls and history reads exchange followed, by
	// requestId.
	waits, calls, reads map[string]int
}

// pick is a request the agent can take: a Chat, else its first Data method or webhook.
func (c *checker) pick() Request {
	switch {
	case c.reg.Chat:
		return *c.request("Chat", "hello", "")
	case len(c.reg.Methods) > 0:
		return *c.dataRequest(c.reg.Methods[0].Name)
	default:
		w := ""
		if len(c.reg.Webhooks) > 0 {
			w = c.reg.Webhooks[0]
		}
		return *c.webhookRequest(w)
	}
}

// webhookRequest is a call of the webhook method w with the JSON body {}.
func (c *checker) webhookRequest(w string) *Request {
	req := c.request("Webhook", "", "")
	req.Message = nil
	req.Webhook = &Webhook{Method: w, Params: map[string]string{}, Headers: map[string]string{"Content-Type": "application/json"},
		ContentType: "application/json", Body: []byte(`{}`)}
	return req
}

// dataRequest is a call of the Data method with the parameters paramsFor chose.
func (c *checker) dataRequest(method string) *Request {
	req := c.request("Data", method, method)
	if p, ok := c.params[method]; ok {
		req.Message.Data = p.data
	}
	return req
}

// again is a copy of the request with a new requestId, attempt 1, a new deadline and an empty
// journal.
func (c *checker) again(req Request) Request {
	fresh := c.request(req.Type, "", "")
	req.RequestID, req.Attempt, req.Deadline, req.Journal = fresh.RequestID, 1, fresh.Deadline, fresh.Journal
	return req
}

func (c *checker) request(typ, text, method string) *Request {
	c.n++
	return &Request{
		Protocol: ProtocolVersion, Type: typ, Agent: c.reg.Name, TenantID: "check",
		WorkflowID: c.workflow, WorkflowType: "Supervisor Workflow", Activation: "check", RunID: "check-run",
		HostID: "check-host", ParticipantID: "checker", RequestID: "check-" + strconv.Itoa(c.n) + "-" + randomHex(4), Attempt: 1,
		Deadline: timefmt.Of(time.Now().Add(30 * time.Second)),
		State:    json.RawMessage("null"),
		Message:  &Message{Text: text, Method: method, Data: json.RawMessage("{}")},
		Journal:  []JournalEntry{},
	}
}

// post sends a request signed with secret ("" unsigned) and returns the response.
func (c *checker) post(ctx context.Context, req Request, secret string, trace *httptrace.ClientTrace) (*http.Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if trace != nil {
		ctx = httptrace.WithClientTrace(ctx, trace)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.reg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(HeaderProtocol, strconv.Itoa(req.Protocol))
	if secret != "" {
		hdr, err := webhooksig.Standard{Secret: secret}.Sign(req.RequestID, time.Now(), body)
		if err != nil {
			return nil, err
		}
		for k, v := range hdr {
			hreq.Header.Set(k, v)
		}
	}
	return c.client.Do(hreq)
}

func (c *checker) expectStatus(ctx context.Context, req Request, secret string, want int) error {
	resp, err := c.post(ctx, req, secret, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("answered %d, want %d", resp.StatusCode, want)
	}
	return nil
}

// call sends a signed request and reads its answer as a host does, counting a stream's parts
// (its deltas and the answer; 1 for an answer that is not streamed).
func (c *checker) call(ctx context.Context, req *Request, secret string) (*Answer, int, error) {
	resp, err := c.post(ctx, *req, secret, nil)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("answered %d, want 200", resp.StatusCode)
	}
	deltas := 0
	ans, err := readAnswer(resp, func(string) { deltas++ })
	if errors.Is(err, errAnswerCut) {
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("not a protocol answer: %w", err)
	}
	return ans, deltas + 1, nil
}

// state sends a request with a state and checks that a state the agent answers is JSON.
func (c *checker) state(ctx context.Context) error {
	req := c.pick()
	req.RequestID = "check-state-" + randomHex(4)
	req.State = json.RawMessage(`{"checked":true}`)
	ans, _, err := c.exchange(ctx, &req)
	if err != nil {
		return err
	}
	if ans.State != nil && !json.Valid(ans.State) {
		return errors.New("the answer's state is not JSON")
	}
	return nil
}

// keepAlive sends two requests and checks that the second reused the first's connection.
func (c *checker) keepAlive(ctx context.Context) error {
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
	for range 2 {
		req := c.pick()
		resp, err := c.post(ctx, req, c.reg.Secret, trace)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if !reused {
		return errors.New("the second request opened a new connection: answer with Content-Length (or chunked) and keep the connection open")
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
