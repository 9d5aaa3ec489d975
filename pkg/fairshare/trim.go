package fairshare

import (
	"cmp"
	"maps"
	"slices"
)

// Shares divides budget among keys by what each holds (held): a key holding no more than an
// equal share of what the keys holding less leave keeps all it holds, and the keys holding more
// keep an equal share each of the rest. Keys that hold budget or less together keep all they
// hold. The result has an entry for each key of held.
func Shares[K comparable](held map[K]int, budget int) map[K]int {
	shares := make(map[K]int, len(held))
	total := 0
	for k, h := range held {
		shares[k] = h
		total += h
	}
	if total <= budget {
		return shares
	}
	keys := slices.SortedFunc(maps.Keys(held), func(a, b K) int { return cmp.Compare(held[a], held[b]) })
	left := budget
	for i, k := range keys {
		share := left / (len(keys) - i)
		if held[k] <= share {
			left -= held[k]
			continue
		}
		// This key and those after it, which hold at least as much, keep a share each.
		for _, k := range keys[i:] {
			shares[k] = share
		}
		break
	}
	return shares
}

// Trim splits items into those to keep, holding at most budget together by size, and those to
// drop. The keys that hold the most give way (Shares), each dropping its items in the order of
// less (its first first) until it is within its share. So a key that fills a budget shared with
// others fills it with its own items, not by pushing the others' out. Items within the budget
// are all kept.
//
// keep and drop are new slices; items is not changed, and is read in no particular order.
// Trim costs O(n log n) for n items.
func Trim[T any, K comparable](items []T, budget int, key func(T) K, size func(T) int, less func(a, b T) int) (keep, drop []T) {
	held := make(map[K]int)
	for _, it := range items {
		held[key(it)] += size(it)
	}
	return TrimTo(items, Shares(held, budget), key, size, less)
}

// TrimTo is Trim with each key's share given: a key past allow[key] (0 when absent) drops its
// items in the order of less until it is within it.
func TrimTo[T any, K comparable](items []T, allow map[K]int, key func(T) K, size func(T) int, less func(a, b T) int) (keep, drop []T) {
	byKey := make(map[K][]T)
	held := make(map[K]int)
	for _, it := range items {
		k := key(it)
		byKey[k] = append(byKey[k], it)
		held[k] += size(it)
	}
	for k, its := range byKey {
		if held[k] <= allow[k] {
			keep = append(keep, its...)
			continue
		}
		slices.SortFunc(its, less)
		h := held[k]
		for h > allow[k] {
			h -= size(its[0])
			drop = append(drop, its[0])
			its = its[1:]
		}
		keep = append(keep, its...)
	}
	return keep, drop
}

// DropMost deletes from m the key whose map holds the most entries, and returns how many it held
// (0 for an empty m): what a cache of entries by owner (a tenant, an agent) gives up when it is
// full, the owner holding the most giving way rather than every owner.
func DropMost[K, E comparable, V any](m map[K]map[E]V) int {
	var (
		most  K
		found bool
	)
	for k, entries := range m {
		if !found || len(entries) > len(m[most]) {
			most, found = k, true
		}
	}
	n := len(m[most])
	delete(m, most)
	return n
}
