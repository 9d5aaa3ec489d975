package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Entries reads the current entry of every key of a bucket, oldest revision first; deleted and
// purged keys are left out.
//
// It reads every key that was written before the call, also while others write the bucket. A
// bucket watcher's "initial values done" marker cannot promise that: it follows the per-message
// pending count, which the server may report as zero before the last initial value under
// concurrent writes, so nats.go's ListKeys and a watcher's first nil can end a listing early.
// Entries instead asks the stream's leader for the bucket's newest revision once the watch has
// begun and reads the watch up to that revision: every key written earlier has been delivered by
// then, as its initial value or as a later update.
func Entries(ctx context.Context, kv jetstream.KeyValue) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	upTo, err := NewestRevision(ctx, kv)
	if err != nil {
		return nil, err
	}
	return readUpTo(ctx, kv, w, upTo)
}

// NewestRevision is the revision of the newest write to a bucket (0 when it holds none), as the
// stream's leader knows it. A watch of the whole bucket that began before the call has delivered
// every value written before it once it delivers an entry of that revision or a later one: the
// point at which a cache that follows the bucket has loaded it (the watcher's own nil marker may
// come earlier; see Entries).
//
// In a bucket with a TTL the newest value may expire after the call and before the watch
// delivers it; a watch then reaches that point only with the next write. Such buckets are read
// with Entries only when something writes them often.
func NewestRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := kv.Status(ctx) // stream info: answered by the stream's leader
	if err != nil {
		return 0, fmt.Errorf("reading the newest revision of bucket %s: %w", kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("reading the newest revision of bucket %s: unexpected status %T", kv.Bucket(), st)
	}
	if st := bs.StreamInfo().State; st.Msgs > 0 {
		return st.LastSeq, nil // values expire oldest first: the newest is still there
	}
	return 0, nil
}

// EntriesMatching is Entries for the keys that match one of filters (wildcards allowed); nc
// reaches the stream's leader.
func EntriesMatching(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, filters ...string) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.WatchFiltered(ctx, slices.Clone(filters)) // it prefixes the keys in place
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	var upTo uint64 // the newest matching revision written before the watch began
	for _, f := range filters {
		last, err := LeaderLast(ctx, nc, "KV_"+kv.Bucket(), "$KV."+kv.Bucket()+"."+f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading bucket %s: %w", kv.Bucket(), err)
		}
		upTo = max(upTo, last.Sequence)
	}
	return readUpTo(ctx, kv, w, upTo)
}

// readUpTo reads a watch until the entry at revision upTo or later, and returns the entries of
// the keys that are not deleted, oldest revision first.
func readUpTo(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher, upTo uint64) ([]jetstream.KeyValueEntry, error) {
	current := make(map[string]jetstream.KeyValueEntry)
	for upTo > 0 {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading bucket %s: %w", kv.Bucket(), ctx.Err())
		case e, ok = <-w.Updates():
		}
		if !ok {
			return nil, fmt.Errorf("reading bucket %s: the watch ended", kv.Bucket())
		}
		if e == nil {
			continue // the watcher's own end-of-initial-values marker: not to be relied on
		}
		if e.Operation() == jetstream.KeyValuePut {
			current[e.Key()] = e
		} else {
			delete(current, e.Key())
		}
		if e.Revision() >= upTo {
			break
		}
	}
	out := make([]jetstream.KeyValueEntry, 0, len(current))
	for _, e := range current {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b jetstream.KeyValueEntry) int { return cmp.Compare(a.Revision(), b.Revision()) })
	return out, nil
}

// Keys reads the keys of a bucket, sorted, as Entries finds them.
func Keys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	entries, err := Entries(ctx, kv)
	if err != nil {
		return nil, err
	}
	return sortedKeys(entries), nil
}

// KeysMatching reads the keys of a bucket that match one of filters, sorted, as
// EntriesMatching finds them.
func KeysMatching(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, filters ...string) ([]string, error) {
	entries, err := EntriesMatching(ctx, nc, kv, filters...)
	if err != nil {
		return nil, err
	}
	return sortedKeys(entries), nil
}

func sortedKeys(entries []jetstream.KeyValueEntry) []string {
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Key()
	}
	slices.Sort(keys)
	return keys
}
