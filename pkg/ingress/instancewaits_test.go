package ingress_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// waitShown is a wait as the instance view shows it.
type waitShown struct {
	ParticipantID string     `json:"participantId"`
	RequestID     string     `json:"requestId"`
	Type          string     `json:"type"`
	Name          string     `json:"name"`
	Chat          bool       `json:"chat"`
	Methods       []string   `json:"methods"`
	Deadline      *time.Time `json:"deadline"`
	Since         time.Time  `json:"since"`
	Held          int        `json:"held"`
}

// waitAnswer is a 202 answer of send or converse: the request waits, or is queued behind one
// that does.
type waitAnswer struct {
	RequestID string `json:"requestId"`
	Response  struct {
		Text *string `json:"text"`
		Data struct {
			Waiting *waitShown `json:"waiting"`
			Queued  *struct {
				Behind waitShown `json:"behind"`
			} `json:"queued"`
		} `json:"data"`
	} `json:"response"`
}

func waitAnswerOf(t *testing.T, status int, ct string, b []byte) waitAnswer {
	t.Helper()
	require.Equal(t, http.StatusAccepted, status, "%s", b)
	require.Equal(t, "application/json", ct)
	var a waitAnswer
	require.NoError(t, json.Unmarshal(b, &a), "%s", b)
	return a
}

// askEcho sends Echo's Data ask with converse as participant and returns its 202 answer.
func askEcho(t *testing.T, s *stacktest.Stack, wf, participant, body string) waitAnswer {
	t.Helper()
	status, ct, b := converse(t, s, q("workflow", wf, "type", "Data", "text", "ask", "participantId", participant, "apikey", s.Key), body)
	return waitAnswerOf(t, status, ct, b)
}

// instanceWaits reads the instance view's waits, and checks that they are an array.
func instanceWaits(t *testing.T, s *stacktest.Stack, wf string) []waitShown {
	t.Helper()
	var got struct {
		Waits json.RawMessage `json:"waits"`
	}
	status, _, b := adminReq(t, s, get, instancePath("default", wf), s.Key, nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	require.NoError(t, json.Unmarshal(b, &got))
	require.True(t, len(got.Waits) > 0 && got.Waits[0] == '[', "waits is an array: %s", b)
	var waits []waitShown
	require.NoError(t, json.Unmarshal(got.Waits, &waits))
	return waits
}

// recentStatus is the status the instance view's recent requests show for a request, 0 for none.
func recentStatus(t *testing.T, s *stacktest.Stack, wf, requestID string) int {
	t.Helper()
	var got instanceShow
	status, _, b := adminReq(t, s, get, instancePath("default", wf), s.Key, nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	require.NoError(t, json.Unmarshal(b, &got))
	for _, r := range got.RecentRequests {
		if r.RequestID == requestID {
			return r.Status
		}
	}
	return 0
}

// TestInstanceShowsWaits: the instance view lists the requests that wait for an event (Echo's
// ask), one per conversation, by participant, with what ends each wait, its deadline and since
// when it waits; the callers were answered 202 with the same wait, and a later request of a
// waiting conversation 202 with the wait it is queued behind. A wait that ended leaves the list.
func TestInstanceShowsWaits(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	wf := echoWorkflow("default", "asking")
	before := time.Now().Add(-time.Second)

	// An instance with nothing waiting shows an empty list.
	echoHost(t, s, s.Key, wf)
	assert.Empty(t, instanceWaits(t, s, wf))

	// bob asks first, with a deadline of an hour; ada asks with the longest one; cy asks by send.
	bob := askEcho(t, s, wf, "bob", `{"question":"Which colour?","timeoutS":3600}`)
	ada := askEcho(t, s, wf, "ada", `{"question":"Which shape?"}`)
	status, ct, b := send(t, s, "default", "wait=true", map[string]any{"agentName": "Echo", "activationName": "asking",
		"participantId": "cy", "type": "Data", "text": "ask", "data": map[string]any{"question": "Which size?"}}, "Authorization", "Bearer "+s.Key)
	cy := waitAnswerOf(t, status, ct, b)
	for _, a := range []waitAnswer{bob, ada, cy} {
		require.NotNil(t, a.Response.Data.Waiting, "a waiting answer")
		assert.Equal(t, a.RequestID, a.Response.Data.Waiting.RequestID)
		if assert.NotNil(t, a.Response.Text) {
			assert.Equal(t, "waiting: answer", *a.Response.Text)
		}
	}

	// ada's next request, which does not end her wait, is queued behind it.
	status, ct, b = converse(t, s, q("workflow", wf, "type", "Data", "text", "count", "participantId", "ada", "apikey", s.Key), "{}")
	queued := waitAnswerOf(t, status, ct, b)
	require.NotNil(t, queued.Response.Data.Queued, "a queued answer: %s", b)
	assert.Equal(t, ada.RequestID, queued.Response.Data.Queued.Behind.RequestID)

	waits := instanceWaits(t, s, wf)
	require.Len(t, waits, 3)
	for i, w := range waits {
		a := []waitAnswer{ada, bob, cy}[i]
		assert.Equal(t, []string{"ada", "bob", "cy"}[i], w.ParticipantID)
		assert.Equal(t, a.RequestID, w.RequestID)
		assert.Equal(t, "Data", w.Type)
		assert.Equal(t, "answer", w.Name)
		assert.True(t, w.Chat)
		assert.Equal(t, []string{"answer"}, w.Methods)
		assert.True(t, w.Since.After(before) && w.Since.Before(time.Now()), "since %v", w.Since)
		assert.Equal(t, a.Response.Data.Waiting.Since, w.Since, "the answer's since")
		require.NotNil(t, w.Deadline)
		assert.Equal(t, *a.Response.Data.Waiting.Deadline, *w.Deadline, "the answer's deadline")
	}
	assert.Equal(t, []int{1, 0, 0}, []int{waits[0].Held, waits[1].Held, waits[2].Held}, "requests queued behind each wait")
	timeout := map[string]time.Duration{"ada": agent.MaxWait, "bob": time.Hour, "cy": agent.MaxWait}
	for _, w := range waits {
		assert.WithinDuration(t, w.Since.Add(timeout[w.ParticipantID]), *w.Deadline, time.Second, "%s's deadline", w.ParticipantID)
	}

	assert.Equal(t, http.StatusAccepted, recentStatus(t, s, wf, ada.RequestID), "a waiting request's recent status")

	// ada's Chat message ends her wait, bob's answer call his: they leave the list.
	status, _, b = converse(t, s, q("workflow", wf, "type", "Chat", "text", "round", "participantId", "ada", "apikey", s.Key), "")
	assert.Contains(t, string(answerOf(t, status, b).Response.Data), `"answer":"round"`)
	status, _, b = converse(t, s, q("workflow", wf, "type", "Data", "text", "answer", "participantId", "bob", "apikey", s.Key), `{"colour":"blue"}`)
	assert.Contains(t, string(answerOf(t, status, b).Response.Data), `"answer":{"colour":"blue"}`)
	// A resumed request clears its wait just after it answered.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		waits = instanceWaits(t, s, wf)
		if len(waits) == 1 || time.Now().After(end) {
			break
		}
	}
	if assert.Len(t, waits, 1) {
		assert.Equal(t, "cy", waits[0].ParticipantID)
	}
	assert.Equal(t, http.StatusOK, recentStatus(t, s, wf, ada.RequestID), "a resumed request's recent status: its final answer's")
}

// TestWaitingRequestsCountInUsage: a request that waits for an event (Echo's ask) and the
// requests of its conversation held behind it count in their tenant's usage, as payloads, while
// they wait; once the wait ended and they ran, they leave it. Another tenant's usage does not
// move.
func TestWaitingRequestsCountInUsage(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	wf := echoWorkflow("default", "usage")
	payloads := func(tenant, key string) int64 { return tenantUsage(t, s.URL, tenant, key).Bytes.Payloads }
	require.Zero(t, payloads("default", s.Key), "before any wait")

	ask := askEcho(t, s, wf, "ada", `{"question":"Which colour?"}`)
	require.NotNil(t, ask.Response.Data.Waiting, "a waiting answer")
	const held, pad = 3, 10_000
	body := `{"pad":"` + strings.Repeat("x", pad) + `"}`
	for range held {
		status, ct, b := converse(t, s, q("workflow", wf, "type", "Data", "text", "echo", "participantId", "ada", "apikey", s.Key), body)
		require.NotNil(t, waitAnswerOf(t, status, ct, b).Response.Data.Queued, "a queued answer: %s", b)
	}
	var waiting int64
	require.Eventually(t, func() bool {
		waiting = payloads("default", s.Key)
		return waiting >= held*pad
	}, 10*time.Second, 50*time.Millisecond, "the held requests are not in the usage")
	// The parked ask and three envelopes of a little over pad bytes each.
	assert.Less(t, waiting, int64((held+1)*(pad+2048)), "usage while waiting")
	assert.Zero(t, payloads("other", s.OtherKey), "another tenant's usage")

	status, _, b := converse(t, s, q("workflow", wf, "type", "Data", "text", "answer", "participantId", "ada", "apikey", s.Key), `{"colour":"blue"}`)
	assert.Contains(t, string(answerOf(t, status, b).Response.Data), `"answer":{"colour":"blue"}`)
	require.Eventually(t, func() bool { return payloads("default", s.Key) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the wait's requests still count once it resumed")
}
