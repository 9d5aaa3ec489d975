package natstest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/retry"
)

// CountEvents has writers count events on the instance record of the tenant's workflow wf, each
// from the revision it last wrote or read and pausing after a conflict (bus.ConflictBackoff), as
// hosts do, until the run is no longer running or stop is called; it returns once they have
// written a few times. A writer that keeps losing starts its pauses over rather than give up.
// After each of its writes a writer pauses for up to writers × bus.ConflictPolicy.Max, as a host
// does between the requests it counts: the record then gets a write every few milliseconds, and
// conflicts, but no writer streaks on from the revision it has just written, which would leave
// another write (a rewind, a completion) no opening. stop waits for the writers and returns how
// many writes they made.
func CountEvents(t testing.TB, ctx context.Context, store *instance.Store, tenant, wf string, writers int) (stop func() int64) {
	t.Helper()
	first, err := store.Get(ctx, tenant, wf)
	require.NoError(t, err)
	var writes atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rec := first
			var backoff bus.ConflictBackoff
			for rec.Status == instance.Running && !done.Load() {
				rec.Events++
				saved, err := store.Put(ctx, rec)
				if err == nil {
					rec = saved
					writes.Add(1)
					backoff = bus.ConflictBackoff{}
					_ = retry.Sleep(ctx, rand.N(time.Duration(writers)*bus.ConflictPolicy.Max))
					continue
				}
				if !assert.ErrorIs(t, err, instance.ErrConflict, "%s: writer %d", wf, w) {
					return
				}
				if errors.Is(backoff.Wait(ctx), bus.ErrConflictsPersisted) {
					backoff = bus.ConflictBackoff{}
				}
				if rec, err = store.Get(ctx, tenant, wf); !assert.NoError(t, err, "%s: writer %d", wf, w) {
					return
				}
			}
		})
	}
	for writes.Load() < int64(writers) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	return func() int64 {
		done.Store(true)
		wg.Wait()
		return writes.Load()
	}
}
