package remote_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/remote"
)

// TestConcurrentReplaces: admins replacing one registration at once all succeed, the last writer
// winning, and the registration ends as one of theirs, with its creation time and secret kept.
func TestConcurrentReplaces(t *testing.T) {
	const writers, rounds = 8, 10
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s := remote.NewStore(res, nil, 0)
	first, err := s.Put(ctx, "", remote.Registration{Name: "Racy", URL: "http://127.0.0.1:10/agent", Chat: true}, false)
	require.NoError(t, err)
	urls := map[string]bool{}
	for round := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			url := fmt.Sprintf("http://127.0.0.1:10/agent-%d-%d", round, w)
			urls[url] = true
			wg.Go(func() {
				<-start
				got, err := s.Put(ctx, "", remote.Registration{Name: "Racy", URL: url, Chat: true}, true)
				if assert.NoError(t, err, "round %d, writer %d", round, w) {
					assert.Equal(t, url, got.URL)
					assert.Equal(t, first.Secret, got.Secret, "the secret is kept")
				}
			})
		}
		close(start)
		wg.Wait()
		require.False(t, t.Failed())
	}
	got, err := s.Get(ctx, "", "Racy")
	require.NoError(t, err)
	assert.True(t, urls[got.URL], "the registration is one writer's: %s", got.URL)
	assert.Equal(t, first.Secret, got.Secret, "secret")
	assert.Equal(t, first.CreatedAt, got.CreatedAt, "createdAt")
}
