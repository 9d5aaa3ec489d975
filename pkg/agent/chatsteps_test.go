package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// roundModel is a model whose first turn asks for the tools of calls (text "Let me add.") and
// whose second answers "It is 3."; it counts its turns by round and host. Its second turn fails
// with a Retryable error on the chat's first attempt when failOnce is set, and on the host
// doomed it waits until its context ends.
type roundModel struct {
	calls    []llm.ToolCall
	failOnce bool
	bigText  bool // the first turn's text is too large to record

	mu     sync.Mutex
	turns  map[int][]string // round: the hosts it was asked on
	doom   string
	paused chan struct{} // closed when the doomed host waits in round 2
}

func newRoundModel(calls ...llm.ToolCall) *roundModel {
	return &roundModel{calls: calls, turns: map[int][]string{}, paused: make(chan struct{})}
}

func (m *roundModel) Name() string                                          { return "rounds" }
func (m *roundModel) Complete(context.Context, llm.Request) (string, error) { return "", errSecret }
func (m *roundModel) Stream(context.Context, llm.Request, func(string) error) (string, error) {
	return "", errSecret
}

func (m *roundModel) Generate(ctx context.Context, req llm.Request, onDelta func(string) error) (llm.Answer, error) {
	round := 1
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleAssistant {
			round++
		}
	}
	msg := agent.MessageFrom(ctx)
	host := msg.Instance().HostID()
	m.mu.Lock()
	m.turns[round] = append(m.turns[round], host)
	doomed, failOnce := host == m.doom, m.failOnce
	m.mu.Unlock()
	if round == 1 {
		text := "Let me add."
		if m.bigText {
			text = strings.Repeat("a", agent.MaxStepResult)
		}
		_ = onDelta(text)
		return llm.Answer{Text: text, ToolCalls: m.calls}, nil
	}
	switch {
	case doomed:
		close(m.paused)
		<-ctx.Done()
		return llm.Answer{}, agent.Retryable(ctx.Err())
	case failOnce && msg.Attempt == 1:
		return llm.Answer{}, agent.Retryable(errors.New("the model is busy"))
	}
	_ = onDelta("It is 3.")
	return llm.Answer{Text: "It is 3."}, nil
}

// asked returns the hosts the model was asked its turn of round on.
func (m *roundModel) asked(round int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.turns[round])
}

// roundTools are the tools of a chat: sum adds, big answers more than a step records, count
// changes the instance state, twice doubles in a durable step of its own; each counts its runs.
type roundTools struct {
	sums, bigs, doubles atomic.Int32
	mu                  sync.Mutex
	counts              []int // what count saw, run by run
}

func (rt *roundTools) agent(model llm.Model) *agent.Agent {
	a := agent.New("Chatter")
	agent.Method(a, "sum", func(_ context.Context, in struct {
		Values []int `json:"values"`
	}) (int, error) {
		rt.sums.Add(1)
		return in.Values[0] + in.Values[1], nil
	})
	agent.Method(a, "big", func(context.Context, struct{}) (string, error) {
		rt.bigs.Add(1)
		return strings.Repeat("b", agent.MaxStepResult), nil
	})
	agent.Method(a, "count", func(ctx context.Context, _ struct{}) (int, error) {
		s, err := agent.UpdateState(ctx, agent.MessageFrom(ctx).Instance(), func(s *struct{ N int }) error { s.N++; return nil })
		rt.mu.Lock()
		rt.counts = append(rt.counts, s.N)
		rt.mu.Unlock()
		return s.N, err
	})
	agent.Method(a, "twice", func(ctx context.Context, in struct {
		N int `json:"n"`
	}) (int, error) {
		return agent.Step(ctx, "double", func(context.Context) (int, error) { rt.doubles.Add(1); return 2 * in.N, nil })
	})
	a.Chat(agent.ChatWithTools(model, agent.HistorySize(-1)))
	return a
}

// seen returns what count saw, run by run.
func (rt *roundTools) seen() []int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.counts)
}

var sumCall = llm.ToolCall{ID: "c1", Name: "sum", Arguments: `{"values":[1,2]}`}

// threadSummary is a thread, oldest first, as "direction type text toolCallId" lines.
func threadSummary(t *testing.T, s *stacktest.Stack, participant string) []string {
	t.Helper()
	msgs := thread(t, s, "Chatter", participant)
	var out []string
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		text := "-"
		if m.Text != nil {
			text = *m.Text
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%d %d %.30s %s", m.Direction, m.MessageType, text, m.Metadata[history.MetaToolCallID])))
	}
	return out
}

// A chat whose model fails retryably in round 2 is retried: the retry replays round 1 (the
// model's answer and the tool's result) from the journal, asks the model only for round 2, and
// stores each tool call and result once. A chat that is not retried pays one journal read and
// write per model answer and per tool call, and one purge.
func TestChatRoundsSurviveARetry(t *testing.T) {
	t.Parallel()
	model := newRoundModel(sumCall)
	model.failOnce = true
	rt := &roundTools{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{rt.agent(model)}, Host: agent.HostConfig{MaxDeliveries: 3}})
	w := watchJournal(t, s)

	status, got := chat(t, s, "Chatter", "ann", "add 1 and 2")
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "Let me add.\n\nIt is 3.", got)
	assert.Len(t, model.asked(1), 1, "the model's turns of round 1")
	assert.Len(t, model.asked(2), 2, "the model's turns of round 2")
	assert.EqualValues(t, 1, rt.sums.Load(), "the tool's runs")
	assert.Equal(t, []string{"0 0 add 1 and 2", "0 1 sum c1", "1 1 - c1", "1 0 Let me add.\n\nIt is 3."}, threadSummary(t, s, "ann"))
	// The watch sees the purge after the records, on one connection: once it counted the purge,
	// it counted them all (the journal may be empty before the watch has seen its last record).
	waitFor(t, 5*time.Second, "the journal is purged", func() bool { return w.purges.Load() == 1 && journalSize(t, s) == 0 })
	assert.EqualValues(t, 3, w.records.Load(), "records: model 1, tool 1.1, model 2 (on the retry)")

	// Not retried: three rounds' steps, each written once and none read (a first attempt has
	// recorded nothing).
	model.mu.Lock()
	model.failOnce = false
	model.mu.Unlock()
	before := w.records.Load()
	reads := w.reads.Load()
	purges := w.purges.Load()
	status, got = chat(t, s, "Chatter", "bob", "add 1 and 2")
	require.Equal(t, http.StatusOK, status, got)
	waitFor(t, 5*time.Second, "the journal is purged", func() bool { return w.purges.Load() >= purges+1 })
	assert.EqualValues(t, purges+1, w.purges.Load(), "purges")
	assert.EqualValues(t, 3, w.records.Load()-before, "records: model 1, tool 1.1, model 2")
	assert.Zero(t, w.reads.Load()-reads, "journal reads")
}

// A host dies while the model answers round 2; the host that takes the chat over replays round 1
// and asks the model for round 2 only. The tool ran once, and the thread holds each tool call
// and result once.
func TestChatRoundsSurviveTheirHost(t *testing.T) {
	t.Parallel()
	model := newRoundModel(sumCall)
	rt := &roundTools{}
	const ackWait = 30 * time.Second
	s, doomed, crash := startDoomed(t, "Chatter", func() *agent.Agent { return rt.agent(model) }, ackWait)
	model.mu.Lock()
	model.doom = doomed
	model.mu.Unlock()

	js := natstest.JetStream(t, s.NATS)
	enqueue(t, js, &agentbusv1.Request{RequestId: "chat-1", TenantId: "default", WorkflowId: "default:Chatter:Supervisor Workflow:default",
		AgentName: "Chatter", WorkflowType: "Supervisor Workflow", ActivationName: "default", ParticipantId: "cy",
		Kind: agentbusv1.Kind_KIND_CHAT, Text: "add 1 and 2", CreatedAtMs: time.Now().UnixMilli()}, nil)
	select {
	case <-model.paused:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the doomed host's chat did not reach round 2")
	}
	crash() // the host dies: no heartbeat, no acknowledgement

	waitFor(t, ackWait/2, "the survivor answers", func() bool { return len(model.asked(2)) == 2 })
	assert.Equal(t, []string{doomed}, model.asked(1), "the hosts asked for round 1")
	assert.Equal(t, []string{doomed, "survivor"}, model.asked(2), "the hosts asked for round 2")
	waitFor(t, 5*time.Second, "the journal is purged", func() bool { return journalSize(t, s) == 0 })
	assert.EqualValues(t, 1, rt.sums.Load(), "the tool's runs")
	assert.Equal(t, []string{"0 0 add 1 and 2", "0 1 sum c1", "1 1 - c1", "1 0 Let me add.\n\nIt is 3."}, threadSummary(t, s, "cy"))
}

// A streaming caller of a retried chat gets a restart event, then the whole answer again: the
// replayed round's text as one delta and its tool call and result as events, then the new
// round's deltas.
func TestChatRoundsStreamAgainAfterARestart(t *testing.T) {
	t.Parallel()
	model := newRoundModel(sumCall)
	model.failOnce = true
	rt := &roundTools{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{rt.agent(model)}, Host: agent.HostConfig{MaxDeliveries: 3}})

	q := url.Values{"workflow": {"Chatter"}, "type": {"Chat"}, "participantId": {"dee"}, "text": {"add 1 and 2"}, "apikey": {s.Key}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/api/user/rest/converse?"+q.Encode(), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got []string
	for ev := range sseEvents(resp.Body) {
		var d struct {
			Delta   string
			Attempt int
			Name    string
		}
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &d), "%+v", ev)
		switch ev.Event {
		case "delta":
			got = append(got, fmt.Sprintf("delta %q", d.Delta))
		case "restart":
			got = append(got, fmt.Sprintf("restart %d", d.Attempt))
		case "tool_call", "tool_result":
			got = append(got, ev.Event+" "+d.Name)
		default:
			got = append(got, ev.Event)
		}
	}
	want := []string{`delta "Let me add."`, "tool_call sum", "tool_result sum",
		"restart 2", `delta "Let me add."`, "tool_call sum", "tool_result sum", `delta "\n\n"`, `delta "It is 3."`, "message"}
	assert.Equal(t, want, got)
	assert.Len(t, model.asked(1), 1, "the model's turns of round 1")
	assert.EqualValues(t, 1, rt.sums.Load(), "the tool's runs")
}

// What is not recorded runs again on a retry: a tool result too large for a step, a tool call
// that changed the instance state (run again from the state the request found, so that it counts
// once), and, after a model answer too large for a step, the rest of the chat. A tool's own step
// runs once either way, and the steps after a replayed tool that made one keep their numbers.
func TestChatRoundsNotRecorded(t *testing.T) {
	t.Parallel()
	calls := []llm.ToolCall{sumCall, {ID: "c2", Name: "big", Arguments: "{}"}, {ID: "c3", Name: "count", Arguments: "{}"},
		{ID: "c4", Name: "twice", Arguments: `{"n":2}`}}
	for _, tt := range []struct {
		name               string
		bigText            bool
		round1, sums, bigs int
		counts             []int
	}{
		{name: "tool results", round1: 1, sums: 1, bigs: 2, counts: []int{1, 1}},
		{name: "model answer", bigText: true, round1: 2, sums: 2, bigs: 2, counts: []int{1, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			model := newRoundModel(calls...)
			model.failOnce, model.bigText = true, tt.bigText
			rt := &roundTools{}
			s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{rt.agent(model)}, Host: agent.HostConfig{MaxDeliveries: 3}})

			status, got := chat(t, s, "Chatter", "eve", "add 1 and 2")
			require.Equal(t, http.StatusOK, status, got)
			assert.True(t, strings.HasSuffix(got, "\n\nIt is 3."), "%.40s…", got)
			assert.Len(t, model.asked(1), tt.round1, "the model's turns of round 1")
			assert.EqualValues(t, tt.sums, rt.sums.Load(), "sum's runs")
			assert.EqualValues(t, tt.bigs, rt.bigs.Load(), "big's runs")
			assert.Equal(t, tt.counts, rt.seen(), "the counts count saw")
			assert.EqualValues(t, 1, rt.doubles.Load(), "twice's step's runs")
			assert.Len(t, threadSummary(t, s, "eve"), 10, "the chat, four calls and their results, the answer")
		})
	}
}

// noteModel asks for the tool note in rounds 1 and 2 (with the text "a", then "b") and answers
// "done" in round 3; its second turn fails with a Retryable error on the chat's first attempt.
type noteModel struct{ *roundModel }

func (m *noteModel) Generate(ctx context.Context, req llm.Request, _ func(string) error) (llm.Answer, error) {
	round := 1
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleAssistant {
			round++
		}
	}
	m.mu.Lock()
	m.turns[round] = append(m.turns[round], "")
	m.mu.Unlock()
	switch {
	case round == 1:
		return llm.Answer{ToolCalls: []llm.ToolCall{{ID: "n1", Name: "note", Arguments: `{"text":"a"}`}}}, nil
	case round == 2 && agent.MessageFrom(ctx).Attempt == 1:
		return llm.Answer{}, agent.Retryable(errors.New("the model is busy"))
	case round == 2:
		return llm.Answer{ToolCalls: []llm.ToolCall{{ID: "n2", Name: "note", Arguments: `{"text":"b"}`}}}, nil
	}
	return llm.Answer{Text: "done"}, nil
}

// A replayed tool call that posted a message (an effect) leaves the effects after it their
// numbers: the next round's post is a post of its own, not taken for a repeat of the first.
func TestChatRoundsKeepEffectNumbers(t *testing.T) {
	t.Parallel()
	model := &noteModel{newRoundModel()}
	var notes atomic.Int32
	a := agent.New("Chatter")
	agent.Method(a, "note", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (bool, error) {
		notes.Add(1)
		return true, agent.MessageFrom(ctx).Instance().Post(ctx, agent.Post{To: "log", Text: in.Text})
	})
	a.Chat(agent.ChatWithTools(model, agent.HistorySize(-1)))
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}, Host: agent.HostConfig{MaxDeliveries: 3}})

	status, got := chat(t, s, "Chatter", "fox", "note a and b")
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "done", got)
	assert.Len(t, model.asked(1), 1, "the model's turns of round 1")
	assert.EqualValues(t, 2, notes.Load(), "note's runs")
	var texts []string
	waitFor(t, 5*time.Second, "both notes are posted", func() bool {
		texts = texts[:0]
		for _, m := range thread(t, s, "Chatter", "log") {
			texts = append(texts, *m.Text)
		}
		return len(texts) == 2
	})
	assert.ElementsMatch(t, []string{"a", "b"}, texts)
}
