package proctest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// 600 asks of Echo wait (20 instances, 30 participants each). Their participants then all answer
// at once, 32 Chat messages at a time, and the workflow host is killed with SIGKILL as soon as
// 100 of the answers are in, while others are being handled, and started again at once. Every
// Chat message is answered 200 with its ask's result; afterwards every thread holds the ask's
// request, one question post, one waiting answer, the answer "blue" and one final answer, and
// nothing else; no instance record names a wait, the waits stream is empty; and a second Chat
// message from every participant ("green") is answered 200 by Echo's chat handler, as in any
// conversation with nothing waiting.
//
// What it guards: a resumed request clears its wait from the instance record before it purges
// its steps journal. The other way round, a host killed between the two left the wait in the
// record, and the resumed request, delivered again, ran with no journal and parked again.
func TestProcessesAsksSurviveHostKillDuringTheirAnswers(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	ctx := proctest.Context(t, 4*time.Minute)

	const (
		instances    = 20
		participants = 30
		n            = instances * participants
		killAfter    = 100
	)
	where := func(i int) (activation, participant string) {
		return fmt.Sprintf("crash-%d", i%instances), fmt.Sprintf("p%d", i/instances)
	}
	question := func(i int) string { return fmt.Sprintf("Question %d?", i) }
	asks := make([]string, n) // request ids
	inParallel(32, n, func(i int) {
		a, p := where(i)
		asks[i] = sys.ask(ctx, t, a, p, map[string]any{"question": question(i)}).RequestID
	})
	for a := range instances {
		activation, _ := where(a)
		sys.waitRecordedWaits(ctx, t, activation, participants, 10*time.Second)
	}

	// Every participant answers; the host dies once killAfter answers are in.
	var (
		answered atomic.Int64
		kill     = make(chan struct{})
		killOnce sync.Once
		mu       sync.Mutex
		wrong    []string
	)
	killed := make(chan time.Time, 1)
	go func() {
		select {
		case <-kill:
		case <-ctx.Done():
			return
		}
		sys.hosts["host-1"].Kill()
		killed <- time.Now()
		sys.startHost("host-1")
	}()
	began := time.Now()
	inParallel(32, n, func(i int) {
		a, p := where(i)
		status, body, err := sys.converseChat(ctx, a, p, "blue")
		if answered.Add(1) >= killAfter {
			killOnce.Do(func() { close(kill) })
		}
		want := fmt.Sprintf(`{"answer":"blue","by":%q,"question":%q,"type":"chat"}`, p, question(i))
		if err != nil || status != http.StatusOK || !jsonEqual(want, dataOf(body)) {
			mu.Lock()
			wrong = append(wrong, fmt.Sprintf("%s %s: %d %v %s", a, p, status, err, answerSummary(body)))
			mu.Unlock()
		}
	})
	var at time.Time
	select {
	case at = <-killed:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the host was not killed")
	}
	t.Logf("host-1 killed %v after the answers began, when %d of %d were in; all answered %v after the kill",
		at.Sub(began).Round(time.Millisecond), killAfter, n, time.Since(at).Round(time.Millisecond))
	assert.Empty(t, wrong, "Chat answers not answered 200 with their ask's result")

	// Every thread, once the last final answer is in (and anything a run repeated after it).
	threads := make([][]threadMessage, n)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		missing := 0
		inParallel(16, n, func(i int) {
			if threads[i] == nil || len(finalAnswers(threads[i], asks[i])) == 0 {
				a, p := where(i)
				threads[i] = sys.thread(t, echoWF+a, p)
			}
		})
		for i := range n {
			if len(finalAnswers(threads[i], asks[i])) == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d asks have no final answer in their thread", missing)
	}
	time.Sleep(2 * time.Second)
	var bad []string
	inParallel(16, n, func(i int) {
		a, p := where(i)
		msgs := sys.thread(t, echoWF+a, p)
		want := fmt.Sprintf(`{"answer":"blue","by":%q,"question":%q,"type":"chat"}`, p, question(i))
		if problems := askThreadProblems(msgs, asks[i], question(i), []string{"blue"}, want); len(problems) > 0 {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%s %s: %s; its thread:%s", a, p, strings.Join(problems, "; "), threadText(msgs)))
			mu.Unlock()
		}
	})
	assert.Empty(t, bad, "%d of the %d threads are not one ask answered once", len(bad), n)

	var waiting []string
	for a := range instances {
		activation, _ := where(a)
		for p := range sys.instanceRecord(ctx, t, activation).Waits {
			waiting = append(waiting, activation+" "+p)
		}
	}
	assert.Empty(t, waiting, "instance records still name waits")
	assert.Zero(t, sys.streamMsgs(ctx, t, subject.WaitsStream), "the waits stream still holds requests")

	// Nothing waits any more: every conversation answers a Chat message as Echo does.
	var stuck []string
	inParallel(32, n, func(i int) {
		a, p := where(i)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		status, body, err := sys.converseChat(cctx, a, p, "green")
		if err != nil || status != http.StatusOK || !strings.Contains(string(body), `"text":"You said: green"`) {
			mu.Lock()
			stuck = append(stuck, fmt.Sprintf("%s %s: %d %v %s", a, p, status, err, answerSummary(body)))
			mu.Unlock()
		}
	})
	assert.Empty(t, stuck, "conversations that do not answer a Chat message after their ask was answered")
	sys.noDeadLetters(t, 1)
}

// inParallel runs f(0) … f(n-1), workers at a time, and returns when all have.
func inParallel(workers, n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// answerSummary shows an answer's response text and data, or the body when it has neither.
func answerSummary(body []byte) string {
	var a struct {
		Response *struct {
			Text *string         `json:"text"`
			Data json.RawMessage `json:"data"`
		} `json:"response"`
	}
	if json.Unmarshal(body, &a) != nil || a.Response == nil {
		return fmt.Sprintf("%.300s", body)
	}
	text := "<nil>"
	if a.Response.Text != nil {
		text = *a.Response.Text
	}
	return fmt.Sprintf("response text=%q data=%s", text, a.Response.Data)
}

// dataOf is an answer's response.data, nil when it has none.
func dataOf(body []byte) json.RawMessage {
	var a struct {
		Response struct {
			Data json.RawMessage `json:"data"`
		} `json:"response"`
	}
	_ = json.Unmarshal(body, &a)
	return a.Response.Data
}
