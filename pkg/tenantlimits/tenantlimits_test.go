package tenantlimits_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.IgnoredLeaks()...)
}

func ptr[T any](v T) *T { return &v }

// TestValidate: every value is checked against its bounds, and the refusal names the field as
// the JSON has it.
func TestValidate(t *testing.T) {
	long := strings.Repeat("a", 257)
	for _, tc := range []struct {
		name   string
		limits tenantlimits.Limits
		field  string // "" when valid
	}{
		{"nothing", tenantlimits.Limits{}, ""},
		{"everything", tenantlimits.Limits{
			Values:  tenantlimits.Values{Weight: ptr(3), MaxConcurrent: ptr(8), MaxQueued: ptr(100), Rate: &tenantlimits.Rate{PerSecond: 50, Burst: 100}},
			KeyRate: &tenantlimits.Rate{PerSecond: 0.5}, MaxBytes: ptr(int64(1 << 30)), MaxInstances: ptr(int64(0)),
			Agents: map[string]tenantlimits.Values{"Echo": {Weight: ptr(1000), MaxQueued: ptr(0)}},
		}, ""},
		{"weight 0", tenantlimits.Limits{Values: tenantlimits.Values{Weight: ptr(0)}}, "weight"},
		{"weight too high", tenantlimits.Limits{Values: tenantlimits.Values{Weight: ptr(1001)}}, "weight"},
		{"negative cap", tenantlimits.Limits{Values: tenantlimits.Values{MaxConcurrent: ptr(-1)}}, "maxConcurrent"},
		{"queue too long", tenantlimits.Limits{Values: tenantlimits.Values{MaxQueued: ptr(tenantlimits.MaxQueuedCap + 1)}}, "maxQueued"},
		{"negative rate", tenantlimits.Limits{Values: tenantlimits.Values{Rate: &tenantlimits.Rate{PerSecond: -1}}}, "rate.perSecond"},
		{"negative burst", tenantlimits.Limits{KeyRate: &tenantlimits.Rate{PerSecond: 1, Burst: -1}}, "keyRate.burst"},
		{"negative bytes", tenantlimits.Limits{MaxBytes: ptr(int64(-1))}, "maxBytes"},
		{"too many instances", tenantlimits.Limits{MaxInstances: ptr(int64(tenantlimits.MaxInstanceQuota + 1))}, "maxInstances"},
		{"an agent's weight", tenantlimits.Limits{Agents: map[string]tenantlimits.Values{"Echo": {Weight: ptr(0)}}}, "agents.Echo.weight"},
		{"an agent's rate", tenantlimits.Limits{Agents: map[string]tenantlimits.Values{"Echo": {Rate: &tenantlimits.Rate{PerSecond: 2e6}}}}, "agents.Echo.rate.perSecond"},
		{"an empty agent name", tenantlimits.Limits{Agents: map[string]tenantlimits.Values{"": {}}}, "agents"},
		{"a long agent name", tenantlimits.Limits{Agents: map[string]tenantlimits.Values{long: {}}}, "agents"},
		{"a control character", tenantlimits.Limits{Agents: map[string]tenantlimits.Values{"a\nb": {}}}, "agents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Validate()
			if tc.field == "" {
				assert.NoError(t, err)
				return
			}
			var fe *tenantlimits.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			assert.NotEmpty(t, fe.Reason)
		})
	}
}

// TestResolve: an agent's value wins over the tenant's, the tenant's over the default; the
// tenant's rate is not an agent's.
func TestResolve(t *testing.T) {
	l := tenantlimits.Limits{
		Values: tenantlimits.Values{Weight: ptr(3), MaxQueued: ptr(100), Rate: &tenantlimits.Rate{PerSecond: 50}},
		Agents: map[string]tenantlimits.Values{"Echo": {MaxConcurrent: ptr(2), MaxQueued: ptr(0), Rate: &tenantlimits.Rate{PerSecond: 5}}},
	}
	d := tenantlimits.Defaults{MaxConcurrent: 64, MaxQueued: 1000}
	assert.Equal(t, tenantlimits.Effective{Weight: 3, MaxConcurrent: 2, MaxQueued: 0, Rate: tenantlimits.Rate{PerSecond: 5}}, l.Resolve("Echo", d))
	assert.Equal(t, tenantlimits.Effective{Weight: 3, MaxConcurrent: 64, MaxQueued: 100}, l.Resolve("Other", d))
	assert.Equal(t, tenantlimits.Effective{Weight: 1, MaxConcurrent: 64, MaxQueued: 1000}, tenantlimits.Limits{}.Resolve("Echo", d))
}

// bucketWithAcme makes agentbus's buckets on a server of the test's and gives tenant acme a
// weight of 2, set by admin.
func bucketWithAcme(ctx context.Context, t *testing.T) (*bus.Resources, *tenantlimits.Store) {
	t.Helper()
	res := natstest.Bus(t, bus.Config{})
	store := tenantlimits.NewStore(res.TenantLimits)
	_, err := store.Put(ctx, "acme", tenantlimits.Limits{Values: tenantlimits.Values{Weight: ptr(2)}}, "admin")
	require.NoError(t, err)
	return res, store
}

// TestCacheFollowsTheBucket: a cache started on a bucket holds its records, takes a write or a
// removal in within moments and tells of each; a record without values is removed.
func TestCacheFollowsTheBucket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, store := bucketWithAcme(ctx, t)

	var mu sync.Mutex
	var changed []string
	cache, err := tenantlimits.Watch(ctx, res.TenantLimits, func(_ *tenantlimits.Cache, tenant string) {
		mu.Lock()
		defer mu.Unlock()
		changed = append(changed, tenant)
	}, nil)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cache.Close()) }()
	e, ok := cache.Get("acme")
	require.True(t, ok, "loaded")
	assert.Equal(t, 2, *e.Limits.Weight)
	assert.Equal(t, "admin", e.UpdatedBy)
	_, ok = cache.Get("beta")
	assert.False(t, ok)

	rev, err := store.Put(ctx, "beta", tenantlimits.Limits{Agents: map[string]tenantlimits.Values{"Echo": {MaxQueued: ptr(7)}}}, "k1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return cache.Revision() >= rev }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 7, *cache.Limits("beta").Agents["Echo"].MaxQueued)
	assert.Equal(t, []string{"acme", "beta"}, cache.Tenants())
	got, err := store.Get(ctx, "beta")
	require.NoError(t, err)
	assert.Equal(t, rev, got.Revision)

	rev, err = store.Put(ctx, "acme", tenantlimits.Limits{Agents: map[string]tenantlimits.Values{"Echo": {}}}, "k1")
	require.NoError(t, err, "a record without values is a removal")
	require.Eventually(t, func() bool { return cache.Revision() >= rev }, 5*time.Second, time.Millisecond)
	_, ok = cache.Get("acme")
	assert.False(t, ok)
	_, err = store.Get(ctx, "acme")
	assert.ErrorIs(t, err, tenantlimits.ErrNotFound)
	require.NoError(t, store.Delete(ctx, "nobody"), "removing what is not there")
	mu.Lock()
	assert.Equal(t, []string{"acme", "beta", "acme"}, changed)
	mu.Unlock()
}

// TestSubscribe: a subscriber of a shared cache hears of each tenant the cache holds, then of
// each change, as Watch's own callback does, and of none once it cancelled.
func TestSubscribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, store := bucketWithAcme(ctx, t)
	cache, err := tenantlimits.Watch(ctx, res.TenantLimits, nil, nil)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cache.Close()) }()

	var mu sync.Mutex
	heard := map[string][]string{}
	hear := func(who string) func(*tenantlimits.Cache, string) {
		return func(c *tenantlimits.Cache, tenant string) {
			assert.Same(t, cache, c)
			mu.Lock()
			defer mu.Unlock()
			heard[who] = append(heard[who], tenant)
		}
	}
	heardBy := func(who string) []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(heard[who])
	}
	stopA := cache.Subscribe(hear("a"))
	stopB := cache.Subscribe(hear("b"))
	defer stopB()
	assert.Equal(t, []string{"acme"}, heardBy("a"), "the records held, at once")

	_, err = store.Put(ctx, "beta", tenantlimits.Limits{Values: tenantlimits.Values{Weight: ptr(3)}}, "admin")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(heardBy("a")) == 2 && len(heardBy("b")) == 2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{"acme", "beta"}, heardBy("a"))
	assert.Equal(t, []string{"acme", "beta"}, heardBy("b"))

	stopA()
	_, err = store.Put(ctx, "gamma", tenantlimits.Limits{Values: tenantlimits.Values{Weight: ptr(4)}}, "admin")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(heardBy("b")) == 3 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{"acme", "beta", "gamma"}, heardBy("b"))
	assert.Equal(t, []string{"acme", "beta"}, heardBy("a"), "nothing after cancel")
}
