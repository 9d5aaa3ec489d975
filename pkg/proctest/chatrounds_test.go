package proctest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// roundsModel is an OpenAI-compatible chat-completions server whose model asks for a tool call
// (Echo's sum) in rounds 1 to 3 of a chat and answers in round 4, streamed or not; a chat's round is the number
// of tool results it was sent, plus one. The first time it is asked round hold, it holds the
// answer until the caller goes away, and says so on held.
type roundsModel struct {
	hold int
	held chan struct{}

	mu     sync.Mutex
	asked  map[int]int // by round
	holdOn bool
	// refused is the last request it refused, for the test's failure.
	refused string
}

func newRoundsModel(hold int) *roundsModel {
	return &roundsModel{hold: hold, held: make(chan struct{}), asked: map[int]int{}, holdOn: true}
}

func (m *roundsModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); !strings.HasSuffix(r.URL.Path, "/chat/completions") || err != nil {
		m.mu.Lock()
		m.refused = fmt.Sprintf("%s %v %.400s", r.URL.Path, err, body)
		m.mu.Unlock()
		http.Error(w, "a non-streamed chat completion only", http.StatusBadRequest)
		return
	}
	round := 1
	for _, msg := range req.Messages {
		if msg.Role == "tool" {
			round++
		}
	}
	m.mu.Lock()
	m.asked[round]++
	hold := round == m.hold && m.holdOn
	if hold {
		m.holdOn = false
	}
	m.mu.Unlock()
	if hold {
		close(m.held)
		<-r.Context().Done() // its host dies
		return
	}
	call := fmt.Sprintf(`"tool_calls":[{"index":0,"id":"call_%d","type":"function","function":{"name":"sum","arguments":"{\"values\":[%d,1]}"}}]`, round, round)
	msg, finish := `"role":"assistant",`+call, "tool_calls"
	if round >= 4 {
		msg, finish = `"role":"assistant","content":"four rounds done"`, "stop"
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c%d","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{%s},"finish_reason":%q}]}`,
			round, req.Model, msg, finish)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta, finish string) {
		fin := "null"
		if finish != "" {
			fin = strconv.Quote(finish)
		}
		fmt.Fprintf(w, "data: {\"id\":\"c%d\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{%s},\"finish_reason\":%s}]}\n\n",
			round, req.Model, delta, fin)
	}
	chunk(msg, "")
	chunk("", finish)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// rounds returns how often the model was asked each round.
func (m *roundsModel) rounds() map[int]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int]int{}
	for k, v := range m.asked {
		out[k] = v
	}
	return out
}

// Echo's chat through an OpenAI-compatible model (the test's roundsModel) that calls a tool in
// rounds 1 to 3 and answers in round 4: the workflow host running the chat is killed with
// SIGKILL while the model is asked round 3, after rounds 1 and 2 are recorded. The other host
// takes the chat over, replays rounds 1 and 2 from the request's journal, and asks the model
// rounds 3 and 4 only: the model is asked 4 times plus the round in flight when its host died,
// and the caller, an idempotent one, gets the round-4 answer. The thread holds each of the three
// tool calls and results once.
func TestProcessesChatRoundsSurviveHostKill(t *testing.T) {
	t.Parallel() // beside the other parallel process tests: its model answers at once, and it judges no time
	bins := needProcesses(t)
	model := newRoundsModel(3)
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id, "AGENTBUS_LLM_BASE_URL="+srv.URL+"/v1", "AGENTBUS_LLM_MODEL=rounds")
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)
	victim := ids[0]
	activation := sys.instancesOn(victim, "chat", 1)[0]

	ctx := proctest.Context(t, 2*time.Minute)
	type answer struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		q := url.Values{"workflow": {echoWF + activation}, "type": {"Chat"}, "text": {"add up, four rounds"}, "participantId": {"cy"},
			"timeoutSeconds": {"90"}}
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, sys.ingress.URL+"/api/user/rest/converse?"+q.Encode(), bytes.NewReader(nil))
			if err != nil {
				done <- answer{err: err}
				return
			}
			req.Header.Set("Authorization", "Bearer "+sys.key)
			req.Header.Set("Idempotency-Key", "chat-rounds-1")
			resp, err := sys.client.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 500 {
					done <- answer{status: resp.StatusCode, body: b}
					return
				}
			}
			if ctx.Err() != nil {
				done <- answer{err: ctx.Err()}
				return
			}
			time.Sleep(200 * time.Millisecond) // the idempotent caller tries again
		}
	}()
	select {
	case <-model.held:
	case <-time.After(60 * time.Second):
		model.mu.Lock()
		refused := model.refused
		model.mu.Unlock()
		require.FailNow(t, "the model was not asked round 3", "asked %v; refused %s", model.rounds(), refused)
	}
	sys.hosts[victim].Kill()
	killed := time.Now()

	var got answer
	select {
	case got = <-done:
	case <-ctx.Done():
		require.FailNow(t, "the chat was not answered", "asked %v", model.rounds())
	}
	require.NoError(t, got.err)
	require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	assert.Contains(t, string(got.body), "four rounds done")
	asked := model.rounds()
	t.Logf("answered %v after the kill; the model was asked, by round: %v", time.Since(killed).Round(time.Millisecond), asked)
	assert.Equal(t, map[int]int{1: 1, 2: 1, 3: 2, 4: 1}, asked, "model calls by round: 4 plus the one in flight when its host died")

	// Each tool call (its parameters) and its result once, in the thread.
	calls, results := map[string]int{}, map[string]int{}
	for _, m := range sys.thread(t, echoWF+activation, "cy") {
		switch d := string(m.Data); {
		case strings.Contains(d, `"values"`):
			calls[d]++
		case strings.Contains(d, `"sum"`):
			results[d]++
		}
	}
	assert.Len(t, calls, 3, "the tool calls: %v", calls)
	assert.Equal(t, map[string]int{`{"sum":2}`: 1, `{"sum":3}`: 1, `{"sum":4}`: 1}, results, "the tool results")
	for data, n := range calls {
		assert.Equal(t, 1, n, "stored %d times: %s", n, data)
	}
}
