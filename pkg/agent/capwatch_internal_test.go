package agent

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// One CapWatch serves the hosts of a process: each subscriber gets the grants held of its own
// agents, then their changes and deletions, and nothing once cancelled; the load reports of
// every host land on the one board.
func TestCapWatchSharesGrantsAndLoads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := natstest.Bus(t, bus.Config{})
	kv := res.SlotGrants
	_, err := kv.Put(ctx, subject.SlotGrantKey("acme", "Alpha"), []byte(`{"v":1,"cap":2,"hosts":{"h1":2}}`))
	require.NoError(t, err)
	_, err = kv.Put(ctx, subject.SlotGrantKey("acme", "Beta"), []byte(`{"v":1,"cap":1,"hosts":{"h2":1}}`))
	require.NoError(t, err)

	c, err := WatchCaps(ctx, res.JS.Conn(), kv)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()

	type seen struct {
		mu   sync.Mutex
		keys []string
	}
	record := func(s *seen) func(e jetstream.KeyValueEntry) {
		return func(e jetstream.KeyValueEntry) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.keys = append(s.keys, e.Operation().String()+" "+e.Key())
		}
	}
	got := func(s *seen) []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]string(nil), s.keys...)
	}
	held := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.held)
	}
	require.Eventually(t, func() bool { return held() == 2 }, 5*time.Second, 10*time.Millisecond, "the watch loads the bucket")

	var alpha, beta seen
	cancelAlpha := c.subscribeGrants([]string{"Alpha"}, record(&alpha))
	cancelBeta := c.subscribeGrants([]string{"Beta"}, record(&beta))
	defer cancelBeta()
	put, del := jetstream.KeyValuePut.String(), jetstream.KeyValueDelete.String()
	alphaKey, betaKey := subject.SlotGrantKey("acme", "Alpha"), subject.SlotGrantKey("acme", "Beta")
	assert.Equal(t, []string{put + " " + alphaKey}, got(&alpha), "Alpha's subscriber gets what is held of Alpha at once")
	assert.Equal(t, []string{put + " " + betaKey}, got(&beta))

	_, err = kv.Put(ctx, subject.SlotGrantKey("other", "Alpha"), []byte(`{"v":1,"cap":1,"hosts":{}}`))
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctx, betaKey))
	otherKey := subject.SlotGrantKey("other", "Alpha")
	require.Eventually(t, func() bool { return len(got(&alpha)) == 2 && len(got(&beta)) == 2 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, put+" "+otherKey, got(&alpha)[1], "a change of another tenant's grant of Alpha")
	assert.Equal(t, del+" "+betaKey, got(&beta)[1], "a deletion")
	assert.Equal(t, 2, held(), "a deleted record is not held")

	cancelAlpha()
	_, err = kv.Put(ctx, alphaKey, []byte(`{"v":1,"cap":2,"hosts":{"h1":1}}`))
	require.NoError(t, err)
	_, err = kv.Put(ctx, subject.SlotGrantKey("acme", "Beta"), []byte(`{"v":1,"cap":1,"hosts":{}}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(got(&beta)) == 3 }, 5*time.Second, 10*time.Millisecond)
	assert.Len(t, got(&alpha), 2, "nothing once cancelled")

	for _, host := range []string{"h1", "h2"} {
		b, err := json.Marshal(inspect.Load{V: inspect.LoadVersion, Host: host,
			Entries: []inspect.LoadEntry{{Tenant: "acme", Agent: "Alpha", Queued: 1}}})
		require.NoError(t, err)
		require.NoError(t, res.JS.Conn().Publish(subject.HostLoad, b))
	}
	require.Eventually(t, func() bool { return c.board.Queued(inspect.Pair{Tenant: "acme", Agent: "Alpha"}, time.Now()) == 2 },
		5*time.Second, 10*time.Millisecond, "both hosts' load reports are on the board")
}
