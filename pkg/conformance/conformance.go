// Package conformance is a black-box suite of the HTTP API as the documentation describes it
// (docs/interface.md, docs/webhooks.md, docs/messaging.md, docs/echo.md), run against a
// deployment whose agent Echo is the reference agent or a stand-in for it: the Go Echo, or a
// remote Echo (EchoPy, EchoTS) registered under the name Echo. It talks to the deployment over
// HTTP only, as any client does: the webhook endpoint, send, converse, history and listen.
//
// Run(t, target) runs every case as a subtest. Cases of what a remote Echo cannot offer
// (Feature, RemoteEcho) check, when the target lacks the feature, that the method is unknown
// (404 unknown-method) instead. TestGoEcho (here), TestPythonEchoConformance (pkg/remote) and
// TestTypeScriptEchoConformance (sdk/typescript) run it against the three Echos.
// CheckRemoteEcho runs the registration check a kit's Echo must pass (TestPythonEchoConforms,
// TestTypeScriptEchoConforms).
package conformance

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/sse"
)

// Feature names an optional part of Echo: one that an Echo behind the remote-agent protocol,
// version 1 (docs/remote-agents.md), may not offer.
type Feature string

// The optional features of Echo.
const (
	// WebhookAck is the webhook method ack: it answers 202 before its work is done.
	WebhookAck Feature = "webhook ack"
	// DataHistory is the Data method history: it reads its thread.
	DataHistory Feature = "Data history"
	// DataRelay is the Data method relay: it calls another instance and gives back its result.
	DataRelay Feature = "Data relay"
	// ChatToolEvents are a chat's tool calls as the platform makes them: tool_call and
	// tool_result events of a streamed converse call, and the call and its result stored in the
	// thread.
	ChatToolEvents Feature = "chat tool events"
	// DataSteps is the Data method steps: it makes durable steps (agent.Step).
	DataSteps Feature = "Data steps"
	// DataAsk is the Data methods ask and answer: a request that waits for the participant
	// (agent.Wait).
	DataAsk Feature = "Data ask"
)

// Features lists every optional feature.
var Features = []Feature{WebhookAck, DataHistory, DataRelay, ChatToolEvents, DataSteps, DataAsk}

// RemoteEcho lists what an Echo behind the remote-agent protocol lacks: the webhook method ack
// and the chat's tool events. It makes the others with the protocol's steps and waits, and
// with its calls and reads of the thread, which the host makes for it.
var RemoteEcho = []Feature{WebhookAck, ChatToolEvents}

// Target is the deployment under test.
type Target struct {
	// URL is the base URL, such as http://127.0.0.1:8080.
	URL string
	// Key is a tenant-admin key of Tenant.
	Key string
	// Tenant is the key's tenant.
	Tenant string
	// Without lists the optional features the target's Echo lacks; empty for the Go Echo.
	Without []Feature
}

func (t Target) has(f Feature) bool { return !slices.Contains(t.Without, f) }

// Run runs every case against the target, each as a subtest of t. It needs the agent Echo to
// be live; the instances it uses have names of their own, made new on every run.
func Run(t *testing.T, target Target) {
	target.URL = strings.TrimSuffix(target.URL, "/")
	require.NotEmpty(t, target.URL, "the target's URL")
	require.NotEmpty(t, target.Key, "the target's key")
	require.NotEmpty(t, target.Tenant, "the target's tenant")
	nonce := make([]byte, 4)
	_, _ = rand.Read(nonce)
	s := &suite{target: target, nonce: hex.EncodeToString(nonce)}
	for _, group := range []struct {
		name  string
		cases []testCase
	}{{"webhook", s.webhookCases()}, {"send", s.sendCases()}, {"converse", s.converseCases()}} {
		t.Run(group.name, func(t *testing.T) {
			for _, c := range group.cases {
				t.Run(c.name, func(t *testing.T) { c.run(t) })
			}
		})
	}
}

// Cases is how many cases Run runs.
func Cases() int {
	s := &suite{}
	return len(s.webhookCases()) + len(s.sendCases()) + len(s.converseCases())
}

type testCase struct {
	name string
	run  func(t *testing.T)
}

// suite holds what the cases share.
type suite struct {
	target Target
	nonce  string
}

// act is an activation name of this run: cases that keep state use one of their own.
func (s *suite) act(name string) string { return "conf-" + name + "-" + s.nonce }

// workflowID is the full workflow id of an activation of Echo's default workflow type.
func (s *suite) workflowID(activation string) string {
	return s.target.Tenant + ":Echo:Supervisor Workflow:" + activation
}

// key is an Idempotency-Key or requestId of this run.
func (s *suite) key(name string) string { return "conf-" + name + "-" + s.nonce }

// response is an HTTP answer, read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// ContentType is the answer's media type without parameters.
func (r *response) ContentType() string {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.TrimSpace(ct)
}

func (r *response) String() string {
	return fmt.Sprintf("%d %s %s", r.Status, r.Header.Get("Content-Type"), r.Body)
}

// object decodes the body as a JSON object, failing the test when it is not one.
func (r *response) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "the body is a JSON object: %s", r)
	require.NotNil(t, m, "the body is a JSON object: %s", r)
	return m
}

// call makes one request. A 429 is waited out (Retry-After) and tried again, so that the suite
// runs against a deployment with its default rate limit.
func (s *suite) call(t *testing.T, method, rawURL string, header http.Header, body []byte) *response {
	t.Helper()
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(t.Context(), method, rawURL, bytes.NewReader(body))
		require.NoError(t, err)
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "%s %s", method, rawURL)
		b, err := readBody(resp)
		resp.Body.Close()
		require.NoError(t, err)
		if resp.StatusCode == http.StatusTooManyRequests && attempt < 10 {
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			time.Sleep(time.Duration(max(wait, 1)) * time.Second)
			continue
		}
		return &response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
}

// readBody reads an answer's body into one buffer of the length the answer announces (a 32
// MiB echo's answer is 44 MiB, which io.ReadAll would copy several times as it grows).
func readBody(resp *http.Response) ([]byte, error) {
	size := 0
	if n := resp.ContentLength; n > 0 && n <= 64<<20 {
		size = int(n) + bytes.MinRead // ReadFrom needs room for a read that gets EOF
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(resp.Body)
	return buf.Bytes(), err
}

// bearer is a header with the target's key.
func (s *suite) bearer() http.Header {
	return http.Header{"Authorization": {"Bearer " + s.target.Key}}
}

// webhook calls POST /api/user/webhooks/{workflow}/{method}: workflow and method are put in the
// path as given (escape them first), query gets the target's apikey unless it has one.
func (s *suite) webhook(t *testing.T, workflow, method string, query url.Values, header http.Header, body []byte) *response {
	t.Helper()
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	if _, ok := q["apikey"]; !ok {
		q.Set("apikey", s.target.Key)
	}
	return s.call(t, http.MethodPost, s.target.URL+"/api/user/webhooks/"+workflow+"/"+method+"?"+q.Encode(), header, body)
}

// hook calls a webhook method of Echo's instance activation (a full workflow id) with no body.
func (s *suite) hook(t *testing.T, activation, method string) *response {
	t.Helper()
	return s.webhook(t, s.pathID(activation), method, nil, nil, nil)
}

// pathID is the full workflow id of activation, escaped for the webhook path.
func (s *suite) pathID(activation string) string {
	return url.PathEscape(s.workflowID(activation))
}

// sendURL is the send endpoint of the target's tenant, with query.
func (s *suite) sendURL(query string) string {
	u := s.target.URL + "/api/v1/admin/tenants/" + url.PathEscape(s.target.Tenant) + "/messaging/send"
	if query != "" {
		u += "?" + query
	}
	return u
}

// send POSTs a send body with the target's key.
func (s *suite) send(t *testing.T, query string, body map[string]any) *response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	h := s.bearer()
	h.Set("Content-Type", "application/json")
	return s.call(t, http.MethodPost, s.sendURL(query), h, b)
}

// sendWait sends a message to Echo's activation with wait=true and returns the answer, which
// must be 200.
func (s *suite) sendWait(t *testing.T, activation, typ, text string, data any) map[string]any {
	t.Helper()
	body := map[string]any{"agentName": "Echo", "activationName": activation, "participantId": "ada", "type": typ, "text": text}
	if data != nil {
		body["data"] = data
	}
	r := s.send(t, "wait=true", body)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	return r.object(t)
}

// converse POSTs to the converse endpoint with the query and header given, the target's key as
// a bearer token unless header has an Authorization or query an apikey.
func (s *suite) converse(t *testing.T, query url.Values, header http.Header, body []byte) *response {
	t.Helper()
	h := http.Header{}
	for k, v := range header {
		h[k] = v
	}
	if h.Get("Authorization") == "" && !query.Has("apikey") {
		h.Set("Authorization", "Bearer "+s.target.Key)
	}
	if body != nil && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	return s.call(t, http.MethodPost, s.target.URL+"/api/user/rest/converse?"+query.Encode(), h, body)
}

// history reads a page of the thread of Echo's activation and participant, newest first.
func (s *suite) history(t *testing.T, activation, participant string, pageSize int) []map[string]any {
	t.Helper()
	q := url.Values{"agentName": {"Echo"}, "activationName": {activation}, "participantId": {participant}, "pageSize": {strconv.Itoa(pageSize)}}
	r := s.call(t, http.MethodGet, s.target.URL+"/api/v1/admin/tenants/"+url.PathEscape(s.target.Tenant)+"/messaging/history?"+q.Encode(), s.bearer(), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	var page struct {
		Messages []map[string]any `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &page), "%s", r)
	return page.Messages
}

// eventually polls the thread until cond holds for a page of it, and fails the test after 10 s.
func (s *suite) eventually(t *testing.T, activation, participant string, cond func(msgs []map[string]any) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msgs := s.history(t, activation, participant, 20)
		if cond(msgs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the thread is %v", what, msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertProblem checks that r is the problem of the slug with the status.
func assertProblem(t *testing.T, r *response, status int, slug string) map[string]any {
	t.Helper()
	require.Equal(t, status, r.Status, "%s", r)
	assert.Equal(t, "application/problem+json", r.ContentType(), "%s", r)
	p := r.object(t)
	assert.Equal(t, "urn:agentbus:problem:"+slug, p["type"], "%s", r)
	assert.EqualValues(t, status, p["status"], "%s", r)
	assert.Equal(t, http.StatusText(status), p["title"], "%s", r)
	return p
}

// readEvents reads Server-Sent Events from r until it ends or stop returns true for an event.
func readEvents(r io.Reader, stop func(sse.Event) bool) []sse.Event {
	var out []sse.Event
	_ = sse.NewReader(r).Each(func(ev sse.Event) bool {
		out = append(out, ev)
		return stop == nil || !stop(ev)
	})
	return out
}

// jsonOf decodes a JSON object, failing the test when it is not one.
func jsonOf(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m), "a JSON object: %s", s)
	return m
}
