// Package remotetest serves a remote agent written against the protocol by hand
// (docs/remote-agents.md), in the test's process, for tests of what calls remote agents: Check,
// the command-line client. It uses no kit. Faults make it break one rule of the protocol each,
// so that a test can see that rule's case of Check fail.
package remotetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// Faults are the rules of the protocol an Endpoint breaks; the zero value breaks none.
type Faults struct {
	// NoSignatureCheck takes unsigned and wrongly signed requests.
	NoSignatureCheck bool
	// AnyProtocol takes requests of any protocol version.
	AnyProtocol bool
	// CloseConnections answers every request with Connection: close.
	CloseConnections bool
	// CacheByRequestID answers a requestId it has seen with its first answer, whatever the state
	// the request carries now.
	CacheByRequestID bool
	// RefuseRetries fails every attempt after the first with an error 409.
	RefuseRetries bool
	// WebhookWithoutContentType leaves the content type out of the webhook's response.
	WebhookWithoutContentType bool
	// WebhookStatus, when not 0, is the status of the webhook's response.
	WebhookStatus int
	// CompleteNotBoolean answers the webhook with "complete": "yes", which is no boolean.
	CompleteNotBoolean bool
	// RefuseJournal answers 400 to a request whose journal is not empty.
	RefuseJournal bool
	// IgnoreJournal makes Steps ask for its first step whatever the journal holds.
	IgnoreJournal bool
	// StepWithoutName makes Steps ask for a step without a name.
	StepWithoutName bool
}

// Endpoint is a remote agent: Chat ("You said: …", streamed word by word when asked), File
// ("Received {name} ({n} bytes)"), the Data methods count (a counter kept in the state) and sum
// ({"values": [...]} → {"sum": n}), and the webhook echo (the body back, with its content type).
// It also serves the Data methods add (Add), sleep (Sleep) and steps (Steps), which its
// Registration leaves out.
type Endpoint struct {
	*httptest.Server
	// Secret is the signing secret it checks.
	Secret string
	faults Faults

	mu       sync.Mutex
	answered map[string][]byte // by requestId, for Faults.CacheByRequestID
	requests int
	slept    map[string][]int // by conversation, for Slept
}

// New starts an Endpoint with a new secret; it stops when the test ends.
func New(t testing.TB, faults Faults) *Endpoint {
	e := &Endpoint{Secret: webhooksig.NewStandardSecret(), faults: faults, answered: map[string][]byte{}, slept: map[string][]int{}}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

// Registration is the endpoint's registration under name, with its secret, as a kit's Echo
// prints its own.
func (e *Endpoint) Registration(name string) remote.Registration {
	return remote.Registration{
		Name: name, URL: e.URL + "/agentbus", Chat: true, File: true, Webhooks: []string{"echo"},
		Methods: []remote.Method{
			{Name: "count", Description: "Increments this conversation's counter and returns it."},
			{Name: "sum", Description: "Adds numbers.", Schema: json.RawMessage(`{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"examples":[{"values":[2,3]}]}`)},
		},
		Secret: e.Secret,
	}
}

// Add is the Data method add: it adds n to a total kept in the state and answers the total. Its
// parameters need n, as its schema says, and its example gives it: without n, as with the
// parameters {}, it answers 422 and no protocol answer, as an agent may that leaves checking its
// parameters to agentbus.
var Add = remote.Method{
	Name: "add", Description: "Adds n to the total.",
	Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number"}},"required":["n"],"examples":[{"n":2}]}`),
}

// Sleep is the Data method sleep: it waits ms milliseconds (at most 10 s), then answers
// {"slept": ms, "n": n}, and notes n under its conversation (Slept). A slow agent, for tests of
// how the hosts share its slots.
var Sleep = remote.Method{
	Name: "sleep", Description: "Waits ms milliseconds, then answers.",
	Schema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"},"n":{"type":"integer"}},"examples":[{"ms":10,"n":1}]}`),
}

// Steps is the Data method steps: it makes n steps ("step 1" … "step n", each giving its number)
// then one wait ("pause", for a second), as a kit's handler does, answering from its journal, and
// then answers {"journal": n}, how many entries its journal held.
var Steps = remote.Method{
	Name: "steps", Description: "Makes n steps, then waits a second.",
	Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"examples":[{"n":2}]}`),
}

// CallRead is the Data method callread: it asks the host for an Agent2Agent call ("call", of
// count) and a read of its thread ("read", of 5 messages), answering from its journal, and then
// answers {"journal": [...]}, the entries its journal held.
var CallRead = remote.Method{
	Name: "callread", Description: "Calls count, then reads the thread.",
	Schema: json.RawMessage(`{"type":"object","examples":[{}]}`),
}

// maxSleep bounds Sleep's wait.
const maxSleep = 10 * time.Second

// Slept returns the n of every sleep call answered, in the order answered, by conversation:
// "{tenant} {workflowId} {participantId}".
func (e *Endpoint) Slept() map[string][]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string][]int, len(e.slept))
	for k, v := range e.slept {
		out[k] = slices.Clone(v)
	}
	return out
}

// Requests is how many signed requests of protocol version 1 it answered.
func (e *Endpoint) Requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	if e.faults.CloseConnections {
		w.Header().Set("Connection", "close")
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST agentbus requests here", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the request", http.StatusBadRequest)
		return
	}
	if !e.faults.NoSignatureCheck {
		hdr := map[string]string{}
		for k := range r.Header {
			hdr[k] = r.Header.Get(k)
		}
		if err := (webhooksig.Standard{Secret: e.Secret}).Verify(hdr, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
	}
	var req remote.Request
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "not a JSON request", http.StatusBadRequest)
		return
	}
	if !e.faults.AnyProtocol && (req.Protocol != remote.ProtocolVersion || r.Header.Get(remote.HeaderProtocol) != strconv.Itoa(remote.ProtocolVersion)) {
		http.Error(w, "not a protocol 1 request", http.StatusBadRequest)
		return
	}
	if e.faults.RefuseJournal && len(req.Journal) > 0 {
		http.Error(w, "a journal", http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.requests++
	cached, seen := e.answered[req.RequestID]
	e.mu.Unlock()
	if e.faults.CacheByRequestID && seen {
		writeJSON(w, cached)
		return
	}
	if req.Type == "Chat" && req.Stream && req.Message != nil {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, d := range []string{"You ", "said: ", req.Message.Text} {
			fmt.Fprintf(w, "{\"delta\":%q}\n", d)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "{\"reply\":{\"text\":%q}}\n", "You said: "+req.Message.Text)
		return
	}
	ans := e.answer(&req)
	if ans == nil {
		http.Error(w, "the parameters are not add's", http.StatusUnprocessableEntity)
		return
	}
	b, err := json.Marshal(ans)
	if err != nil {
		http.Error(w, "encoding the answer", http.StatusInternalServerError)
		return
	}
	e.mu.Lock()
	if _, ok := e.answered[req.RequestID]; !ok {
		e.answered[req.RequestID] = b
	}
	e.mu.Unlock()
	writeJSON(w, b)
}

// answer is the answer object of a request; nil for a call of add without n.
func (e *Endpoint) answer(req *remote.Request) map[string]any {
	fail := func(status int, msg string) map[string]any {
		return map[string]any{"error": map[string]any{"status": status, "message": msg, "retry": false}}
	}
	if e.faults.RefuseRetries && req.Attempt > 1 {
		return fail(http.StatusConflict, "this request was answered already")
	}
	switch {
	case req.Type == "Webhook" && req.Webhook != nil:
		if req.Webhook.Method != "echo" {
			return fail(http.StatusNotFound, "no such webhook")
		}
		resp := map[string]any{"status": http.StatusOK, "bodyBase64": req.Webhook.Body}
		if e.faults.WebhookStatus != 0 {
			resp["status"] = e.faults.WebhookStatus
		}
		if !e.faults.WebhookWithoutContentType {
			ct := req.Webhook.ContentType
			if ct == "" {
				ct = "application/octet-stream"
			}
			resp["contentType"] = ct
		}
		if e.faults.CompleteNotBoolean {
			return map[string]any{"response": resp, "complete": "yes"}
		}
		return map[string]any{"response": resp}
	case req.Message == nil:
		return fail(http.StatusBadRequest, "no message")
	case req.Type == "Chat":
		return map[string]any{"reply": map[string]any{"text": "You said: " + req.Message.Text}}
	case req.Type == "File":
		if req.Message.File == nil {
			return map[string]any{"reply": map[string]any{"text": "No file data received."}}
		}
		return map[string]any{"reply": map[string]any{"text": fmt.Sprintf("Received %s (%d bytes)", req.Message.File.Name, len(req.Message.File.Content))}}
	case req.Type == "Data" && req.Message.Method == "count":
		var st struct {
			Count int `json:"count"`
		}
		if len(req.State) > 0 && !bytes.Equal(req.State, []byte("null")) {
			if err := json.Unmarshal(req.State, &st); err != nil {
				return fail(http.StatusBadRequest, "the state is not the counter's")
			}
		}
		st.Count++
		return map[string]any{"reply": map[string]any{"data": map[string]any{"count": st.Count}}, "state": st}
	case req.Type == "Data" && req.Message.Method == Add.Name:
		var p struct {
			N *float64 `json:"n"`
		}
		if json.Unmarshal(req.Message.Data, &p) != nil || p.N == nil {
			return nil
		}
		var st struct {
			Total float64 `json:"total"`
		}
		if len(req.State) > 0 && !bytes.Equal(req.State, []byte("null")) {
			if err := json.Unmarshal(req.State, &st); err != nil {
				return fail(http.StatusBadRequest, "the state is not the total's")
			}
		}
		st.Total += *p.N
		return map[string]any{"reply": map[string]any{"data": st}, "state": st}
	case req.Type == "Data" && req.Message.Method == Sleep.Name:
		var p struct {
			MS int `json:"ms"`
			N  int `json:"n"`
		}
		_ = json.Unmarshal(req.Message.Data, &p)
		time.Sleep(min(time.Duration(max(p.MS, 0))*time.Millisecond, maxSleep))
		e.mu.Lock()
		conv := req.TenantID + " " + req.WorkflowID + " " + req.ParticipantID
		e.slept[conv] = append(e.slept[conv], p.N)
		e.mu.Unlock()
		return map[string]any{"reply": map[string]any{"data": map[string]int{"slept": p.MS, "n": p.N}}}
	case req.Type == "Data" && req.Message.Method == Steps.Name:
		var p struct {
			N int `json:"n"`
		}
		_ = json.Unmarshal(req.Message.Data, &p)
		done := len(req.Journal)
		switch {
		case e.faults.StepWithoutName:
			return map[string]any{"step": map[string]any{"name": "", "result": 1}}
		case e.faults.IgnoreJournal:
			done = 0
		}
		if done < p.N {
			return map[string]any{"step": map[string]any{"name": fmt.Sprintf("step %d", done+1), "result": done + 1}}
		}
		if done == p.N {
			return map[string]any{"wait": map[string]any{"name": "pause", "timeoutMs": 1000}}
		}
		return map[string]any{"reply": map[string]any{"data": map[string]any{"journal": done}}}
	case req.Type == "Data" && req.Message.Method == CallRead.Name:
		switch len(req.Journal) {
		case 0:
			return map[string]any{"call": map[string]any{"name": "call", "activation": "b", "method": "count"}}
		case 1:
			return map[string]any{"history": map[string]any{"name": "read", "size": 5}}
		}
		return map[string]any{"reply": map[string]any{"data": map[string]any{"journal": req.Journal}}}
	case req.Type == "Data" && req.Message.Method == "sum":
		var p struct {
			Values []float64 `json:"values"`
		}
		_ = json.Unmarshal(req.Message.Data, &p)
		sum := 0.0
		for _, v := range p.Values {
			sum += v
		}
		return map[string]any{"reply": map[string]any{"data": map[string]any{"sum": sum}}}
	default:
		return fail(http.StatusNotFound, "the agent has no such method")
	}
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
