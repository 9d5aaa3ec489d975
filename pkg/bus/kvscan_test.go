package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// TestEntriesWhileWritten: on a bucket with three replicas whose keys writers keep updating,
// every listing holds every key written before it began, each once, and none that was deleted
// before it; the filtered listing holds the matching keys only.
func TestEntriesWhileWritten(t *testing.T) {
	const keys, writers, listings = 8, 8, 40
	_, js, ctx := withCluster(t, 60*time.Second)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "scan", Replicas: 3})
	require.NoError(t, err)

	empty, err := bus.Entries(ctx, js, kv)
	require.NoError(t, err)
	assert.Empty(t, empty, "an empty bucket")

	for i := range keys {
		_, err := kv.Put(ctx, key(i), []byte("0"))
		require.NoError(t, err)
	}
	_, err = kv.Put(ctx, "gone.0", []byte("x"))
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctx, "gone.0"))

	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for n := 1; !stop.Load(); n++ {
				if _, err := kv.Put(ctx, key((w+n)%keys), []byte(strconv.Itoa(n))); err != nil && ctx.Err() == nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })

	for l := range listings {
		entries, err := bus.Entries(ctx, js, kv)
		require.NoError(t, err)
		seen := map[string]bool{}
		for i, e := range entries {
			require.False(t, seen[e.Key()], "listing %d: %s twice", l, e.Key())
			seen[e.Key()] = true
			if i > 0 {
				require.Greater(t, e.Revision(), entries[i-1].Revision(), "listing %d: oldest revision first", l)
			}
		}
		require.Len(t, entries, keys, "listing %d: %v", l, seen)

		matching, err := bus.Entries(ctx, js, kv, "k.1", "k.2", "gone.>")
		require.NoError(t, err)
		var names []string
		for _, e := range matching {
			names = append(names, e.Key())
		}
		slices.Sort(names)
		require.Equal(t, []string{"k.1", "k.2"}, names, "listing %d", l)
	}
}

func key(i int) string { return fmt.Sprintf("k.%d", i) }

// silentWatch is a bucket whose watches deliver nothing, as a watch whose consumer stalls.
type silentWatch struct{ jetstream.KeyValue }

func (silentWatch) WatchFiltered(context.Context, []string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return silentWatcher{make(chan jetstream.KeyValueEntry)}, nil
}

type silentWatcher struct{ ch chan jetstream.KeyValueEntry }

func (w silentWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w silentWatcher) Stop() error                             { return nil }

// TestScanReadsWhatItsWatchDoesNotDeliver: keys the watch does not deliver are read directly
// after a pause; a deleted one is left out.
func TestScanReadsWhatItsWatchDoesNotDeliver(t *testing.T) {
	bus.SetScanIdle(t, 50*time.Millisecond)
	_, js, ctx := withStream(t, "UNUSED", "unused.>")
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "silent"})
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err := kv.Put(ctx, k, []byte(k))
		require.NoError(t, err)
	}
	require.NoError(t, kv.Delete(ctx, "b"))
	entries, err := bus.Entries(ctx, js, silentWatch{kv})
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Key()+"="+string(e.Value()))
	}
	assert.Equal(t, []string{"a=a", "c=c"}, got)
}

// laggingWatch is a bucket whose watches deliver what a watch on a replica that lags behind the
// leader would: first the entries it recorded before the bucket's last writes, then, a moment
// later, those writes.
type laggingWatch struct {
	jetstream.KeyValue
	stale, later []jetstream.KeyValueEntry
}

func (l laggingWatch) WatchFiltered(context.Context, []string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	ch := make(chan jetstream.KeyValueEntry, len(l.stale)+len(l.later)+1)
	for _, e := range l.stale {
		ch <- e
	}
	ch <- nil // the watch's own marker, as a lagging watch sends it
	go func() {
		time.Sleep(200 * time.Millisecond)
		for _, e := range l.later {
			ch <- e
		}
	}()
	return silentWatcher{ch}, nil
}

// TestScanWaitsForTheLeadersNewestRevision: a watch that begins with a key's entry older than
// what the leader holds (its value, where the leader holds a delete marker or a newer value) is
// read until it delivered the leader's newest revision, so the listing holds the current entries.
func TestScanWaitsForTheLeadersNewestRevision(t *testing.T) {
	_, js, ctx := withStream(t, "UNUSED", "unused.>")
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "lag"})
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "gone"} {
		_, err := kv.Put(ctx, k, []byte(k))
		require.NoError(t, err)
	}
	// What a replica that has not applied the last two writes delivers first.
	w, err := kv.WatchAll(ctx)
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	var stale, later []jetstream.KeyValueEntry
	for e := range w.Updates() {
		if e == nil {
			break
		}
		stale = append(stale, e)
	}
	require.NoError(t, kv.Delete(ctx, "gone"))
	_, err = kv.Put(ctx, "b", []byte("b2"))
	require.NoError(t, err)
	for len(later) < 2 {
		later = append(later, <-w.Updates())
	}

	entries, err := bus.Entries(ctx, js, laggingWatch{KeyValue: kv, stale: stale, later: later})
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Key()+"="+string(e.Value()))
	}
	assert.Equal(t, []string{"a=a", "b=b2"}, got, "the current entries, not the lagging watch's first ones")
}

// followed runs bus.Follow on a watch of kv up to upTo and returns a channel of the keys it
// applies, each with "*" when applied while loading, the loaded channel, and a stop that ends
// the watch and waits for Follow to return.
func followed(t *testing.T, ctx context.Context, kv jetstream.KeyValue, upTo func() uint64) (<-chan string, <-chan struct{}, func()) {
	t.Helper()
	w, err := kv.WatchAll(ctx)
	require.NoError(t, err)
	applied := make(chan string, 100)
	loaded := make(chan struct{})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		bus.Follow(w, upTo(), loaded, func(e jetstream.KeyValueEntry, loading bool) {
			k := e.Key()
			if loading {
				k += "*"
			}
			applied <- k
		})
	}()
	stop := func() {
		require.NoError(t, w.Stop())
		<-returned
	}
	t.Cleanup(func() { _ = w.Stop() })
	return applied, loaded, stop
}

// TestFollow: a cache that follows a bucket is loaded once the newest revision read after its
// watch began arrived, at once for an empty bucket, at the watcher's marker with AtMarker, and
// when the watch ends in any case; entries before that are marked as loading.
func TestFollow(t *testing.T) {
	_, js, ctx := withStream(t, "UNUSED", "unused.>")
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "follow"})
	require.NoError(t, err)
	newest := func() uint64 {
		rev, err := bus.NewestRevision(ctx, kv)
		require.NoError(t, err)
		return rev
	}

	t.Run("empty", func(t *testing.T) {
		_, loaded, stop := followed(t, ctx, kv, newest)
		defer stop()
		select {
		case <-loaded:
		case <-time.After(5 * time.Second):
			t.Fatal("an empty bucket is not loaded at once")
		}
	})

	for _, k := range []string{"a", "b", "c"} {
		_, err := kv.Put(ctx, k, []byte(k))
		require.NoError(t, err)
	}
	late := 0
	for _, tc := range []struct {
		name string
		upTo func() uint64
	}{{"newest", newest}, {"marker", func() uint64 { return bus.AtMarker }}} {
		t.Run(tc.name, func(t *testing.T) {
			applied, loaded, stop := followed(t, ctx, kv, tc.upTo)
			defer stop()
			select {
			case <-loaded:
			case <-time.After(5 * time.Second):
				t.Fatal("not loaded")
			}
			// Entries are applied before loaded closes: those of the load are all there.
			assert.Equal(t, []string{"a*", "b*", "c*"}, []string{<-applied, <-applied, <-applied})
			require.Empty(t, applied)
			// Written again after the load: not applied as loading.
			late++
			_, err := kv.Put(ctx, "c", []byte(strconv.Itoa(late)))
			require.NoError(t, err)
			select {
			case k := <-applied:
				assert.Equal(t, "c", k, "written after the load")
			case <-time.After(5 * time.Second):
				t.Fatal("a later write was not applied")
			}
		})
	}

	t.Run("watch ends first", func(t *testing.T) {
		_, loaded, stop := followed(t, ctx, kv, func() uint64 { return newest() + 1000 })
		select {
		case <-loaded:
			t.Fatal("loaded before the revision arrived")
		case <-time.After(100 * time.Millisecond):
		}
		stop()
		select {
		case <-loaded:
		default:
			t.Fatal("Follow returned without closing loaded")
		}
	})
}

// TestFollowContext: FollowContext applies what the watch delivers and returns nil when its
// context ends, ErrWatchEnded when the watch stops first, and closes loaded in either case.
func TestFollowContext(t *testing.T) {
	_, js, ctx := withStream(t, "UNUSED", "unused.>")
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "followctx"})
	require.NoError(t, err)
	_, err = kv.Put(ctx, "a", []byte("a"))
	require.NoError(t, err)

	for _, end := range []string{"context", "watch"} {
		t.Run(end, func(t *testing.T) {
			w, err := kv.WatchAll(ctx)
			require.NoError(t, err)
			defer func() { _ = w.Stop() }()
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			applied := make(chan string, 10)
			loaded := make(chan struct{})
			returned := make(chan error, 1)
			go func() {
				returned <- bus.FollowContext(fctx, w, bus.AtMarker, loaded, func(e jetstream.KeyValueEntry, _ bool) { applied <- e.Key() })
			}()
			select {
			case k := <-applied:
				assert.Equal(t, "a", k)
			case <-time.After(5 * time.Second):
				t.Fatal("nothing applied")
			}
			<-loaded
			if end == "context" {
				cancel()
			} else {
				require.NoError(t, w.Stop())
			}
			select {
			case err := <-returned:
				if end == "context" {
					assert.NoError(t, err)
				} else {
					assert.ErrorIs(t, err, bus.ErrWatchEnded)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("FollowContext did not return")
			}
		})
	}
}

// TestDropTombstone: the marker of a deleted or purged key goes, with what is older of the key,
// so that a new watch no longer sees the key; a key holding a value keeps it and its history,
// and so does a key written again after its removal.
func TestDropTombstone(t *testing.T) {
	srv := natstest.Server(t, "")
	js := natstest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "tombstones", History: 3})
	require.NoError(t, err)
	for _, k := range []string{"deleted", "purged", "live"} {
		_, err := kv.Put(ctx, k, []byte("v1"))
		require.NoError(t, err)
		_, err = kv.Put(ctx, k, []byte("v2"))
		require.NoError(t, err)
	}
	require.NoError(t, kv.Delete(ctx, "deleted"))
	require.NoError(t, kv.Purge(ctx, "purged"))
	watched := func() []string {
		w, err := kv.WatchAll(ctx)
		require.NoError(t, err)
		defer func() { _ = w.Stop() }()
		var keys []string
		for e := range w.Updates() {
			if e == nil {
				break
			}
			keys = append(keys, e.Key()+":"+e.Operation().String())
		}
		slices.Sort(keys)
		return keys
	}
	all := []string{"deleted:KeyValueDeleteOp", "live:KeyValuePutOp", "purged:KeyValuePurgeOp"}
	require.Equal(t, all, watched())

	wait, err := bus.DropTombstone(ctx, js, "tombstones", "deleted", time.Hour)
	require.NoError(t, err)
	assert.Greater(t, wait, 59*time.Minute, "a marker younger than asked stays")
	require.Equal(t, all, watched())
	for _, k := range []string{"deleted", "purged", "live", "never"} {
		wait, err := bus.DropTombstone(ctx, js, "tombstones", k, 0)
		require.NoError(t, err)
		assert.Zero(t, wait)
	}
	assert.Equal(t, []string{"live:KeyValuePutOp"}, watched(), "the markers and what came before them are gone")
	hist, err := kv.History(ctx, "live")
	require.NoError(t, err)
	assert.Len(t, hist, 2, "a live key keeps its history")

	_, err = kv.Create(ctx, "deleted", []byte("again"))
	require.NoError(t, err, "the name is free")
	_, err = bus.DropTombstone(ctx, js, "tombstones", "deleted", 0)
	require.NoError(t, err)
	e, err := kv.Get(ctx, "deleted")
	require.NoError(t, err)
	assert.Equal(t, "again", string(e.Value()))
}
