package remote_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/outbound"
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

// TestConcurrentRegistrationsKeepTheLimit: of many remote agents of a tenant registered at once,
// on the stores of several processes, no more than the limit are kept (all may give way), every
// refusal is ErrLimit, and those that gave way left nothing: the tenant registers up to its
// limit after, and not one more.
func TestConcurrentRegistrationsKeepTheLimit(t *testing.T) {
	const limit, tries = 2, 8
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	require.NoError(t, err)
	register := func(s *remote.Store, name string) error {
		_, err := s.Put(ctx, "acme", remote.Registration{Name: name, URL: "http://127.0.0.1:10/" + name, Chat: true}, false)
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		made []string
	)
	for i := range tries {
		s := remote.NewStore(res, allow, limit)
		name := fmt.Sprintf("Racy%d", i)
		wg.Go(func() {
			err := register(s, name)
			if !assert.True(t, err == nil || errors.Is(err, remote.ErrLimit), "Put: %v", err) || err != nil {
				return
			}
			mu.Lock()
			made = append(made, name)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, len(made), limit, "agents registered")
	s := remote.NewStore(res, allow, limit)
	for i := 0; len(made) < limit; i++ {
		name := fmt.Sprintf("After%d", i)
		if !assert.NoError(t, register(s, name), "an agent after the race, with room left") {
			break
		}
		made = append(made, name)
	}
	assert.ErrorIs(t, register(s, "OneMore"), remote.ErrLimit, "an agent past the limit after the race")
	have, err := s.List(ctx, "acme")
	require.NoError(t, err)
	var names []string
	for _, r := range have {
		names = append(names, r.Name)
	}
	assert.ElementsMatch(t, made, names, "acme's agents")
}
