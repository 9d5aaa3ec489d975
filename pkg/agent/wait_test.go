package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// asker is an agent whose handlers wait.
type asker struct {
	asked, pinged atomic.Int32
}

func (ak *asker) agent() *agent.Agent {
	a := agent.New("Asker")
	// ask counts its run in a step, then waits for the participant's next Chat message or an
	// answer call, for at most timeoutMs (default: the longest).
	agent.Method(a, "ask", func(ctx context.Context, in struct {
		TimeoutMs int `json:"timeoutMs,omitempty"`
	}) (map[string]any, error) {
		if _, err := agent.Step(ctx, "count", func(context.Context) (int32, error) { return ak.asked.Add(1), nil }); err != nil {
			return nil, err
		}
		ev, err := agent.Wait(ctx, "answer", agent.For{Chat: true, Methods: []string{"Answer"}, Timeout: time.Duration(in.TimeoutMs) * time.Millisecond})
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": ev.Type, "text": ev.Text, "data": ev.Data, "by": ev.RequestID}, nil
	})
	agent.Method(a, "answer", func(context.Context, map[string]any) (string, error) { return "nothing was asked", nil })
	agent.Method(a, "ping", func(context.Context, map[string]any) (string, error) {
		ak.pinged.Add(1)
		return "pong", nil
	})
	// nap sleeps durably.
	agent.Method(a, "nap", func(ctx context.Context, in struct {
		Ms int `json:"ms"`
	}) (string, error) {
		if err := agent.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond); err != nil {
			return "", err
		}
		return "rested", nil
	})
	// gate waits for the signal "open".
	agent.Method(a, "gate", func(ctx context.Context, _ map[string]any) (map[string]any, error) {
		ev, err := agent.Wait(ctx, "open", agent.For{Signals: []string{"open"}})
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": ev.Type, "signal": ev.Method, "data": ev.Data}, nil
	})
	// callask calls ask on another instance, and tells whether the call waits.
	agent.Method(a, "callask", func(ctx context.Context, _ map[string]any) (map[string]any, error) {
		err := agent.MessageFrom(ctx).Instance().Call(ctx, agent.Peer{Agent: "Asker", Activation: "other"}, "ask", map[string]any{}, nil)
		var ce *agent.CallError
		errors.As(err, &ce)
		return map[string]any{"waits": errors.Is(err, agent.ErrCallWaits), "status": ce.Status}, nil
	})
	// approve, a webhook, waits for an ok call.
	a.WebhookFunc("approve", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		ev, err := agent.Wait(ctx, "ok", agent.For{Methods: []string{"ok"}})
		if err != nil {
			return agent.Fail(err)
		}
		return agent.Text(http.StatusOK, "approved with "+string(ev.Data))
	})
	agent.Method(a, "ok", func(context.Context, map[string]any) (string, error) { return "nothing to approve", nil })
	a.ChatFunc(func(_ context.Context, m *agent.Message) (agent.Reply, error) {
		return agent.Say("heard " + m.Text), nil
	})
	return a
}

// sendMessage sends a Chat (text) or Data (method text, data) message with the admin send
// endpoint and waits for its answer.
func sendMessage(t *testing.T, s *stacktest.Stack, participant, typ, text string, data any) (int, []byte) {
	t.Helper()
	msg := map[string]any{"agentName": "Asker", "activationName": "default", "participantId": participant, "type": typ, "text": text}
	if data != nil {
		msg["data"] = data
	}
	return adminPost(t, s, "/api/v1/admin/tenants/default/messaging/send?wait=true", msg)
}

// answerData is the response data of an answer.
func answerData(t *testing.T, body []byte) json.RawMessage {
	t.Helper()
	var ans struct {
		Response struct {
			Data json.RawMessage `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(body, &ans), "%s", body)
	return ans.Response.Data
}

// threadTexts is a thread's messages, oldest first: "in: " and the text (a Data call's method),
// "out: " and the data, else the text.
func threadTexts(t *testing.T, s *stacktest.Stack, participant string) []string {
	t.Helper()
	msgs := threadAt(t, s, "Asker", "default", participant)
	out := make([]string, 0, len(msgs))
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		dir := "in"
		if m.Direction == history.Out {
			dir = "out"
		}
		what := string(m.Data)
		if m.Text != nil && (m.Data == nil || dir == "in") {
			what = *m.Text
		}
		out = append(out, dir+": "+what)
	}
	return out
}

// A request waits: its caller is answered 202 with what it waits for, a later message that does
// not end the wait is queued behind it (202), the participant's Chat message ends it and gets
// the resumed request's answer, and the queued message runs after it, in order. The waiting
// handler's earlier step did not run again.
func TestWaitForAChatMessage(t *testing.T) {
	t.Parallel()
	ak := &asker{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{ak.agent()}})

	status, body := sendMessage(t, s, "ada", "Data", "ask", map[string]any{})
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	assert.Contains(t, string(answerData(t, body)), `"waiting":{"requestId":`)
	assert.Contains(t, string(answerData(t, body)), `"chat":true,"methods":["answer"]`)

	status, body = sendMessage(t, s, "ada", "Data", "ping", map[string]any{})
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	assert.Contains(t, string(answerData(t, body)), `"queued":{"behind":`)
	assert.Zero(t, ak.pinged.Load(), "the queued ping ran")

	// Another participant's conversation does not wait.
	status, body = sendMessage(t, s, "bob", "Chat", "hello", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), "heard hello")

	status, body = sendMessage(t, s, "ada", "Chat", "blue", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	data := answerData(t, body)
	assert.Contains(t, string(data), `"type":"chat"`)
	assert.Contains(t, string(data), `"text":"blue"`)
	assert.EqualValues(t, 1, ak.asked.Load(), "the step before the wait ran again")

	waitFor(t, 5*time.Second, "the queued ping runs", func() bool { return ak.pinged.Load() == 1 })
	var texts []string
	waitFor(t, 5*time.Second, "the thread holds the ping's answer", func() bool {
		texts = threadTexts(t, s, "ada")
		return len(texts) == 6
	})
	require.Len(t, texts, 6, "%q", texts)
	assert.Equal(t, "in: ask", texts[0])
	assert.Contains(t, texts[1], `out: {"waiting":`)
	assert.Equal(t, "in: blue", texts[2])
	assert.Contains(t, texts[3], `"text":"blue"`)
	assert.Equal(t, "in: ping", texts[4])
	assert.Equal(t, `out: "pong"`, texts[5])

	// With nothing waiting, answer runs its own handler.
	status, body = sendMessage(t, s, "ada", "Data", "answer", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), "nothing was asked")
}

// A Data call the wait names ends it, with its method and parameters.
func TestWaitForADataCall(t *testing.T) {
	t.Parallel()
	ak := &asker{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{ak.agent()}})

	status, body := sendMessage(t, s, "ada", "Data", "ask", map[string]any{})
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	status, body = sendMessage(t, s, "ada", "Data", "ANSWER", map[string]any{"ok": true})
	require.Equal(t, http.StatusOK, status, "%s", body)
	data := string(answerData(t, body))
	assert.Contains(t, data, `"type":"data"`)
	assert.Contains(t, data, `"data":{"ok":true}`)
}

// A wait ends at its deadline; Sleep is a wait with only a deadline.
func TestWaitDeadlineAndSleep(t *testing.T) {
	t.Parallel()
	ak := &asker{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{ak.agent()}})

	status, body := sendMessage(t, s, "ada", "Data", "ask", map[string]any{"timeoutMs": 1000})
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	napped := time.Now()
	status, body = sendMessage(t, s, "bob", "Data", "nap", map[string]any{"ms": 1000})
	require.Equal(t, http.StatusAccepted, status, "%s", body)

	waitFor(t, 10*time.Second, "the wait ends at its deadline", func() bool {
		texts := threadTexts(t, s, "ada")
		return len(texts) == 3 && assert.ObjectsAreEqual(texts[2][:5], "out: ")
	})
	texts := threadTexts(t, s, "ada")
	assert.Contains(t, texts[2], `"type":"timeout"`)
	waitFor(t, 10*time.Second, "the sleep ends", func() bool {
		texts := threadTexts(t, s, "bob")
		return len(texts) == 3 && texts[2] == `out: "rested"`
	})
	assert.GreaterOrEqual(t, time.Since(napped), time.Second, "the sleep ended early")
}

// A webhook handler waits as a Chat or Data handler does: its caller gets 202 with the wait as
// the body; the call that ends it is told which request it resumed, and the webhook's answer is
// stored in the thread.
func TestWaitInAWebhook(t *testing.T) {
	t.Parallel()
	ak := &asker{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{ak.agent()}})

	status, hdr, body := post(t, s, "Asker", "approve", "participantId=ops")
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	assert.Equal(t, "application/json", hdr.Get("Content-Type"))
	var waiting struct {
		Waiting struct {
			RequestID string   `json:"requestId"`
			Methods   []string `json:"methods"`
		} `json:"waiting"`
	}
	require.NoError(t, json.Unmarshal(body, &waiting), "%s", body)
	assert.Equal(t, []string{"ok"}, waiting.Waiting.Methods)

	participant := threadParticipant(t, s, waiting.Waiting.RequestID)
	status, body = sendMessage(t, s, participant, "Data", "ok", map[string]any{"by": "ann"})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.JSONEq(t, `{"resumed":"`+waiting.Waiting.RequestID+`"}`, string(answerData(t, body)))
	waitFor(t, 5*time.Second, "the webhook's answer is stored", func() bool {
		for _, text := range threadTexts(t, s, participant) {
			if bytes.Contains([]byte(text), []byte(`approved with {\"by\":\"ann\"}`)) {
				return true
			}
		}
		return false
	})
}

// threadParticipant finds the participant of the thread that holds a request of Asker's default
// instance, from the inspector's recent requests.
func threadParticipant(t *testing.T, s *stacktest.Stack, requestID string) string {
	t.Helper()
	var view struct {
		RecentRequests []struct {
			RequestID     string `json:"requestId"`
			ParticipantID string `json:"participantId"`
		} `json:"recentRequests"`
	}
	adminGet(t, s, "/api/v1/admin/tenants/default/instances/default:Asker:Supervisor%20Workflow:default", &view)
	for _, r := range view.RecentRequests {
		if r.RequestID == requestID {
			return r.ParticipantID
		}
	}
	require.FailNow(t, "no such request", "%s in %+v", requestID, view)
	return ""
}

// Wait refuses what is not a wait, and works only in a handler.
func TestWaitRefusals(t *testing.T) {
	t.Parallel()
	_, err := agent.Wait(context.Background(), "x", agent.For{Chat: true})
	assert.ErrorContains(t, err, "running handler")
	for _, f := range []agent.For{{}, {Timeout: -time.Second}, {Timeout: agent.MaxWait + time.Second}, {Methods: []string{""}}} {
		_, err := agent.Wait(context.Background(), "x", f)
		assert.Error(t, err, "%+v", f)
	}
	assert.NoError(t, agent.Sleep(context.Background(), 0), "a sleep of nothing")
}

// signal sends a signal to a conversation of Asker's default instance.
func signal(t *testing.T, s *stacktest.Stack, participant, name string, data any) (int, []byte) {
	t.Helper()
	return adminPost(t, s, "/api/v1/admin/tenants/default/messaging/signal",
		map[string]any{"agentName": "Asker", "activationName": "default", "participantId": participant, "name": name, "data": data})
}

// A signal sent over the API ends the wait that names it, and its caller gets the resumed
// request's answer; a signal nothing waits for is answered 409 not-waiting, and a Data call of the
// signal's name is no signal.
func TestWaitForASignal(t *testing.T) {
	t.Parallel()
	ak := &asker{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{ak.agent()}})

	status, body := signal(t, s, "ada", "open", nil)
	require.Equal(t, http.StatusConflict, status, "%s", body)
	assert.Contains(t, string(body), "urn:agentbus:problem:not-waiting")

	status, body = sendMessage(t, s, "ada", "Data", "gate", map[string]any{})
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	assert.Contains(t, string(answerData(t, body)), `"signals":["open"]`)
	status, body = signal(t, s, "ada", "shut", nil)
	require.Equal(t, http.StatusConflict, status, "another signal: %s", body)
	status, body = signal(t, s, "bob", "open", nil)
	require.Equal(t, http.StatusConflict, status, "another conversation: %s", body)

	status, body = signal(t, s, "ada", "open", map[string]any{"by": "ops"})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.JSONEq(t, `{"type":"signal","signal":"open","data":{"by":"ops"}}`, string(answerData(t, body)))
	status, body = signal(t, s, "ada", "open", nil)
	require.Equal(t, http.StatusConflict, status, "the wait is over: %s", body)
}

// An Agent2Agent call to a Data method that waits fails with ErrCallWaits, and the 202.
func TestCallToAWaitingRequest(t *testing.T) {
	t.Parallel()
	ak := &asker{}
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{ak.agent()}})
	status, body := sendMessage(t, s, "ada", "Data", "callask", map[string]any{})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.JSONEq(t, `{"waits":true,"status":202}`, string(answerData(t, body)))
}
