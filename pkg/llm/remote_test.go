package llm_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

const testAPIKey = "sk-test-0123456789abcdef"

func hello() llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}}
}

// call runs Complete or Stream, returning the deltas Stream delivered.
func call(ctx context.Context, m llm.Model, stream bool, req llm.Request) (string, []string, error) {
	if !stream {
		got, err := m.Complete(ctx, req)
		return got, nil, err
	}
	var deltas []string
	got, err := m.Stream(ctx, req, func(d string) error {
		deltas = append(deltas, d)
		return nil
	})
	return got, deltas, err
}

var modes = []struct {
	name   string
	stream bool
}{{"Complete", false}, {"Stream", true}}

func TestRemoteSendsRequest(t *testing.T) {
	t.Parallel()
	temp := 0.25
	tests := []struct {
		name     string
		apiKey   string
		req      llm.Request
		wantAuth string
	}{
		{"no key", "", conversation, ""},
		{"key", testAPIKey, conversation, "Bearer " + testAPIKey},
		{
			"options",
			"",
			llm.Request{Messages: conversation.Messages, MaxTokens: 42, Temperature: &temp},
			"",
		},
	}
	for _, tt := range tests {
		for _, mode := range modes {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				f := newFakeServer(t, nil)
				m := f.model(func(c *llm.Config) { c.APIKey = tt.apiKey })
				if got, _, err := call(t.Context(), m, mode.stream, tt.req); err != nil || got != conversationAnswer {
					t.Fatalf("answer = %q, %v; want %q", got, err, conversationAnswer)
				}
				reqs := f.requests()
				if len(reqs) != 1 {
					t.Fatalf("server got %d requests, want 1", len(reqs))
				}
				r := reqs[0]
				if r.Authorization != tt.wantAuth {
					t.Errorf("Authorization = %q, want %q", r.Authorization, tt.wantAuth)
				}
				checkBody(t, r.Body, tt.req, mode.stream)
			})
		}
	}
}

func checkBody(t *testing.T, got chatRequest, want llm.Request, stream bool) {
	t.Helper()
	if got.Model != testModelName {
		t.Errorf("model = %q, want %q", got.Model, testModelName)
	}
	if got.Stream != stream {
		t.Errorf("stream = %t, want %t", got.Stream, stream)
	}
	if len(got.Messages) != len(want.Messages) {
		t.Fatalf("got %d messages, want %d", len(got.Messages), len(want.Messages))
	}
	for i, m := range want.Messages {
		if got.Messages[i].Role != string(m.Role) || got.Messages[i].Content != m.Content {
			t.Errorf("message %d = %+v, want %+v", i, got.Messages[i], m)
		}
	}
	switch {
	case want.MaxTokens == 0 && got.MaxTokens != nil:
		t.Errorf("max_tokens = %d sent, want none", *got.MaxTokens)
	case want.MaxTokens != 0 && (got.MaxTokens == nil || *got.MaxTokens != want.MaxTokens):
		t.Errorf("max_tokens = %v, want %d", got.MaxTokens, want.MaxTokens)
	}
	switch {
	case want.Temperature == nil && got.Temperature != nil:
		t.Errorf("temperature = %v sent, want none", *got.Temperature)
	case want.Temperature != nil && (got.Temperature == nil || *got.Temperature != *want.Temperature):
		t.Errorf("temperature = %v, want %v", got.Temperature, *want.Temperature)
	}
}

// TestRemoteIgnoresOpenAIEnvironment checks that OPENAI_* variables, which the OpenAI client
// reads by default, neither redirect requests nor send a key the Config did not give.
func TestRemoteIgnoresOpenAIEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	f := newFakeServer(t, nil)
	if _, err := f.model().Complete(t.Context(), hello()); err != nil {
		t.Fatal(err)
	}
	if auth := f.requests()[0].Authorization; auth != "" {
		t.Errorf("Authorization = %q, want none", auth)
	}
}

func TestRemoteDefaultHTTPClient(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, nil)
	m := f.model(func(c *llm.Config) { c.HTTPClient = nil })
	if got, err := m.Complete(t.Context(), hello()); err != nil || got != "You said: hello" {
		t.Fatalf("Complete = %q, %v", got, err)
	}
}

func TestRemoteRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		statuses   []int // answers to the first requests; later ones succeed
		maxRetries int
		plain      bool // error answers without Retry-After-Ms: the client's own backoff
		wantErr    error
		wantCalls  int
	}{
		{name: "500 then 200", statuses: []int{500}, wantCalls: 2},
		{name: "500 then 200 with backoff", statuses: []int{500}, plain: true, wantCalls: 2},
		{name: "429 and 503 then 200", statuses: []int{429, 503}, wantCalls: 3},
		{name: "400 is not retried", statuses: []int{400}, wantErr: llm.ErrUpstream, wantCalls: 1},
		{name: "404 is not retried", statuses: []int{404}, wantErr: llm.ErrUpstream, wantCalls: 1},
		{name: "retries run out", statuses: []int{500, 502, 503}, wantErr: llm.ErrUpstream, wantCalls: 3},
		{name: "more retries", statuses: []int{500, 502, 503}, maxRetries: 3, wantCalls: 4},
		{name: "no retries", statuses: []int{500}, maxRetries: -1, wantErr: llm.ErrUpstream, wantCalls: 1},
	}
	for _, tt := range tests {
		for _, mode := range modes {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				f := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
					if n > len(tt.statuses) {
						answer(w, req)
						return
					}
					if tt.plain {
						w.WriteHeader(tt.statuses[n-1])
						return
					}
					writeError(w, tt.statuses[n-1], "try again")
				})
				m := f.model(func(c *llm.Config) { c.MaxRetries = tt.maxRetries })
				got, _, err := call(t.Context(), m, mode.stream, hello())
				if tt.wantErr == nil && (err != nil || got != "You said: hello") {
					t.Errorf("answer = %q, %v; want You said: hello", got, err)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error = %v, want %v", err, tt.wantErr)
				}
				if calls := len(f.requests()); calls != tt.wantCalls {
					t.Errorf("server got %d requests, want %d", calls, tt.wantCalls)
				}
			})
		}
	}
}

func TestRemoteErrorDetail(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
		writeError(w, http.StatusUnauthorized, "Incorrect API key provided: "+testAPIKey)
	})
	for _, mode := range modes {
		_, _, err := call(t.Context(), f.model(func(c *llm.Config) { c.APIKey = testAPIKey }), mode.stream, hello())
		if !errors.Is(err, llm.ErrUpstream) {
			t.Fatalf("%s error = %v, want ErrUpstream", mode.name, err)
		}
		if msg := err.Error(); strings.Contains(msg, testAPIKey) || !strings.Contains(msg, "401") ||
			!strings.Contains(msg, "Incorrect API key provided") {
			t.Errorf("%s error %q: want the status and message without the key", mode.name, msg)
		}
	}
}

func TestRemoteTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	tests := []struct {
		name    string
		stream  bool
		respond func(w http.ResponseWriter, r *http.Request, n int, req chatRequest)
	}{
		{"no answer/Complete", false, hang},
		{"no answer/Stream", true, hang},
		{"stream stalls", true, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
			startStream(w)
			writeChunk(w, "You ", "")
			<-r.Context().Done()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, tt.respond)
			m := f.model(func(c *llm.Config) { c.Timeout = timeout })
			start := time.Now()
			got, deltas, err := call(t.Context(), m, tt.stream, hello())
			elapsed := time.Since(start)
			if !errors.Is(err, llm.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error = %v, want ErrTimeout", err)
			}
			if elapsed < timeout || elapsed > timeout+time.Second {
				t.Errorf("gave up after %s, want about %s", elapsed, timeout)
			}
			if got != strings.Join(deltas, "") {
				t.Errorf("returned %q, want what was delivered: %q", got, deltas)
			}
			if calls := len(f.requests()); calls != 1 {
				t.Errorf("server got %d requests, want 1: a timeout is not retried", calls)
			}
		})
	}
}

func TestRemoteCallerDeadline(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, hang)
	m := f.model(func(c *llm.Config) { c.Timeout = time.Minute })
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Complete(ctx, hello())
	if !errors.Is(err, llm.ErrTimeout) {
		t.Fatalf("error = %v, want ErrTimeout", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("gave up after %s, want about the caller's 100ms", elapsed)
	}
}

func hang(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
	<-r.Context().Done()
}

func TestRemoteStreamCanceled(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
		startStream(w)
		writeChunk(w, "You ", "")
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var deltas []string
	start := time.Now()
	got, err := f.model().Stream(ctx, hello(), func(d string) error {
		deltas = append(deltas, d)
		cancel()
		return nil
	})
	checkCanceled(t, "Stream", err)
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Stream returned %s after the cancellation", elapsed)
	}
	if got != "You " || len(deltas) != 1 {
		t.Errorf("Stream returned %q after deltas %q, want one delta \"You \"", got, deltas)
	}
	if calls := len(f.requests()); calls != 1 {
		t.Errorf("server got %d requests, want 1", calls)
	}
}

// TestRemoteStreamBroken checks that a stream that breaks after delivering deltas fails with
// ErrUpstream and is not retried, which would deliver the deltas again.
func TestRemoteStreamBroken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		end  func(w http.ResponseWriter)
	}{
		{"connection cut", func(http.ResponseWriter) { panic(http.ErrAbortHandler) }},
		{"ends without finishing", func(http.ResponseWriter) {}},
		{"error event", func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`data: {"error":{"message":"model crashed","type":"server_error"}}` + "\n\n"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
				startStream(w)
				writeChunk(w, "You ", "")
				writeChunk(w, "said: ", "")
				tt.end(w)
			})
			var deltas []string
			got, err := f.model().Stream(t.Context(), hello(), func(d string) error {
				deltas = append(deltas, d)
				return nil
			})
			if !errors.Is(err, llm.ErrUpstream) {
				t.Fatalf("error = %v, want ErrUpstream", err)
			}
			if got != "You said: " || strings.Join(deltas, "") != got {
				t.Errorf("returned %q after deltas %q, want both \"You said: \"", got, deltas)
			}
			if calls := len(f.requests()); calls != 1 {
				t.Errorf("server got %d requests, want 1: a started stream is not retried", calls)
			}
		})
	}
}

func TestRemoteUnusableAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		stream  bool
		respond func(w http.ResponseWriter, r *http.Request, n int, req chatRequest)
	}{
		{"empty content", false, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
			writeCompletion(w, "")
		}},
		{"no choices", false, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[]}`))
		}},
		{"not JSON", false, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`<html>gateway</html>`))
		}},
		{"empty stream", true, func(w http.ResponseWriter, r *http.Request, n int, req chatRequest) {
			startStream(w)
			writeChunk(w, "", "stop")
			writeDone(w)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, tt.respond)
			if _, _, err := call(t.Context(), f.model(), tt.stream, hello()); !errors.Is(err, llm.ErrUpstream) {
				t.Errorf("error = %v, want ErrUpstream", err)
			}
		})
	}
}

func TestRemoteConnectionRefused(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, nil)
	c := f.config(func(c *llm.Config) { c.MaxRetries = -1 })
	f.srv.Close()
	m, err := llm.New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		if _, _, err := call(t.Context(), m, mode.stream, hello()); !errors.Is(err, llm.ErrUpstream) {
			t.Errorf("%s error = %v, want ErrUpstream", mode.name, err)
		}
	}
}

func TestRemoteInvalidRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  llm.Request
	}{
		{"no messages", llm.Request{}},
		{"unknown role", llm.Request{Messages: []llm.Message{{Role: "robot", Content: "x"}}}},
		{"tool result without call id", llm.Request{Messages: []llm.Message{{Role: llm.RoleTool, Content: "x"}}}},
		{"tool call without id", llm.Request{Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{Name: "sum"}}}}}},
		{"negative MaxTokens", llm.Request{Messages: hello().Messages, MaxTokens: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, nil)
			for _, mode := range modes {
				_, _, err := call(t.Context(), f.model(), mode.stream, tt.req)
				if err == nil || errors.Is(err, llm.ErrUpstream) || errors.Is(err, llm.ErrTimeout) {
					t.Errorf("%s error = %v, want a request error", mode.name, err)
				}
			}
			if calls := len(f.requests()); calls != 0 {
				t.Errorf("server got %d requests, want none", calls)
			}
		})
	}
}

func TestRemoteName(t *testing.T) {
	t.Parallel()
	if name := newFakeServer(t, nil).model().Name(); name != testModelName {
		t.Errorf("Name = %q, want %q", name, testModelName)
	}
}
