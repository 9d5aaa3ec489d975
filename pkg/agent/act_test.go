package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// sendData sends a Data message with the admin send endpoint and waits for its reply.
func sendData(t *testing.T, s *stacktest.Stack, agentName, activation, participant, method string, data any) (int, []byte) {
	t.Helper()
	return adminPost(t, s, "/api/v1/admin/tenants/default/messaging/send?wait=true", map[string]any{"agentName": agentName,
		"activationName": activation, "participantId": participant, "type": "Data", "text": method, "data": data})
}

// adminPost POSTs body as JSON to path with the stack's key, and returns the status and body.
func adminPost(t *testing.T, s *stacktest.Stack, path string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

// adminGet reads path of the stack's API with its tenant-admin key into out, and returns the
// status.
func adminGet(t *testing.T, s *stacktest.Stack, path string, out any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	return resp.StatusCode
}

// threadAt reads the newest 100 messages of a thread over HTTP, newest first.
func threadAt(t *testing.T, s *stacktest.Stack, agentName, activation, participant string) []history.Message {
	t.Helper()
	q := url.Values{"agentName": {agentName}, "activationName": {activation}, "participantId": {participant}, "pageSize": {"100"}}
	req, err := http.NewRequest(http.MethodGet, s.URL+"/api/v1/admin/tenants/default/messaging/history?"+q.Encode(), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var page struct {
		Messages []history.Message `json:"messages"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	return page.Messages
}

// outgoingTexts are the texts of a thread's outgoing messages that start with prefix, oldest first.
func outgoingTexts(msgs []history.Message, prefix string) []history.Message {
	var out []history.Message
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; m.Direction == history.Out && m.Text != nil && strings.HasPrefix(*m.Text, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// waitPosts waits until the thread holds n outgoing messages starting with prefix, and returns them.
func waitPosts(t *testing.T, s *stacktest.Stack, activation, participant, prefix string, n int, within time.Duration) []history.Message {
	t.Helper()
	var got []history.Message
	require.Eventually(t, func() bool {
		got = outgoingTexts(threadAt(t, s, echo.Name, activation, participant), prefix)
		return len(got) >= n
	}, within, 50*time.Millisecond, "%d messages %q in %s/%s", n, prefix, activation, participant)
	return got
}

func remindIn(t *testing.T, s *stacktest.Stack, activation, text string, ms int) time.Time {
	t.Helper()
	status, body := sendData(t, s, echo.Name, activation, "ada", "remind", map[string]any{"text": text, "ms": ms})
	require.Equal(t, http.StatusOK, status, "%s", body)
	var rep struct {
		Response struct {
			Data struct {
				DueAt time.Time `json:"dueAt"`
			} `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(body, &rep), "%s", body)
	require.False(t, rep.Response.Data.DueAt.IsZero(), "%s", body)
	return rep.Response.Data.DueAt
}

// A reminder posts its text to the caller's thread when it is due, once, marked as the timer's.
func TestRemindPostsWhenDue(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	due := remindIn(t, s, "remind", "stretch", 500)
	got := waitPosts(t, s, "remind", "ada", "stretch", 1, 5*time.Second)
	late := got[0].CreatedAt.Sub(due)
	t.Logf("posted %v after it was due", late)
	assert.Less(t, late, time.Second)
	assert.Greater(t, late, -50*time.Millisecond, "not before it was due")
	time.Sleep(time.Second)
	msgs := threadAt(t, s, echo.Name, "remind", "ada")
	assert.Len(t, outgoingTexts(msgs, "stretch"), 1, "posted once")
	var fromTimer int
	for _, m := range msgs {
		if m.Metadata["timer"] != "" {
			fromTimer++
		}
	}
	assert.Equal(t, 1, fromTimer, "the timer's incoming message is marked as the timer's")
}

// A reminder survives a restart of the whole standalone stack (NATS, ingress, host): it arrives
// on time, once.
func TestReminderSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := stacktest.Start(t, stacktest.Options{Dir: dir})
	due := remindIn(t, s, "restart", "after restart", 3000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))

	s = stacktest.Start(t, stacktest.Options{Dir: dir})
	got := waitPosts(t, s, "restart", "ada", "after restart", 1, 10*time.Second)
	late := got[0].CreatedAt.Sub(due)
	t.Logf("posted %v after it was due, across a restart", late)
	assert.Less(t, late.Abs(), time.Second)
	time.Sleep(time.Second)
	assert.Len(t, outgoingTexts(threadAt(t, s, echo.Name, "restart", "ada"), "after restart"), 1, "posted once")
}

// tick posts every second until stopped; stopping cancels its timer.
func TestTickStartsAndStops(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	status, body := sendData(t, s, echo.Name, "tick", "ada", "tick", map[string]any{"seconds": 1})
	require.Equal(t, http.StatusOK, status, "%s", body)
	waitPosts(t, s, "tick", "ada", "tick ", 2, 5*time.Second)
	status, body = sendData(t, s, echo.Name, "tick", "ada", "tick", map[string]any{"stop": true})
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"stopped":true`)
	before := len(outgoingTexts(threadAt(t, s, echo.Name, "tick", "ada"), "tick "))
	time.Sleep(2500 * time.Millisecond)
	after := outgoingTexts(threadAt(t, s, echo.Name, "tick", "ada"), "tick ")
	assert.LessOrEqual(t, len(after), before+1, "at most a tick already fired when it stopped")
	for i, m := range after {
		assert.Equal(t, "tick "+strconv.Itoa(i+1), *m.Text, "ticks are counted once each, in order")
	}
}

// Posts reach another participant's thread, and a handler that posts and then fails and runs
// again posts once.
func TestPostsAreStoredOnceAcrossRetries(t *testing.T) {
	var attempts atomic.Int32
	a := agent.New("Poster")
	a.DataFunc("notify", func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		inst := m.Instance()
		if err := inst.Post(ctx, agent.Post{Text: "to you"}); err != nil {
			return agent.NoReply, err
		}
		if err := inst.Post(ctx, agent.Post{To: "bob", Text: "about ada", Data: map[string]string{"from": m.ParticipantID}, Scope: "news"}); err != nil {
			return agent.NoReply, err
		}
		if attempts.Add(1) == 1 {
			return agent.NoReply, agent.Retryable(errors.New("first attempt fails after posting"))
		}
		return agent.Say("done"), nil
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a}})
	status, body := sendData(t, s, "Poster", "p", "ada", "notify", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.EqualValues(t, 2, attempts.Load())

	require.Eventually(t, func() bool {
		return len(outgoingTexts(threadAt(t, s, "Poster", "p", "bob"), "about ada")) == 1 &&
			len(outgoingTexts(threadAt(t, s, "Poster", "p", "ada"), "to you")) == 1
	}, 5*time.Second, 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	mine := outgoingTexts(threadAt(t, s, "Poster", "p", "ada"), "")
	require.Len(t, mine, 2, "the reply and one post, not two")
	assert.Equal(t, "done", *mine[0].Text, "the post comes after the reply")
	assert.Equal(t, "to you", *mine[1].Text)
	bob := outgoingTexts(threadAt(t, s, "Poster", "p", "bob"), "")
	require.Len(t, bob, 1)
	assert.JSONEq(t, `{"from":"ada"}`, string(bob[0].Data))
	assert.NotEmpty(t, bob[0].RequestID)
}
