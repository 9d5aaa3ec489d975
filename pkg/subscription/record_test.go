package subscription_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/subscription"
)

// The tests here store requests with their replies: each request and its reply are one history
// record (fixture.say) and two events, which are delivered, retried and kept one by one.

// A receiver that refuses a reply gets it again until it accepts it, and its request once: the
// request it accepted is not sent again with each retry of the reply, whichever host the retry
// lands on.
func TestRefusedReplyIsRetriedAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		hosts int
	}{
		{name: "one host", hosts: 1},
		{name: "two hosts", hosts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) { refusedReplyIsRetriedAlone(t, tc.hosts) })
	}
}

func refusedReplyIsRetriedAlone(t *testing.T, hosts int) {
	f := newFixture(t, subscription.Config{MaxBackoff: 50 * time.Millisecond})
	const refusals = 3
	rcv := newRefusingReceiver(t, func(typ string, attempt int) int {
		if typ == subscription.MessageOutgoing && attempt <= refusals {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	ctx := context.Background()
	sub, err := f.store.Create(ctx, "acme", subscription.New{URL: rcv.URL, Events: []string{subscription.MessageIncoming, subscription.MessageOutgoing}})
	require.NoError(t, err)
	rcv.secret = sub.Secret
	f.deliver(t)
	for range hosts - 1 {
		deliverOn(t, f.host())
	}
	const records = 3
	var want []string
	for i := range records {
		f.say(t, "acme", "shop", "ada", fmt.Sprint("m", i))
		want = append(want, fmt.Sprint("in m", i), fmt.Sprint("out m", i))
	}

	require.Eventually(t, func() bool { return len(rcv.deliveries()) == 2*records }, 20*time.Second, 10*time.Millisecond,
		"every event accepted")
	time.Sleep(300 * time.Millisecond) // time for an event sent once more than it should be

	var texts []string
	for _, d := range rcv.deliveries() {
		require.NoError(t, d.verifyErr)
		texts = append(texts, d.text)
	}
	assert.Equal(t, want, texts, "accepted in order, each once, the request before its reply")
	requests, replies := rcv.triesOf(subscription.MessageIncoming), rcv.triesOf(subscription.MessageOutgoing)
	assert.Len(t, requests, records)
	for id, n := range requests {
		assert.Equal(t, 1, n, "request event %s is sent once", id)
	}
	assert.Len(t, replies, records)
	for id, n := range replies {
		assert.Equal(t, refusals+1, n, "reply event %s is sent until accepted", id)
	}
	und, _, err := f.store.ListUndelivered(ctx, "acme", sub.ID, 0, 0)
	require.NoError(t, err)
	assert.Empty(t, und)
}

// An event of a record that its receiver refuses until the retry period ends is kept as
// undelivered with its own attempts and error, alone: the other event of the record is delivered
// once. The kept event can be replayed.
func TestRefusedEventOfARecordIsKeptAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		refused, delivered string
		status             int
	}{
		{name: "request refused", refused: subscription.MessageIncoming, delivered: subscription.MessageOutgoing, status: http.StatusServiceUnavailable},
		{name: "reply refused", refused: subscription.MessageOutgoing, delivered: subscription.MessageIncoming, status: http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, subscription.Config{RetryFor: time.Second, MaxBackoff: 100 * time.Millisecond})
			var up atomic.Bool
			rcv := newRefusingReceiver(t, func(typ string, _ int) int {
				if typ == tc.refused && !up.Load() {
					return tc.status
				}
				return 0
			})
			ctx := context.Background()
			sub, err := f.store.Create(ctx, "acme", subscription.New{URL: rcv.URL, Events: []string{subscription.MessageIncoming, subscription.MessageOutgoing}})
			require.NoError(t, err)
			rcv.secret = sub.Secret
			f.deliver(t)
			// The second record is past its retry period by the time its turn comes: each of its
			// events is tried once.
			const records = 2
			for i := range records {
				f.say(t, "acme", "shop", "ada", fmt.Sprint("m", i))
			}

			require.Eventually(t, func() bool {
				und, _, err := f.store.ListUndelivered(ctx, "acme", sub.ID, 0, 0)
				require.NoError(t, err)
				return len(und) >= records
			}, 15*time.Second, 20*time.Millisecond, "one event of each record kept")
			assert.Eventually(t, func() bool { return len(rcv.deliveries()) >= records }, 5*time.Second, 20*time.Millisecond,
				"the other event of each record delivered")
			time.Sleep(300 * time.Millisecond) // time for an event sent once more than it should be

			refused, delivered := rcv.triesOf(tc.refused), rcv.triesOf(tc.delivered)
			und, _, err := f.store.ListUndelivered(ctx, "acme", sub.ID, 0, 0)
			require.NoError(t, err)
			require.Len(t, und, records)
			for i, u := range und {
				assert.Equal(t, tc.refused, u.Type, "kept %d", i)
				assert.Contains(t, u.Error, strconv.Itoa(tc.status), "kept %d has its own error", i)
				assert.Equal(t, refused[u.EventID], u.Attempts, "kept %d has the attempts its receiver got", i)
				assert.Positive(t, u.Attempts)
			}
			assert.GreaterOrEqual(t, und[0].Attempts, 2, "the first record's event was retried")
			assert.Len(t, delivered, records)
			for id, n := range delivered {
				assert.Equal(t, 1, n, "%s event %s is sent once", tc.delivered, id)
			}
			for _, d := range rcv.deliveries() {
				assert.Equal(t, tc.delivered, d.typ)
			}

			up.Store(true)
			_, err = f.store.Replay(ctx, "acme", sub.ID, und[0].ID)
			require.NoError(t, err)
			got := rcv.deliveries()
			require.Len(t, got, records+1)
			assert.Equal(t, und[0].EventID, got[records].id, "the replay keeps the webhook-id")
			assert.Equal(t, tc.refused, got[records].typ)
			require.NoError(t, got[records].verifyErr)
			left, _, err := f.store.ListUndelivered(ctx, "acme", sub.ID, 0, 0)
			require.NoError(t, err)
			require.Len(t, left, records-1, "a replayed event is removed")
			assert.Equal(t, und[1].ID, left[0].ID)
		})
	}
}
