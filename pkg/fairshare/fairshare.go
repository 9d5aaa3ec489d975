// Package fairshare hands out work queued under keys in turns: a weighted round robin over the
// keys that have work waiting (deficit round robin, each item one unit), first in first out
// within a key, with an optional cap on how many of a key's items are out at once. A workflow
// host queues its conversations under their tenant with it, so that its free handler slots go
// to the tenants in turn rather than in arrival order (docs/architecture.md, "Fair slots").
//
// A Queue is a data structure, not a scheduler: it runs nothing, keeps no goroutine and no
// clock, and is not safe for concurrent use (its owner holds a lock around it). Every operation
// costs O(1), amortised; a key with nothing waiting and nothing out is not kept, so memory
// follows the keys that have work, not the keys ever seen. Turns count items, not how long an
// item takes: a key whose items take longer gets more of the time.
//
// Trim shares a budget the same way: what is kept in memory for several keys (a host's idle
// instances, compiled schemas), the keys that hold the most giving way; DropMost does so for a
// cache bounded by its count of entries (the schemas an ingress knows, the topic lists a
// history store remembers).
package fairshare

// Share is a key's part of the turns.
type Share struct {
	// Weight is how many items the key gets in each round, against the other keys' weights: a
	// key of weight 3 gets three items to another's one while both have items waiting. Zero or
	// less means 1.
	Weight int
	// MaxConcurrent caps how many of the key's items are out at once (handed out by Next and not
	// yet given back with Done): a key at its cap waits out its turns. Zero or less means no cap.
	MaxConcurrent int
	// Hold keeps every item of the key waiting, whatever MaxConcurrent says: none is handed out
	// until the key's Share lets it (Reshare). A cap of none, as when the key's part of a cap
	// shared with others is nothing for now.
	Hold bool
}

// Queue holds items under keys and hands them out in turns. The zero value is not usable; use
// New.
type Queue[K comparable, V any] struct {
	share func(K) Share
	keys  map[K]*key[K, V]
	// turns are the keys that may have an item handed out now (items waiting, below their cap),
	// in the order of their turns; the first is the key whose turn it is.
	turns   fifo[*key[K, V]]
	waiting int
	// peak is the most keys held since keys was made: Go's maps keep their size when entries
	// are deleted, so keys is made anew once it holds far fewer (forget).
	peak int
	// spare are keys forgotten lately, kept for reuse (at most spareKeys), so that a key that
	// comes and goes with each item allocates nothing.
	spare []*key[K, V]
}

// spareKeys bounds Queue.spare: a constant, not a cost per key.
const spareKeys = 64

// key is what a Queue holds of one key while it has items waiting or out.
type key[K comparable, V any] struct {
	id    K
	items fifo[V]
	// weight, limit and hold are the key's Share, read when the key came in or at Reshare
	// (limit 0: no cap).
	weight, limit int
	hold          bool
	out           int
	// credit is how many more items the key gets in its current turn.
	credit int
	inTurn bool // it is in Queue.turns
}

// New returns an empty Queue. share gives a key's Share; it is called when a key comes in (its
// first item is pushed while it has none waiting or out), not for every item, and must be
// cheap: it runs under the lock of the Queue's owner. A nil share gives every key weight 1 and
// no cap.
func New[K comparable, V any](share func(K) Share) *Queue[K, V] {
	return &Queue[K, V]{share: share, keys: make(map[K]*key[K, V])}
}

// Push queues v under the key id, behind the key's other items.
func (q *Queue[K, V]) Push(id K, v V) {
	k := q.keys[id]
	if k == nil {
		var s Share
		if q.share != nil {
			s = q.share(id)
		}
		if n := len(q.spare); n > 0 {
			k, q.spare = q.spare[n-1], q.spare[:n-1]
		} else {
			k = new(key[K, V])
		}
		k.id = id
		k.set(s)
		q.keys[id] = k
		q.peak = max(q.peak, len(q.keys))
	}
	k.items.push(v)
	q.waiting++
	q.enter(k)
}

// Next hands out the next item: the oldest item of the key whose turn it is. ok is false when no
// key may have an item now (none waits, or every key that has one is at its cap). The item is
// out until Done is called with its key.
func (q *Queue[K, V]) Next() (id K, v V, ok bool) {
	for q.turns.len() > 0 && !q.turns.front().open() {
		// Its share was lowered (Reshare) while it was in the turns.
		k := q.turns.pop()
		k.inTurn, k.credit = false, 0
	}
	if q.turns.len() == 0 {
		return id, v, false
	}
	k := q.turns.front()
	if k.credit == 0 {
		k.credit = k.weight // its turn begins
	}
	v = k.items.pop()
	q.waiting--
	k.out++
	k.credit--
	switch {
	case k.items.len() == 0 || !k.open():
		// Out of the turns until it has an item again, or one of its items comes back: it then
		// waits for a whole round, as a newcomer does.
		q.turns.pop()
		k.inTurn, k.credit = false, 0
	case k.credit == 0:
		q.turns.pop()
		q.turns.push(k)
	}
	return k.id, v, true
}

// Done gives back an item of the key id that Next handed out. It panics when the key has none
// out: a programming error, like unlocking an unlocked mutex.
func (q *Queue[K, V]) Done(id K) {
	k := q.keys[id]
	if k == nil || k.out == 0 {
		panic("fairshare: Done for a key with no item out")
	}
	k.out--
	q.enter(k)
	if k.out == 0 && k.items.len() == 0 {
		q.forget(k)
	}
}

// forget drops a key that has nothing waiting or out. When the keys held fall to an eighth of
// their peak, the map is made anew, so that a burst of keys leaves no large map behind: the copy
// moves at most an eighth of the keys deleted since the last one.
func (q *Queue[K, V]) forget(k *key[K, V]) {
	delete(q.keys, k.id)
	if len(q.spare) < spareKeys {
		var zero K
		k.id = zero // holds nothing of the key it was
		q.spare = append(q.spare, k)
	}
	if q.peak >= shrinkAbove && len(q.keys) <= q.peak/8 {
		keys := make(map[K]*key[K, V], len(q.keys))
		for id, k := range q.keys {
			keys[id] = k
		}
		q.keys, q.peak = keys, len(keys)
	}
}

// enter puts k at the end of the turns if it may have an item handed out and is not there.
func (q *Queue[K, V]) enter(k *key[K, V]) {
	if !k.inTurn && k.items.len() > 0 && k.open() {
		k.inTurn = true
		q.turns.push(k)
	}
}

// set takes a Share in.
func (k *key[K, V]) set(s Share) {
	k.weight, k.limit, k.hold = max(s.Weight, 1), max(s.MaxConcurrent, 0), s.Hold
	k.credit = min(k.credit, k.weight)
}

// open reports whether the key's share lets one more of its items out.
func (k *key[K, V]) open() bool { return !k.hold && (k.limit == 0 || k.out < k.limit) }

// Reshare reads anew the Share of every key held for which match is true, as when the key came
// in: a key whose cap was raised or released takes its turn again, one whose cap was lowered
// hands nothing out until its items out are fewer than the new cap (the items out stay out).
// It costs O(keys held), and returns how many items of the matched keys their shares let out
// now, so that the owner has them handed out.
func (q *Queue[K, V]) Reshare(match func(K) bool) (open int) {
	if q.share == nil {
		return 0
	}
	for id, k := range q.keys {
		if !match(id) {
			continue
		}
		k.set(q.share(id))
		q.enter(k)
		switch {
		case !k.open():
		case k.limit == 0:
			open += k.items.len()
		default:
			open += min(k.items.len(), k.limit-k.out)
		}
	}
	return open
}

// Len returns how many items wait, under every key.
func (q *Queue[K, V]) Len() int { return q.waiting }

// Keys returns how many keys the Queue holds: those with items waiting or out.
func (q *Queue[K, V]) Keys() int { return len(q.keys) }

// Waiting returns how many items wait under the key id, and how many of its items are out.
func (q *Queue[K, V]) Waiting(id K) (waiting, out int) {
	if k := q.keys[id]; k != nil {
		return k.items.len(), k.out
	}
	return 0, 0
}

// Range calls f with every key held, its items waiting and its items out, in no order, until f
// returns false. It costs O(keys held).
func (q *Queue[K, V]) Range(f func(id K, waiting, out int) bool) {
	for id, k := range q.keys {
		if !f(id, k.items.len(), k.out) {
			return
		}
	}
}

// fifo is a first-in-first-out queue on a slice: push and pop cost O(1), amortised.
type fifo[T any] struct {
	buf  []T
	head int // buf[head:] are the items
}

// shrinkAbove is the capacity above which an emptied fifo lets its array go, so that a burst of
// keys or items leaves no large array behind.
const shrinkAbove = 256

func (f *fifo[T]) len() int { return len(f.buf) - f.head }

func (f *fifo[T]) front() T { return f.buf[f.head] }

func (f *fifo[T]) push(v T) {
	if len(f.buf) == cap(f.buf) && f.head >= len(f.buf)/2 && f.head > 0 {
		// Slide the items down rather than grow: the copy moves at most as many items as were
		// popped since the last one.
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf, f.head = f.buf[:n], 0
	}
	f.buf = append(f.buf, v)
}

func (f *fifo[T]) pop() T {
	v := f.buf[f.head]
	var zero T
	f.buf[f.head] = zero
	f.head++
	if f.head == len(f.buf) {
		if cap(f.buf) > shrinkAbove {
			f.buf = nil
		} else {
			f.buf = f.buf[:0]
		}
		f.head = 0
	}
	return v
}
