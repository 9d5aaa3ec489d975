package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// scanIdle is how long Scan waits for the watch's next entry before it reads the keys it still
// waits for directly.
var scanIdle = 2 * time.Second

// Scan calls fn with the entries of a bucket's keys that match one of filters (wildcards
// allowed; every key when there are none), as a watch of them delivers them, oldest revision
// first, until it has given every key that held a value or a delete marker when Scan began, at
// that revision or a later one. A key written meanwhile may come more than once, its later
// entries after the earlier; a deleted or purged key comes as an entry whose Operation is not
// jetstream.KeyValuePut. An error of fn ends Scan with it.
//
// A watch's own "initial values done" marker cannot promise that: it follows the per-message
// pending count, which the server may report as zero before the last initial value under
// concurrent writes, so nats.go's ListKeys and a watcher's first nil can end a listing early.
// Scan instead asks the stream's leader which keys hold a message once the watch has begun, and
// reads the watch until it has delivered each of them; a key whose message went away unseen (a
// bucket with a TTL) is read directly after a pause of the watch. In a replicated bucket the
// watch's consumer may run on a replica that lags behind the leader, and begin with a key's
// older entry (a value the leader already holds a delete marker for): Scan also asks the leader
// for the newest revision of a matching key and reads the watch until it has delivered that
// revision or a later one, and with it every entry before it.
func Scan(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, filters []string, fn func(jetstream.KeyValueEntry) error) error {
	if len(filters) == 0 {
		filters = []string{">"}
	}
	w, err := kv.WatchFiltered(ctx, slices.Clone(filters)) // it prefixes the filters in place
	if err != nil {
		return fmt.Errorf("reading bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	waiting, newest, err := keysHeld(ctx, js, kv.Bucket(), filters)
	if err != nil {
		return fmt.Errorf("reading bucket %s: %w", kv.Bucket(), err)
	}
	var seen uint64 // the newest revision the watch delivered
	// direct holds the revisions of the keys read directly: the watch's older entries of them
	// are not given.
	direct := make(map[string]uint64)
	idle := time.NewTimer(scanIdle)
	defer idle.Stop()
	for len(waiting) > 0 || seen < newest {
		select {
		case <-ctx.Done():
			return fmt.Errorf("reading bucket %s: %w", kv.Bucket(), ctx.Err())
		case <-idle.C:
			if len(waiting) == 0 {
				return nil // the newest revision went away unseen (a TTL, a purge)
			}
			if err := readDirectly(ctx, kv, waiting, direct, fn); err != nil {
				return err
			}
			idle.Reset(scanIdle)
			continue
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("reading bucket %s: the watch ended", kv.Bucket())
			}
			if e == nil {
				continue // the watch's own marker: not to be relied on
			}
			seen = max(seen, e.Revision())
			if rev, ok := direct[e.Key()]; ok && e.Revision() <= rev {
				continue
			}
			if err := fn(e); err != nil {
				return err
			}
			delete(waiting, e.Key())
			idle.Reset(scanIdle)
		}
	}
	return nil
}

// keysHeld returns the keys of the bucket that match one of filters and hold a message (a value
// or a delete marker), and the newest revision of those keys, as the stream's leader answers.
func keysHeld(ctx context.Context, js jetstream.JetStream, bucket string, filters []string) (keys map[string]bool, newest uint64, err error) {
	name := subject.KVStream(bucket)
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	prefix := subject.KVKeyPrefix(bucket)
	keys = make(map[string]bool)
	for _, f := range filters {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+f))
		if err != nil {
			return nil, 0, err
		}
		for subj := range info.State.Subjects {
			keys[strings.TrimPrefix(subj, prefix)] = true
		}
		if len(info.State.Subjects) == 0 {
			continue
		}
		last, err := LeaderLast(ctx, js.Conn(), name, prefix+f)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound): // gone since the info was read
		case err != nil:
			return nil, 0, err
		default:
			newest = max(newest, last.Sequence)
		}
	}
	return keys, newest, nil
}

// readDirectly reads the keys Scan still waits for from the bucket, gives fn those that hold a
// value, notes their revisions in direct and forgets them all.
func readDirectly(ctx context.Context, kv jetstream.KeyValue, waiting map[string]bool, direct map[string]uint64, fn func(jetstream.KeyValueEntry) error) error {
	for key := range waiting {
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("reading %s of bucket %s: %w", key, kv.Bucket(), err)
		default:
			direct[key] = e.Revision()
			if err := fn(e); err != nil {
				return err
			}
		}
		delete(waiting, key)
	}
	return nil
}

// NewestRevision is the revision of the newest write to a bucket (0 when it holds none), as the
// stream's leader knows it. A watch of the whole bucket that began before the call has delivered
// the values written before it once it delivers an entry of that revision or a later one, but
// for a key written again after the call before the watch delivered it, which comes a moment
// later with its new value: the point at which a cache that follows the bucket has loaded it
// (the watcher's own nil marker may come much earlier; see Scan, which waits for every key).
//
// In a bucket with a TTL the newest value may expire after the call and before the watch
// delivers it; a watch then reaches that point only with the next write.
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

// AtMarker, as the revision Follow waits for, makes it count a bucket loaded at the watcher's own
// end-of-initial-values marker: for a bucket whose values expire and are all written again
// within moments (heartbeats), where NewestRevision may name a value that expires unseen.
const AtMarker = math.MaxUint64

// Follow hands every entry a watch of a whole bucket delivers to apply, in order, with loading
// set while the bucket is not loaded yet, and closes loaded once it is: once an entry of
// revision upTo or later arrived (upTo from NewestRevision, read after the watch began), at
// once when upTo is 0, at the watcher's own marker when it is AtMarker; loaded may be nil. It
// returns when the watch's updates end (the watch stopped), having closed loaded by then in any
// case.
func Follow(w jetstream.KeyWatcher, upTo uint64, loaded chan<- struct{}, apply func(e jetstream.KeyValueEntry, loading bool)) {
	_ = FollowContext(context.Background(), w, upTo, loaded, apply)
}

// ErrWatchEnded is FollowContext's answer when the watch's updates end before its context does:
// the watch was stopped, or its connection closed.
var ErrWatchEnded = errors.New("the watch ended")

// FollowContext is Follow until ctx ends as well: it returns nil when ctx ends, ErrWatchEnded
// when the watch's updates end first, having closed loaded (which may be nil) in either case.
// It does not stop the watch; its caller does.
func FollowContext(ctx context.Context, w jetstream.KeyWatcher, upTo uint64, loaded chan<- struct{}, apply func(e jetstream.KeyValueEntry, loading bool)) error {
	done := false
	markLoaded := func() {
		done = true
		if loaded != nil {
			close(loaded)
		}
	}
	if upTo == 0 {
		markLoaded()
	}
	defer func() {
		if !done {
			markLoaded()
		}
	}()
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case e, ok = <-w.Updates():
		}
		if !ok {
			return ErrWatchEnded
		}
		if e == nil {
			// The watcher's own end of the initial values: may come early (see Scan).
			if !done && upTo == AtMarker {
				markLoaded()
			}
			continue
		}
		apply(e, !done)
		if !done && e.Revision() >= upTo {
			markLoaded()
		}
	}
}

// Entries returns the current entry of every key of a bucket that matches one of filters (every
// key when there are none), as Scan finds them, oldest revision first; deleted and purged keys
// are left out.
func Entries(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, filters ...string) ([]jetstream.KeyValueEntry, error) {
	current := make(map[string]jetstream.KeyValueEntry)
	err := Scan(ctx, js, kv, filters, func(e jetstream.KeyValueEntry) error {
		if e.Operation() == jetstream.KeyValuePut {
			current[e.Key()] = e
		} else {
			delete(current, e.Key())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]jetstream.KeyValueEntry, 0, len(current))
	for _, e := range current {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b jetstream.KeyValueEntry) int { return cmp.Compare(a.Revision(), b.Revision()) })
	return out, nil
}

// DropTombstone removes the marker that a deletion or purge of key left in the bucket, and
// anything older of the key, so that watches started later no longer replay the removal: a
// bucket whose keys are removed under ever new names would otherwise keep a marker for each,
// and every process that watches it would go through them all when it starts. A marker younger
// than olderThan stays, for watches that have not reached it yet: wait is how much longer it
// must stand. A value written after the marker stays (the purge stops at the marker), and a key
// holding a value is left alone.
func DropTombstone(ctx context.Context, js jetstream.JetStream, bucket, key string, olderThan time.Duration) (wait time.Duration, err error) {
	last, err := Removal(ctx, js, bucket, key)
	if last == nil || err != nil {
		return 0, err
	}
	name, subj := subject.KVStream(bucket), subject.KVKeyPrefix(bucket)+key
	if age := time.Since(last.Time); age < olderThan {
		return olderThan - age, nil
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", name, err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(last.Sequence+1)); err != nil {
		return 0, fmt.Errorf("dropping the marker of %s in %s: %w", key, bucket, err)
	}
	return 0, nil
}

// Removal reads the last entry of key in bucket, from the stream's leader, and returns it when
// it is the marker of the key's deletion or purge (its Time is the removal's); nil when the key
// holds a value or never did.
func Removal(ctx context.Context, js jetstream.JetStream, bucket, key string) (*jetstream.RawStreamMsg, error) {
	last, err := LeaderLast(ctx, js.Conn(), subject.KVStream(bucket), subject.KVKeyPrefix(bucket)+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the last entry of %s in %s: %w", key, bucket, err)
	}
	if op := last.Header.Get(kvOperation); op != kvDelete && op != kvPurge {
		return nil, nil
	}
	return last, nil
}

// The header and values by which NATS marks a key-value entry as a deletion or a purge.
const (
	kvOperation = "KV-Operation"
	kvDelete    = "DEL"
	kvPurge     = "PURGE"
)
