package keys_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// replicatedSetup starts a three-node cluster whose keys and tenants buckets have three
// replicas, and returns the bus, a store over them with count user keys of tenant acme, and a
// count of the API errors the cluster answers with.
func replicatedSetup(t *testing.T, count int) (context.Context, *bus.Resources, *keys.Store, []keys.Key, *natstest.APIErrors) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	cl, res := natstest.ClusterBus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	store := keys.NewStore(res.JS, res.Keys, res.Tenants)
	_, err := store.CreateTenant(ctx, "acme")
	require.NoError(t, err)
	var ks []keys.Key
	for i := range count {
		_, k, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: fmt.Sprintf("k%d", i)})
		require.NoError(t, err)
		ks = append(ks, k)
	}
	return ctx, res, store, ks, natstest.WatchAPIErrors(t, cl.URLs())
}

// conflicts is how many writes the cluster refused as compare-and-set conflicts. The refusals
// reach the watching connection on their own time, after the writers have their answers: it
// waits up to 2 s for the first.
func conflicts(t *testing.T, seen *natstest.APIErrors) int {
	t.Helper()
	var stale, racing int
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stale, racing = seen.Count(jetstream.JSErrCodeStreamWrongLastSequence), seen.Count(jetstream.JSErrCodeStreamWrongLastSequenceConstant)
		if stale+racing > 0 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("refusals: %d with code %d, %d with code %d", stale, jetstream.JSErrCodeStreamWrongLastSequence, racing, jetstream.JSErrCodeStreamWrongLastSequenceConstant)
	return stale + racing
}

// TestConcurrentRevocations: admins revoking the same keys at once, on buckets with three
// replicas, all succeed, and all are answered the one revocation time that is stored.
func TestConcurrentRevocations(t *testing.T) {
	const writers, rounds = 8, 5
	ctx, _, store, _, seen := replicatedSetup(t, 0)
	for round := range rounds {
		_, k, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: fmt.Sprint(round)})
		require.NoError(t, err)
		got := make([]keys.Key, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				<-start
				var err error
				got[w], err = store.RevokeID(ctx, k.ID)
				assert.NoError(t, err, "round %d, writer %d", round, w)
			})
		}
		close(start)
		wg.Wait()
		require.False(t, t.Failed())
		stored, err := store.Get(ctx, k.ID)
		require.NoError(t, err)
		require.NotNil(t, stored.RevokedAt, "round %d: the key is revoked", round)
		for w, g := range got {
			if assert.NotNil(t, g.RevokedAt, "round %d, writer %d", round, w) {
				assert.True(t, stored.RevokedAt.Equal(g.RevokedAt.Time), "round %d, writer %d: answered %v, stored %v", round, w, g.RevokedAt, stored.RevokedAt)
			}
		}
	}
	assert.NotZero(t, conflicts(t, seen), "revocations that met a conflict")
}

// TestConcurrentTenantDeletions: admins deleting one tenant at once while others revoke its keys,
// on buckets with three replicas: every deletion succeeds or, when another one finished before
// it began, finds no tenant; every revocation succeeds or finds the key removed with its tenant;
// and the tenant ends deleted with none of its keys left. The writers race on a new tenant in each round, until one round's writes met a
// conflict (on a busy machine they may come one after another).
func TestConcurrentTenantDeletions(t *testing.T) {
	const deleters, keyCount, rounds = 8, 4, 5
	ctx, _, store, _, seen := replicatedSetup(t, 0)
	for round := range rounds {
		tenant := fmt.Sprintf("acme-%d", round)
		_, err := store.CreateTenant(ctx, tenant)
		require.NoError(t, err)
		var ks []keys.Key
		for i := range keyCount {
			_, k, err := store.Create(ctx, keys.NewKey{Tenant: tenant, Role: keys.RoleUser, Name: fmt.Sprintf("k%d", i)})
			require.NoError(t, err)
			ks = append(ks, k)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var deleted atomic.Int32
		for w := range deleters {
			wg.Go(func() {
				<-start
				err := store.DeleteTenant(ctx, tenant)
				if err == nil {
					deleted.Add(1)
					return
				}
				assert.ErrorIs(t, err, keys.ErrUnknownTenant, "round %d, deleter %d", round, w)
			})
		}
		for _, k := range ks {
			wg.Go(func() {
				<-start
				_, err := store.RevokeID(ctx, k.ID)
				if !errors.Is(err, keys.ErrUnknownKey) {
					assert.NoError(t, err, "round %d: revoking %s", round, k.Name)
				}
			})
		}
		close(start)
		wg.Wait()
		assert.NotZero(t, deleted.Load(), "round %d: deletions that succeeded", round)
		_, err = store.GetTenant(ctx, tenant)
		assert.ErrorIs(t, err, keys.ErrUnknownTenant)
		all, err := store.Keys(ctx, tenant)
		require.NoError(t, err)
		require.Empty(t, all, "round %d: keys of the deleted tenant", round)
		for _, k := range ks {
			_, err := store.Get(ctx, k.ID)
			assert.ErrorIs(t, err, keys.ErrUnknownKey, "round %d: key %s", round, k.Name)
		}
		if t.Failed() || conflicts(t, seen) > 0 {
			return
		}
	}
	t.Errorf("no write met a conflict in %d rounds", rounds)
}

// TestRevocationGivesUpOnPersistentConflicts: a revocation whose every write loses a
// compare-and-set race gives up once bus.ConflictPatience has passed since the first, with
// bus.ErrConflictsPersisted, and the key stays as it was.
func TestRevocationGivesUpOnPersistentConflicts(t *testing.T) {
	ctx, res, store, _ := setup(t)
	_, k, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser})
	require.NoError(t, err)
	losing := keys.NewStore(res.JS, alwaysLosing{res.Keys}, res.Tenants)
	began := time.Now()
	_, err = losing.RevokeID(ctx, k.ID)
	took := time.Since(began)
	require.ErrorIs(t, err, bus.ErrConflictsPersisted)
	assert.ErrorIs(t, err, jetstream.ErrKeyRevisionMismatch, "the last conflict is kept")
	assert.GreaterOrEqual(t, took, bus.ConflictPatience)
	assert.Less(t, took, bus.ConflictPatience+time.Second)
	stored, err := store.Get(ctx, k.ID)
	require.NoError(t, err)
	assert.Nil(t, stored.RevokedAt)
}

// alwaysLosing is a bucket whose every Update loses a compare-and-set race.
type alwaysLosing struct{ jetstream.KeyValue }

func (alwaysLosing) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, jetstream.ErrKeyRevisionMismatch
}

// TestAuthenticatorLoadsWhileKeysAreWritten: authenticators started while the keys bucket is
// written all the time (keys created and revoked, the records of existing keys written again as
// they are), on buckets with three replicas, know on return every key created before they
// started.
func TestAuthenticatorLoadsWhileKeysAreWritten(t *testing.T) {
	const before, writers, starts = 12, 4, 15
	ctx, res, store, _, _ := replicatedSetup(t, 0)
	var secrets []string
	for i := range before {
		secret, _, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: fmt.Sprintf("before-%d", i)})
		require.NoError(t, err)
		secrets = append(secrets, secret)
	}
	records, err := bus.Entries(ctx, res.JS, res.Keys)
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; !stop.Load(); n++ {
			e := records[n%len(records)]
			if _, err := res.Keys.Put(ctx, e.Key(), e.Value()); err != nil && ctx.Err() == nil {
				t.Errorf("rewriting %s: %v", e.Key(), err)
				return
			}
		}
	})
	for w := range writers {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				_, k, err := store.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: fmt.Sprintf("w%d-%d", w, n)})
				if err == nil {
					_, err = store.RevokeID(ctx, k.ID)
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	for s := range starts {
		auth, err := keys.NewAuthenticator(ctx, res.Keys, "", nil)
		require.NoError(t, err)
		for i, secret := range secrets {
			_, err := auth.Authenticate(secret)
			assert.NoError(t, err, "start %d: key %d on return", s, i)
		}
		require.NoError(t, auth.Close())
	}
}
