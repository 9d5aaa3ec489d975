package proctest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/proctest"
)

// An instance of Echo has instance.MaxWaits-1 (255) asks waiting when eight more participants
// ask at once: the one free place goes to one of them, answered 202, and the other seven are
// refused, 429. Each ask answered 202 waits as any other: its wait is in the instance record,
// and, after the workflow host is killed (SIGKILL) and started again, the participant's Chat
// message is answered 200 with the ask's result.
//
// What it guards: park records the wait in the instance record (setWait) before it answers the
// caller 202, and takes a refusal there (no place left) as the answer 429. Conversations of one
// instance run side by side, so several asks pass park's first check for the last place.
func TestProcessesAsksRacingForAFullInstanceWaitOrAreRefused(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(10 * time.Second)
	ctx := proctest.Context(t, 3*time.Minute)

	const activation = "full"
	inParallel(16, instance.MaxWaits-1, func(i int) {
		sys.ask(ctx, t, activation, fmt.Sprintf("p%d", i), map[string]any{"question": "Which colour?"})
	})
	sys.waitRecordedWaits(ctx, t, activation, instance.MaxWaits-1, 10*time.Second)

	// Eight asks at once, for the last place.
	const racers = 8
	var (
		mu       sync.Mutex
		accepted []string
		refused  []string
		other    []string
		start    = make(chan struct{})
		wg       sync.WaitGroup
	)
	for i := range racers {
		p := fmt.Sprintf("x%d", i)
		wg.Go(func() {
			<-start
			status, body, err := sys.converse(ctx, activation, "ask", map[string]any{"question": "Question of " + p + "?"}, url.Values{"participantId": {p}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && status == http.StatusAccepted:
				accepted = append(accepted, p)
			case err == nil && status == http.StatusTooManyRequests:
				refused = append(refused, p)
			default:
				other = append(other, fmt.Sprintf("%s: %d %v %.300s", p, status, err, body))
			}
		})
	}
	close(start)
	wg.Wait()
	slices.Sort(accepted)
	t.Logf("%d asks at once for the last place: answered 202 %v, 429 %v", racers, accepted, refused)
	require.Empty(t, other, "asks answered neither 202 nor 429")
	assert.LessOrEqual(t, len(accepted), 1, "asks answered 202 for the one free place")
	// The caller is answered before the wait is written into the record: each accepted ask's
	// wait is there soon after.
	var notWaiting []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rec := sys.instanceRecord(ctx, t, activation)
		notWaiting = slices.DeleteFunc(slices.Clone(accepted), func(p string) bool { return rec.Waits[p] != nil })
		if len(notWaiting) == 0 || time.Now().After(deadline) {
			break
		}
	}
	assert.Empty(t, notWaiting, "asks answered 202 whose wait the instance record does not name after 10 s")
	t.Logf("the host warned %d times that it could not record a wait (msg=\"recording the wait\")",
		strings.Count(sys.hosts["host-1"].Log(), `msg="recording the wait"`))

	// A wait answered 202 outlives its host.
	sys.hosts["host-1"].Kill()
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	sys.waitServing(30 * time.Second)
	var lost []string
	for _, p := range accepted {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		status, body, err := sys.converseChat(cctx, activation, p, "blue")
		cancel()
		want := fmt.Sprintf(`{"answer":"blue","by":%q,"question":"Question of %s?","type":"chat"}`, p, p)
		if err != nil || status != http.StatusOK || !jsonEqual(want, dataOf(body)) {
			lost = append(lost, fmt.Sprintf("%s: %d %v %s", p, status, err, answerSummary(body)))
		}
	}
	assert.Empty(t, lost, "asks answered 202 whose participant's answer did not end them")
}
