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
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// CheckResult is the outcome of one case of Check.
type CheckResult struct {
	Case   string `json:"case"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Check drives an agent's endpoint through the protocol's cases, as a workflow host would call
// it, and reports each: signatures (an unsigned or wrongly signed request is refused with 401),
// a request of another protocol version refused with 400, an answer to every method the
// registration names (Chat, File, each Data method and webhook), a streamed chat, state sent and
// kept across requests, and keep-alive (the second request reuses the first's connection).
// Nothing is registered and no host is involved: it is for agent authors, before they register.
func Check(ctx context.Context, reg Registration) []CheckResult {
	c := &checker{reg: reg, client: &http.Client{Timeout: 30 * time.Second}, workflow: "check:" + reg.Name + ":Supervisor Workflow:check-" + randomHex(4)}
	var out []CheckResult
	add := func(name string, err error, ok string) {
		r := CheckResult{Case: name, OK: err == nil, Detail: ok}
		if err != nil {
			r.Detail = err.Error()
		}
		out = append(out, r)
	}
	first := c.pick()
	add("unsigned request refused with 401", c.expectStatus(ctx, first, "", http.StatusUnauthorized), "401")
	add("wrongly signed request refused with 401", c.expectStatus(ctx, first, webhooksig.NewStandardSecret(), http.StatusUnauthorized), "401")
	v2 := first
	v2.Protocol = 2
	add("protocol version 2 refused with 400", c.expectStatus(ctx, v2, reg.Secret, http.StatusBadRequest), "400")
	if reg.Chat {
		req := c.request("Chat", "hello", "")
		ans, _, err := c.call(ctx, req, reg.Secret)
		if err == nil && (ans.Reply == nil || ans.Reply.Text == nil || *ans.Reply.Text == "") && ans.Error == nil {
			err = errors.New("the answer has neither reply.text nor error")
		}
		add("Chat answered", err, "reply")
		req.Stream = true
		ans, lines, err := c.call(ctx, req, reg.Secret)
		if err == nil && ans.Error == nil && (ans.Reply == nil || ans.Reply.Text == nil) {
			err = errors.New("the streamed answer's last line has no reply.text")
		}
		add("Chat streamed", err, fmt.Sprintf("%d lines", lines))
	}
	if reg.File {
		req := c.request("File", "check.txt", "")
		req.Message.File = &File{Name: "check.txt", ContentType: "text/plain", Size: 5, Content: []byte("hello")}
		_, _, err := c.call(ctx, req, reg.Secret)
		add("File answered", err, "answer")
	}
	for _, m := range reg.Methods {
		_, _, err := c.call(ctx, c.request("Data", m.Name, m.Name), reg.Secret)
		add("Data "+m.Name+" answered", err, "answer")
	}
	for _, w := range reg.Webhooks {
		req := c.request("Webhook", "", "")
		req.Message = nil
		req.Webhook = &Webhook{Method: w, Params: map[string]string{}, Headers: map[string]string{"Content-Type": "application/json"}, ContentType: "application/json", Body: []byte(`{}`)}
		ans, _, err := c.call(ctx, req, reg.Secret)
		if err == nil && ans.Response != nil && ans.Response.Status != 0 && (ans.Response.Status < 200 || ans.Response.Status > 599) {
			err = fmt.Errorf("response.status %d is not an HTTP status", ans.Response.Status)
		}
		add("webhook "+w+" answered", err, "answer")
	}
	add("state is sent and an answer's state is valid JSON", c.state(ctx), "ok")
	add("keep-alive: a second request reuses the connection", c.keepAlive(ctx), "reused")
	return out
}

type checker struct {
	reg      Registration
	client   *http.Client
	workflow string
	n        int
}

// pick is a request the agent can take: a Chat, else its first Data method or webhook.
func (c *checker) pick() Request {
	switch {
	case c.reg.Chat:
		return *c.request("Chat", "hello", "")
	case len(c.reg.Methods) > 0:
		return *c.request("Data", c.reg.Methods[0].Name, c.reg.Methods[0].Name)
	default:
		req := c.request("Webhook", "", "")
		req.Message = nil
		w := ""
		if len(c.reg.Webhooks) > 0 {
			w = c.reg.Webhooks[0]
		}
		req.Webhook = &Webhook{Method: w, Params: map[string]string{}, Headers: map[string]string{}, Body: []byte{}}
		return *req
	}
}

func (c *checker) request(typ, text, method string) *Request {
	c.n++
	return &Request{
		Protocol: ProtocolVersion, Type: typ, Agent: c.reg.Name, TenantID: "check",
		WorkflowID: c.workflow, WorkflowType: "Supervisor Workflow", Activation: "check", RunID: "check-run",
		ParticipantID: "checker", RequestID: "check-" + strconv.Itoa(c.n) + "-" + randomHex(4), Attempt: 1,
		Deadline: time.Now().Add(30 * time.Second).UTC().Truncate(time.Millisecond),
		State:    json.RawMessage("null"),
		Message:  &Message{Text: text, Method: method, Data: json.RawMessage("{}")},
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

// call sends a signed request and reads its answer as a host does, counting a stream's lines.
func (c *checker) call(ctx context.Context, req *Request, secret string) (*Answer, int, error) {
	resp, err := c.post(ctx, *req, secret, nil)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("answered %d, want 200", resp.StatusCode)
	}
	lines := 0
	ans, err := readAnswer(resp, func(string) { lines++ })
	if err != nil {
		return nil, 0, fmt.Errorf("not a protocol answer: %w", err)
	}
	return ans, lines + 1, nil
}

// state sends a request with a state and checks that a state the agent answers is JSON.
func (c *checker) state(ctx context.Context) error {
	req := c.pick()
	req.RequestID = "check-state-" + randomHex(4)
	req.State = json.RawMessage(`{"checked":true}`)
	ans, _, err := c.call(ctx, &req, c.reg.Secret)
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
