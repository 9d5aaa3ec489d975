package proctest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Echo's ask parks two requests of one instance: ada's question, without a deadline, and bob's,
// whose timeoutS (3 s) ends while every process is down. Both callers are answered 202 (converse
// Data). Once the instance record names both waits, nats-server (fsyncing every write, as in
// production), the ingress and the workflow host are all killed with SIGKILL at once, stay down
// until bob's deadline has passed, and start again on the same store, ports and host id. ada's
// Chat message "blue", sent once they serve, is answered 200 with her ask's result; bob's ask
// ends at its past deadline by itself, its result of type timeout in his thread. Each thread
// holds the ask's request, one question post, one waiting answer and one final answer of the
// ask's request (ada's also her "blue") and nothing else, the instance record names no wait,
// the waits stream is empty, no deadline timer is left, and nothing is dead-lettered.
func TestProcessesAskSurvivesRestartOfEveryProcess(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{Dir: t.TempDir(), SyncAlways: true})
	sys := newSystem(t, bins, nats.URL)
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	ctx := proctest.Context(t, 3*time.Minute)

	const (
		activation = "ask-restart"
		question   = "Which colour?"
		timedQ     = "Still there?"
		timeoutS   = 3
	)
	adaAsk := sys.ask(ctx, t, activation, "ada", map[string]any{"question": question})
	bobAsk := sys.ask(ctx, t, activation, "bob", map[string]any{"question": timedQ, "timeoutS": timeoutS})
	require.NotNil(t, bobAsk.Deadline, "bob's wait has no deadline")
	// The caller is answered before the wait is written into the instance record: the kill
	// comes once both are.
	sys.waitRecordedWaits(ctx, t, activation, 2, 10*time.Second)

	// Every process at once, as a power cut would: none of them hears of the others' end.
	procs := []*proctest.Proc{nats.Proc, sys.ingress.Proc, sys.hosts["host-1"]}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.Kill)
	}
	wg.Wait()
	killed := time.Now()
	// Down until bob's deadline has passed, and at least 2 s.
	time.Sleep(max(time.Until(bobAsk.Deadline.Add(time.Second)), 2*time.Second))
	down := time.Since(killed)

	nats.Restart(t)
	nats.WaitHealthy(t, 30*time.Second)
	sys.ingress.Restart(t)
	proctest.WaitHTTP(t, sys.ingress.URL+"/healthz", 30*time.Second)
	sys.startHost("host-1")
	restarted := time.Now()
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(30 * time.Second)
	serving := time.Since(restarted)

	status, body, err := sys.converseChat(ctx, activation, "ada", "blue")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "ada's answer: %s", body)
	answered := time.Since(restarted)
	assert.JSONEq(t, `{"answer":"blue","by":"ada","question":"Which colour?","type":"chat"}`, string(responseData(t, body)), "the ask's result, answering ada's blue")

	// bob's ask ends by itself, at its past deadline.
	var bobThread []threadMessage
	for {
		bobThread = sys.thread(t, echoWF+activation, "bob")
		if len(finalAnswers(bobThread, bobAsk.RequestID)) > 0 {
			break
		}
		require.NoError(t, ctx.Err(), "bob's ask did not end at its deadline; his thread: %s", threadText(bobThread))
		time.Sleep(100 * time.Millisecond)
	}
	timedOut := time.Since(restarted)
	t.Logf("all processes killed; down %v (bob's deadline %v after the kill); from the host's start again: serving %v, ada's answer 200 %v, bob's ask ended at its deadline %v",
		down.Round(time.Millisecond), bobAsk.Deadline.Sub(killed).Round(time.Millisecond), serving.Round(time.Millisecond),
		answered.Round(time.Millisecond), timedOut.Round(time.Millisecond))

	// Let anything a repeated step would add arrive before the threads are judged.
	time.Sleep(2 * time.Second)
	adaThread := sys.thread(t, echoWF+activation, "ada")
	assert.Empty(t, askThreadProblems(adaThread, adaAsk.RequestID, question, []string{"blue"},
		`{"answer":"blue","by":"ada","question":"Which colour?","type":"chat"}`), "ada's thread:%s", threadText(adaThread))
	bobThread = sys.thread(t, echoWF+activation, "bob")
	assert.Empty(t, askThreadProblems(bobThread, bobAsk.RequestID, timedQ, nil,
		`{"question":"Still there?","type":"timeout"}`), "bob's thread:%s", threadText(bobThread))

	rec := sys.instanceRecord(ctx, t, activation)
	assert.Empty(t, rec.Waits, "the instance record still names waits")
	assert.Zero(t, sys.streamMsgs(ctx, t, subject.WaitsStream), "the waits stream still holds requests")
	pending, err := schedule.NewStore(sys.js, sys.timerStreams(ctx, t)).Pending(ctx, "default", echoWF+activation)
	require.NoError(t, err)
	assert.False(t, pending, "a wait's deadline timer is left")
	sys.noDeadLetters(t, 1)
}

// waitView is a wait as Echo's ask is answered 202 with it (response.data.waiting).
type waitView struct {
	RequestID string     `json:"requestId"`
	Name      string     `json:"name"`
	Deadline  *time.Time `json:"deadline"`
}

// ask calls Echo's ask as participant and requires the 202 of a request that waits.
func (s *system) ask(ctx context.Context, t *testing.T, activation, participant string, params map[string]any) waitView {
	t.Helper()
	status, body, err := s.converse(ctx, activation, "ask", params, url.Values{"participantId": {participant}})
	require.NoError(t, err, "ask of %s in %s", participant, activation)
	require.Equal(t, http.StatusAccepted, status, "ask of %s in %s: %s", participant, activation, body)
	w, err := waitingOf(body)
	require.NoError(t, err, "ask of %s in %s", participant, activation)
	return w
}

// waitingOf reads the wait of a 202 answer (response.data.waiting).
func waitingOf(body []byte) (waitView, error) {
	var a struct {
		Response struct {
			Data struct {
				Waiting *waitView `json:"waiting"`
			} `json:"data"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return waitView{}, fmt.Errorf("decoding %s: %w", body, err)
	}
	if a.Response.Data.Waiting == nil || a.Response.Data.Waiting.RequestID == "" {
		return waitView{}, fmt.Errorf("no response.data.waiting in %s", body)
	}
	return *a.Response.Data.Waiting, nil
}

// responseData is an answer's response.data.
func responseData(t *testing.T, body []byte) json.RawMessage {
	t.Helper()
	var a struct {
		Response struct {
			Data json.RawMessage `json:"data"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(body, &a), "%s", body)
	return a.Response.Data
}

// converseChat sends a Chat message as participant to an Echo instance through converse and
// returns the status and body.
func (s *system) converseChat(ctx context.Context, activation, participant, text string) (int, []byte, error) {
	q := url.Values{"workflow": {echoWF + activation}, "type": {"Chat"}, "text": {text}, "participantId": {participant}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ingress.URL+"/api/user/rest/converse?"+q.Encode(), nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("sending %q: %w", text, unwrapURL(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// instanceRecord reads an Echo instance's record from the instances bucket.
func (s *system) instanceRecord(ctx context.Context, t *testing.T, activation string) instance.Record {
	t.Helper()
	var rec instance.Record
	err := retry(ctx, func() error {
		kv, err := s.js.KeyValue(ctx, subject.InstancesBucket)
		if err != nil {
			return err
		}
		rec, err = instance.NewStore(kv).Get(ctx, "default", echoWF+activation)
		return err
	})
	require.NoError(t, err, "reading the record of %s", activation)
	return rec
}

// waitRecordedWaits waits until the record of an Echo instance names n waits, failing the test
// after within.
func (s *system) waitRecordedWaits(ctx context.Context, t *testing.T, activation string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec := s.instanceRecord(ctx, t, activation)
		if len(rec.Waits) == n {
			return
		}
		require.True(t, time.Now().Before(deadline), "the record of %s names %d waits, not %d, after %v", activation, len(rec.Waits), n, within)
		time.Sleep(50 * time.Millisecond)
	}
}

// streamMsgs returns how many messages a stream holds.
func (s *system) streamMsgs(ctx context.Context, t *testing.T, name string) uint64 {
	t.Helper()
	var n uint64
	err := retry(ctx, func() error {
		info, err := s.streamInfo(ctx, name)
		if err == nil {
			n = info.State.Msgs
		}
		return err
	})
	require.NoError(t, err, "reading stream %s", name)
	return n
}

// timerStreams opens the timer streams (bus.Resources.Timers; a deployment made by this release
// has no Schedules), for a schedule.Store.
func (s *system) timerStreams(ctx context.Context, t testing.TB) *bus.Resources {
	t.Helper()
	res := &bus.Resources{Timers: make([]jetstream.Stream, subject.TimerShards)}
	var err error
	for shard := range res.Timers {
		res.Timers[shard], err = s.js.Stream(ctx, subject.TimerStream(shard))
		require.NoError(t, err)
	}
	return res
}

// finalAnswers returns the answers in a thread to request requestID that are neither its
// waiting answer nor a post.
func finalAnswers(msgs []threadMessage, requestID string) []threadMessage {
	var out []threadMessage
	for _, m := range msgs {
		if m.Direction == 1 && m.RequestID == requestID && !isWaiting(m) {
			out = append(out, m)
		}
	}
	return out
}

func isWaiting(m threadMessage) bool {
	var d struct {
		Waiting json.RawMessage `json:"waiting"`
	}
	return json.Unmarshal(m.Data, &d) == nil && d.Waiting != nil
}

// askThreadProblems checks the thread of an ask (request requestID, question) by a participant
// who then sent the Chat messages chats, and returns what is wrong with it: it must hold the
// ask's request and the chats once each, one question post, one waiting answer and one final
// answer of the ask's request, final (JSON), and nothing else.
func askThreadProblems(msgs []threadMessage, requestID, question string, chats []string, final string) []string {
	var problems []string
	var asks, posts, waiting, finals int
	var in []string
	for _, m := range msgs {
		text := ""
		if m.Text != nil {
			text = *m.Text
		}
		switch {
		case m.Direction == 0 && m.RequestID == requestID && text == "ask":
			asks++
		case m.Direction == 0 && m.RequestID != requestID:
			in = append(in, text)
		case m.Direction == 1 && m.RequestID == requestID+".post.1" && text == question:
			posts++
		case m.Direction == 1 && m.RequestID == requestID && isWaiting(m):
			waiting++
		case m.Direction == 1 && m.RequestID == requestID:
			finals++
			if !jsonEqual(final, m.Data) {
				problems = append(problems, fmt.Sprintf("the ask's final answer is %s, not %s", m.Data, final))
			}
		default:
			problems = append(problems, "a message of no ask:"+threadText([]threadMessage{m}))
		}
	}
	for _, c := range []struct {
		what string
		n    int
	}{{"the ask's request", asks}, {"question posts", posts}, {"waiting answers", waiting}, {"final answers", finals}} {
		if c.n != 1 {
			problems = append(problems, fmt.Sprintf("%d %s, not 1", c.n, c.what))
		}
	}
	if !slices.Equal(chats, in) {
		problems = append(problems, fmt.Sprintf("the participant's other messages are %q, not %q", in, chats))
	}
	return problems
}

// jsonEqual reports whether a JSON text and raw JSON hold the same value.
func jsonEqual(want string, got json.RawMessage) bool {
	var w, g any
	return json.Unmarshal([]byte(want), &w) == nil && json.Unmarshal(got, &g) == nil && reflect.DeepEqual(w, g)
}

// threadText shows a thread's messages, one a line.
func threadText(msgs []threadMessage) string {
	lines := make([]string, 0, len(msgs))
	for _, m := range msgs {
		dir := "in "
		if m.Direction == 1 {
			dir = "out"
		}
		text := "<nil>"
		if m.Text != nil {
			text = *m.Text
		}
		lines = append(lines, fmt.Sprintf("\n  %s %s text=%q data=%s", dir, m.RequestID, text, m.Data))
	}
	return strings.Join(lines, "")
}
