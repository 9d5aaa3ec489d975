package subscription_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/subscription"
)

// TestConcurrentCreatesKeepTheLimit: of many subscriptions of a tenant created at once, on the
// stores of several processes, no more than the limit are kept (all may give way), every
// refusal is ErrLimit, and those that gave way left nothing: the tenant creates up to its limit
// after.
func TestConcurrentCreatesKeepTheLimit(t *testing.T) {
	t.Parallel()
	const limit, tries = 2, 10
	f := newFixture(t, subscription.Config{MaxPerTenant: limit})
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		made []string
	)
	for range tries {
		store := f.host()
		wg.Go(func() {
			sub, err := store.Create(ctx, "acme", subscription.New{URL: "http://127.0.0.1:9/x", Events: []string{"message.outgoing"}})
			if !assert.True(t, err == nil || errors.Is(err, subscription.ErrLimit), "Create: %v", err) || err != nil {
				return
			}
			mu.Lock()
			made = append(made, sub.ID)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, len(made), limit, "subscriptions created")
	for len(made) < limit {
		sub, err := f.store.Create(ctx, "acme", subscription.New{URL: "http://127.0.0.1:9/x", Events: []string{"message.outgoing"}})
		if !assert.NoError(t, err, "a subscription after the race, with room left") {
			break
		}
		made = append(made, sub.ID)
	}
	have, err := f.store.List(ctx, "acme")
	assert.NoError(t, err)
	var ids []string
	for _, s := range have {
		ids = append(ids, s.ID)
	}
	assert.ElementsMatch(t, made, ids, "acme's subscriptions")
	n := 0
	for range f.res.Messages.ListConsumers(ctx).Info() {
		n++
	}
	assert.Equal(t, len(made), n, "consumers: one per subscription kept")
}
