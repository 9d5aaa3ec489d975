package ingress_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeModel is an OpenAI-compatible chat-completions server. It answers "reply to: {last user
// message}" and records what it was asked; "fail" gets a 500 and "slow" an answer too late.
type fakeModel struct {
	mu       sync.Mutex
	requests []fakeRequest
}

type fakeRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func (f *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req fakeRequest
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	last := req.Messages[len(req.Messages)-1].Content
	switch last {
	case "fail":
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
		return
	case "slow":
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		return
	}
	answer := "reply to: " + last
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, req.Model, answer)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, piece := range strings.SplitAfter(answer, " ") {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", req.Model, piece)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
}

func (f *fakeModel) last() fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

func TestChatThroughLanguageModel(t *testing.T) {
	t.Parallel()
	fake := &fakeModel{}
	s := modelStack(t, fake, "fake-model", time.Second)
	require.Equal(t, "reply to: first question", chatText(t, s, "Echo", "carol", "first question"))
	require.Equal(t, "reply to: second question", chatText(t, s, "Echo", "carol", "second question"))
	// The model got the conversation so far: system prompt, the first exchange, the new question.
	req := fake.last()
	var roles, contents []string
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
		contents = append(contents, m.Content)
	}
	assert.Equal(t, "fake-model", req.Model, "the model was asked %+v", req)
	require.Equal(t, []string{"system", "user", "assistant", "user"}, roles, "the model was asked %+v", req)
	assert.Equal(t, []string{"first question", "reply to: first question", "second question"}, contents[1:], "the model was asked %+v", req)

	// Streamed: deltas, then the final stored message, whose text the deltas make up.
	events := streamConverse(t, s, q("workflow", "Echo", "type", "Chat", "participantId", "dan", "text", "tell a story", "apikey", s.Key))
	require.GreaterOrEqual(t, len(events), 3, "stream %+v: deltas and the message", events)
	joined := deltaText(t, events[:len(events)-1])
	final := finalText(t, events[len(events)-1])
	assert.Equal(t, "reply to: tell a story", final, "stream %+v", events)
	assert.Equal(t, final, joined, "the deltas make up the final text")
	assert.True(t, fake.last().Stream, "a streamed converse did not stream from the model")

	// Model failures are clear problems.
	chat := func(text string) (int, string, []byte) {
		return converse(t, s, q("workflow", "Echo", "type", "Chat", "participantId", "carol", "text", text, "apikey", s.Key), "")
	}
	status, ct, b := chat("fail")
	problemOf(t, status, ct, b, http.StatusBadGateway)
	status, ct, b = chat("slow")
	problemOf(t, status, ct, b, http.StatusGatewayTimeout)
}
