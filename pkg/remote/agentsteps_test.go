package remote_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// stepper is a remote agent written against the protocol by hand that makes steps and waits as
// a kit's handler does: it answers each request from its journal.
type stepper struct {
	*httptest.Server
	secret string

	mu sync.Mutex
	// sent are the requests, by method (Chat: "chat"), each with its journal as sent.
	sent map[string][]sentRequest
}

// sentRequest is a request as the agent got it: its id, attempt and journal, and whether the
// journal was a JSON array.
type sentRequest struct {
	RequestID string
	Attempt   int
	Journal   []remote.JournalEntry
	Array     bool
}

func newStepper(t *testing.T) *stepper {
	s := &stepper{secret: webhooksig.NewStandardSecret(), sent: map[string][]sentRequest{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *stepper) registration(name string) map[string]any {
	methods := []map[string]any{}
	for _, m := range []string{"twice", "signal", "go", "badstep", "badwait", "longwait", "badresult"} {
		methods = append(methods, map[string]any{"name": m})
	}
	return map[string]any{"name": name, "url": s.URL + "/agentbus", "chat": true, "methods": methods, "secret": s.secret}
}

// requests returns the requests of a method so far.
func (s *stepper) requests(method string) []sentRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sentRequest(nil), s.sent[method]...)
}

func (s *stepper) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	hdr := map[string]string{}
	for k := range r.Header {
		hdr[k] = r.Header.Get(k)
	}
	if err := (webhooksig.Standard{Secret: s.secret}).Verify(hdr, body); err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var req remote.Request
	var raw struct {
		Journal json.RawMessage `json:"journal"`
	}
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(body, &raw) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	method := "chat"
	if req.Type == "Data" {
		method = req.Message.Method
	}
	s.mu.Lock()
	s.sent[method] = append(s.sent[method], sentRequest{RequestID: req.RequestID, Attempt: req.Attempt, Journal: req.Journal,
		Array: strings.HasPrefix(string(raw.Journal), "[")})
	s.mu.Unlock()
	answer := func(v string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, v)
	}
	n := len(req.Journal)
	switch method {
	case "chat":
		// Streams "thinking ", then a piece for each step recorded, as a kit's handler that
		// streams before and between its steps does on every run.
		w.Header().Set("Content-Type", "application/x-ndjson")
		text := "thinking "
		fmt.Fprintf(w, "{\"delta\":%q}\n", "thinking ")
		for i := range n {
			piece := fmt.Sprintf("step %d ", i+1)
			text += piece
			fmt.Fprintf(w, "{\"delta\":%q}\n", piece)
		}
		if n < 2 {
			fmt.Fprintf(w, "{\"step\":{\"name\":\"s%d\",\"result\":%d}}\n", n+1, n+1)
			return
		}
		fmt.Fprintf(w, "{\"reply\":{\"text\":%q}}\n", text)
	case "twice":
		switch n {
		case 0:
			answer(`{"step":{"name":"one","result":{"n":1}},"reply":{"text":"ignored"},"state":{"ignored":true}}`)
		case 1:
			answer(`{"step":{"name":"two","error":{"status":409,"message":"taken"}}}`)
		default:
			b, _ := json.Marshal(map[string]any{"reply": map[string]any{"data": map[string]any{"journal": req.Journal}}, "state": map[string]any{"done": true}})
			answer(string(b))
		}
	case "signal":
		if n == 0 {
			answer(`{"wait":{"name":"answer","methods":["go"],"signals":["go"],"timeoutMs":60000}}`)
			return
		}
		b, _ := json.Marshal(map[string]any{"reply": map[string]any{"data": map[string]any{"event": req.Journal[0].Result}}})
		answer(string(b))
	case "go":
		answer(`{"error":{"status":409,"message":"nothing waits"}}`)
	case "badstep":
		answer(`{"step":{"name":""}}`)
	case "badwait":
		answer(`{"wait":{"name":"nothing"}}`)
	case "longwait":
		answer(`{"wait":{"name":"long","timeoutMs":9223372036854775807}}`)
	case "badresult":
		answer(`{"step":{"name":"big","result":"` + strings.Repeat("<", 200<<10) + `"}}`)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// sendData sends a Data message to the agent's instance and returns the status and answer.
func sendData(t *testing.T, s *stacktest.Stack, activation, method string, data any) (int, map[string]any) {
	t.Helper()
	var ans map[string]any
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
		map[string]any{"agentName": "Stepper", "activationName": activation, "participantId": "ada", "type": "Data", "text": method, "data": data}, &ans)
	return status, ans
}

// A remote agent's steps and waits through the whole stack: each step the answer asks for is
// recorded and the request sent again with it in its journal, a wait parks the request until
// the event, a streamed answer's deltas reach the caller once, and a step or wait the host
// cannot make fails the request without a retry.
func TestRemoteAgentStepsWaitsAndRefusals(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	ep := newStepper(t)
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, ep.registration("Stepper"), nil)
	require.Equal(t, http.StatusCreated, status)
	require.NoError(t, s.WaitLive(t.Context(), "Stepper"))

	t.Run("steps", func(t *testing.T) {
		status, ans := sendData(t, s, "steps", "twice", map[string]any{})
		require.Equal(t, http.StatusOK, status, "%v", ans)
		want := []any{
			map[string]any{"name": "one", "result": map[string]any{"n": float64(1)}},
			map[string]any{"name": "two", "error": map[string]any{"status": float64(409), "message": "taken"}},
		}
		assert.Equal(t, map[string]any{"journal": want}, ans["response"].(map[string]any)["data"])
		sent := ep.requests("twice")
		require.Len(t, sent, 3, "one send, and one more for each step")
		for i, r := range sent {
			assert.Equal(t, sent[0].RequestID, r.RequestID, "send %d: the same request", i+1)
			assert.Equal(t, 1, r.Attempt, "send %d: the same attempt", i+1)
			assert.Len(t, r.Journal, i, "send %d: the steps recorded before it", i+1)
			assert.True(t, r.Array, "send %d: the journal is an array, an empty one too", i+1)
		}
		var st map[string]any
		call(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/instances/"+"default:Stepper:Supervisor%20Workflow:steps", s.Key, nil, &st)
		assert.Equal(t, map[string]any{"done": true}, st["state"], "the final answer's state, not a step answer's")
	})

	t.Run("wait", func(t *testing.T) {
		status, ans := sendData(t, s, "waits", "signal", map[string]any{})
		require.Equal(t, http.StatusAccepted, status, "%v", ans)
		waiting, _ := ans["response"].(map[string]any)["data"].(map[string]any)["waiting"].(map[string]any)
		require.NotNil(t, waiting, "%v", ans)
		assert.Equal(t, "answer", waiting["name"])
		status, ans = sendData(t, s, "waits", "go", map[string]any{"ok": true})
		require.Equal(t, http.StatusOK, status, "%v", ans)
		ev := ans["response"].(map[string]any)["data"].(map[string]any)["event"].(map[string]any)
		assert.Equal(t, "data", ev["type"])
		assert.Equal(t, "go", ev["method"])
		assert.Equal(t, map[string]any{"ok": true}, ev["data"])
		assert.Equal(t, "ada", ev["participantId"])
		assert.Empty(t, ep.requests("go"), "the call that ended the wait does not reach the agent")
		sent := ep.requests("signal")
		require.Len(t, sent, 2)
		assert.Equal(t, sent[0].RequestID, sent[1].RequestID)
		require.Len(t, sent[1].Journal, 1)
		assert.Equal(t, "answer", sent[1].Journal[0].Name)
	})

	t.Run("streamed deltas reach the caller once", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, s.URL+"/api/user/rest/converse?workflow=Stepper&type=Chat&participantId=ada&text=hi", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.Key)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		deltas, message := readConverseStream(t, resp)
		assert.Equal(t, []string{"thinking ", "step 1 ", "step 2 "}, deltas)
		assert.Contains(t, message, "thinking step 1 step 2 ")
		assert.Len(t, ep.requests("chat"), 3)
	})

	// A step or a wait the host cannot make fails the request with 502, at once: sent again, the
	// agent would ask for the same.
	for method, detail := range map[string]string{
		"badstep":   `the agent's step "": `,
		"badwait":   `the agent's wait "nothing": `,
		"longwait":  `the agent's wait "long": timeoutMs is 0 to 518400000`,
		"badresult": `the agent's step "big": `,
	} {
		t.Run(method, func(t *testing.T) {
			start := time.Now()
			status, ans := sendData(t, s, "bad-"+method, method, map[string]any{})
			assert.Equal(t, http.StatusBadGateway, status, "%v", ans)
			assert.Contains(t, fmt.Sprint(ans["detail"]), detail, "%v", ans)
			assert.Len(t, ep.requests(method), 1, "not retried")
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}
