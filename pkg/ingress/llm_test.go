package ingress_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/stacktest"
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
	fake := &fakeModel{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	model, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "fake-model", Timeout: time.Second, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(echo.WithModel(model))}})
	chat := func(text string, hdr ...string) (int, string, []byte) {
		return converse(t, s, q("workflow", "Echo", "type", "Chat", "participantId", "carol", "text", text, "apikey", s.Key), "", hdr...)
	}

	status, _, b := chat("first question")
	if a := answerOf(t, status, b); *a.Response.Text != "reply to: first question" {
		t.Fatalf("answer %s", b)
	}
	status, _, b = chat("second question")
	if a := answerOf(t, status, b); *a.Response.Text != "reply to: second question" {
		t.Fatalf("answer %s", b)
	}
	// The model got the conversation so far: system prompt, the first exchange, the new question.
	req := fake.last()
	var roles, contents []string
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
		contents = append(contents, m.Content)
	}
	if req.Model != "fake-model" || strings.Join(roles, ",") != "system,user,assistant,user" ||
		contents[1] != "first question" || contents[2] != "reply to: first question" || contents[3] != "second question" {
		t.Fatalf("the model was asked %+v", req)
	}

	// Streamed: deltas, then the final stored message, whose text the deltas make up.
	req2, _ := http.NewRequest(http.MethodPost, s.URL+"/api/user/rest/converse?"+q("workflow", "Echo", "type", "Chat", "participantId", "dan", "text", "tell a story", "apikey", s.Key).Encode(), nil)
	req2.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	events := readStream(t, resp)
	resp.Body.Close()
	var joined strings.Builder
	for _, e := range events[:len(events)-1] {
		var d struct{ Delta string }
		_ = json.Unmarshal([]byte(e.data), &d)
		joined.WriteString(d.Delta)
	}
	var final syncAnswer
	if err := json.Unmarshal([]byte(events[len(events)-1].data), &final); err != nil || len(events) < 3 ||
		final.Response == nil || *final.Response.Text != "reply to: tell a story" || joined.String() != *final.Response.Text {
		t.Fatalf("stream %+v", events)
	}
	if !fake.last().Stream {
		t.Fatal("a streamed converse did not stream from the model")
	}

	// Model failures are clear problems.
	status, ct, b := chat("fail")
	problemOf(t, status, ct, b, http.StatusBadGateway)
	status, ct, b = chat("slow")
	problemOf(t, status, ct, b, http.StatusGatewayTimeout)
}
