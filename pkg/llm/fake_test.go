package llm_test

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

	"github.com/agentbus/agentbus/pkg/llm"
)

const testModelName = "test-model"

// chatRequest is what the fake server reads of a chat-completions request.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Stream      bool     `json:"stream"`
	MaxTokens   *int     `json:"max_tokens"`
	Temperature *float64 `json:"temperature"`
}

// received is one request the fake server got.
type received struct {
	Authorization string
	Body          chatRequest
	// Raw is the request body as sent, for checks of the wire format.
	Raw []byte
}

// fakeServer speaks the OpenAI chat-completions API. By default it answers like the offline
// model, "You said: {last user message}", as JSON or, when asked to stream, as server-sent
// events in word-sized pieces, so that both implementations pass the same contract suite.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu   sync.Mutex
	reqs []received
	// respond answers request n (1-based); nil answers every request with answer.
	respond func(w http.ResponseWriter, r *http.Request, n int, req chatRequest)
}

func newFakeServer(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, n int, req chatRequest)) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, respond: respond}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serveHTTP))
	t.Cleanup(f.srv.Close)
	return f
}

// serveHTTP runs on the server's goroutines: it reports with assert, never stopping the test.
func (f *fakeServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	methodOK := assert.Equal(f.t, http.MethodPost, r.Method, "request %s %s, want POST /v1/chat/completions", r.Method, r.URL.Path)
	pathOK := assert.Equal(f.t, "/v1/chat/completions", r.URL.Path, "request %s %s, want POST /v1/chat/completions", r.Method, r.URL.Path)
	if !methodOK || !pathOK {
		http.NotFound(w, r)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if !assert.NoError(f.t, err, "reading request") {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req chatRequest
	if err := json.Unmarshal(raw, &req); !assert.NoError(f.t, err, "decoding request") {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, received{Authorization: r.Header.Get("Authorization"), Body: req, Raw: raw})
	n := len(f.reqs)
	f.mu.Unlock()
	if f.respond != nil {
		f.respond(w, r, n, req)
		return
	}
	answer(w, req)
}

func (f *fakeServer) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.reqs...)
}

// config is a Config for the fake server; change returns it modified.
func (f *fakeServer) config(change ...func(*llm.Config)) llm.Config {
	c := llm.Config{
		BaseURL:    f.srv.URL + "/v1",
		Model:      testModelName,
		Timeout:    5 * time.Second,
		HTTPClient: f.srv.Client(),
	}
	for _, ch := range change {
		ch(&c)
	}
	return c
}

func (f *fakeServer) model(change ...func(*llm.Config)) llm.Model {
	f.t.Helper()
	m, err := llm.New(f.config(change...))
	require.NoError(f.t, err, "New")
	return m
}

func youSaid(req chatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return "You said: " + req.Messages[i].Content
		}
	}
	return "You said: "
}

// answer answers req with youSaid, streamed when req asks for it.
func answer(w http.ResponseWriter, req chatRequest) {
	text := youSaid(req)
	if !req.Stream {
		writeCompletion(w, text)
		return
	}
	startStream(w)
	for _, piece := range strings.SplitAfter(text, " ") {
		writeChunk(w, piece, "")
	}
	writeChunk(w, "", "stop")
	writeDone(w)
}

func writeCompletion(w http.ResponseWriter, text string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": testModelName,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": text},
			"finish_reason": "stop",
		}},
	})
}

func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// writeChunk sends one chunk; finish "" sends a null finish_reason.
func writeChunk(w http.ResponseWriter, content, finish string) {
	delta := map[string]any{}
	if content != "" {
		delta["content"] = content
	}
	var reason any
	if finish != "" {
		reason = finish
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": testModelName,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": reason}},
	})
	fmt.Fprintf(w, "data: %s\n\n", b)
	w.(http.Flusher).Flush()
}

func writeDone(w http.ResponseWriter) {
	fmt.Fprint(w, "data: [DONE]\n\n")
	w.(http.Flusher).Flush()
}

// writeError answers with status and an OpenAI-style error body. Retry-After-Ms keeps the
// retries of tests quick.
func writeError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After-Ms", "5")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": message, "type": "test_error"},
	})
}
