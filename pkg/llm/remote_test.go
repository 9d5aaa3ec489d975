package llm_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
				got, _, err := call(t.Context(), m, mode.stream, tt.req)
				require.NoError(t, err, "answer")
				require.Equal(t, conversationAnswer, got, "answer")
				reqs := f.requests()
				require.Len(t, reqs, 1, "server's requests")
				r := reqs[0]
				assert.Equal(t, tt.wantAuth, r.Authorization, "Authorization")
				checkBody(t, r.Body, tt.req, mode.stream)
			})
		}
	}
}

func checkBody(t *testing.T, got chatRequest, want llm.Request, stream bool) {
	t.Helper()
	assert.Equal(t, testModelName, got.Model, "model")
	assert.Equal(t, stream, got.Stream, "stream")
	require.Len(t, got.Messages, len(want.Messages), "messages")
	for i, m := range want.Messages {
		assert.Equal(t, string(m.Role), got.Messages[i].Role, "message %d = %+v, want %+v", i, got.Messages[i], m)
		assert.Equal(t, m.Content, got.Messages[i].Content, "message %d = %+v, want %+v", i, got.Messages[i], m)
	}
	if want.MaxTokens == 0 {
		assert.Nil(t, got.MaxTokens, "max_tokens sent, want none")
	} else if assert.NotNil(t, got.MaxTokens, "max_tokens not sent, want %d", want.MaxTokens) {
		assert.Equal(t, want.MaxTokens, *got.MaxTokens, "max_tokens")
	}
	if want.Temperature == nil {
		assert.Nil(t, got.Temperature, "temperature sent, want none")
	} else if assert.NotNil(t, got.Temperature, "temperature not sent, want %v", *want.Temperature) {
		assert.Equal(t, *want.Temperature, *got.Temperature, "temperature")
	}
}

// TestRemoteIgnoresOpenAIEnvironment checks that OPENAI_* variables, which the OpenAI client
// reads by default, neither redirect requests nor send a key the Config did not give.
func TestRemoteIgnoresOpenAIEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	f := newFakeServer(t, nil)
	_, err := f.model().Complete(t.Context(), hello())
	require.NoError(t, err)
	reqs := f.requests()
	require.NotEmpty(t, reqs, "server's requests")
	assert.Empty(t, reqs[0].Authorization, "Authorization, want none")
}

func TestRemoteDefaultHTTPClient(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, nil)
	m := f.model(func(c *llm.Config) { c.HTTPClient = nil })
	got, err := m.Complete(t.Context(), hello())
	require.NoError(t, err, "Complete")
	require.Equal(t, "You said: hello", got, "Complete")
}

func TestRemoteRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		statuses   []int // answers to the first requests; later ones succeed
		maxRetries int
		plain      bool // error answers without Retry-After-Ms: the client's own backoff
		header     map[string]string
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
		{name: "x-should-retry false", statuses: []int{500}, header: map[string]string{"X-Should-Retry": "false"}, wantErr: llm.ErrUpstream, wantCalls: 1},
		{name: "x-should-retry true", statuses: []int{400}, header: map[string]string{"X-Should-Retry": "true"}, wantCalls: 2},
		{name: "Retry-After in seconds", statuses: []int{429}, plain: true, header: map[string]string{"Retry-After": "0.01"}, wantCalls: 2},
		{name: "Retry-After past the cap", statuses: []int{429}, plain: true, header: map[string]string{"Retry-After": "3600"}, wantErr: llm.ErrUpstream, wantCalls: 1},
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
					for k, v := range tt.header {
						w.Header().Set(k, v)
					}
					if tt.plain {
						w.WriteHeader(tt.statuses[n-1])
						return
					}
					writeError(w, tt.statuses[n-1], "try again")
				})
				m := f.model(func(c *llm.Config) { c.MaxRetries = tt.maxRetries })
				got, _, err := call(t.Context(), m, mode.stream, hello())
				if tt.wantErr == nil {
					assert.NoError(t, err, "answer")
					assert.Equal(t, "You said: hello", got, "answer")
				} else {
					assert.ErrorIs(t, err, tt.wantErr, "error")
				}
				assert.Len(t, f.requests(), tt.wantCalls, "server's requests")
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
		require.ErrorIs(t, err, llm.ErrUpstream, "%s error", mode.name)
		msg := err.Error()
		assert.NotContains(t, msg, testAPIKey, "%s error: want the status and message without the key", mode.name)
		assert.Contains(t, msg, "401", "%s error: want the status and message without the key", mode.name)
		assert.Contains(t, msg, "Incorrect API key provided", "%s error: want the status and message without the key", mode.name)
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
			require.ErrorIs(t, err, llm.ErrTimeout, "error")
			require.ErrorIs(t, err, context.DeadlineExceeded, "error")
			assert.GreaterOrEqual(t, elapsed, timeout, "gave up after %s, want about %s", elapsed, timeout)
			assert.LessOrEqual(t, elapsed, timeout+time.Second, "gave up after %s, want about %s", elapsed, timeout)
			assert.Equal(t, strings.Join(deltas, ""), got, "returned, want what was delivered: %q", deltas)
			assert.Len(t, f.requests(), 1, "server's requests: a timeout is not retried")
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
	require.ErrorIs(t, err, llm.ErrTimeout, "error")
	elapsed := time.Since(start)
	assert.LessOrEqual(t, elapsed, time.Second, "gave up after %s, want about the caller's 100ms", elapsed)
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
	elapsed := time.Since(start)
	assert.LessOrEqual(t, elapsed, time.Second, "Stream returned %s after the cancellation", elapsed)
	assert.Equal(t, "You ", got, "Stream returned %q after deltas %q, want one delta \"You \"", got, deltas)
	assert.Len(t, deltas, 1, "Stream returned %q after deltas %q, want one delta \"You \"", got, deltas)
	assert.Len(t, f.requests(), 1, "server's requests")
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
			require.ErrorIs(t, err, llm.ErrUpstream, "error")
			assert.Equal(t, "You said: ", got, "returned, after deltas %q, want both \"You said: \"", deltas)
			assert.Equal(t, got, strings.Join(deltas, ""), "deltas %q, want both \"You said: \"", deltas)
			assert.Len(t, f.requests(), 1, "server's requests: a started stream is not retried")
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
			_, _, err := call(t.Context(), f.model(), tt.stream, hello())
			assert.ErrorIs(t, err, llm.ErrUpstream, "error")
		})
	}
}

// TestRemoteConnectionRefused: a connection error is ErrUpstream, and names the URL without its
// password.
func TestRemoteConnectionRefused(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, nil)
	c := f.config(func(c *llm.Config) {
		c.BaseURL = strings.Replace(c.BaseURL, "http://", "http://user:url-secret@", 1)
		c.MaxRetries = -1
	})
	f.srv.Close()
	m, err := llm.New(c)
	require.NoError(t, err)
	for _, mode := range modes {
		_, _, err := call(t.Context(), m, mode.stream, hello())
		require.ErrorIs(t, err, llm.ErrUpstream, "%s error", mode.name)
		assert.NotContains(t, err.Error(), "url-secret", "%s error", mode.name)
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
				assert.Error(t, err, "%s error, want a request error", mode.name)
				assert.NotErrorIs(t, err, llm.ErrUpstream, "%s error, want a request error", mode.name)
				assert.NotErrorIs(t, err, llm.ErrTimeout, "%s error, want a request error", mode.name)
			}
			assert.Empty(t, f.requests(), "server's requests, want none")
		})
	}
}

func TestRemoteName(t *testing.T) {
	t.Parallel()
	assert.Equal(t, testModelName, newFakeServer(t, nil).model().Name(), "Name")
}
