package fairshare

import (
	"cmp"
	"maps"
	"slices"
)

// Trim splits items into those to keep, holding at most budget together by size, and those to
// drop. The keys that hold the most give way: each keeps what it holds up to an equal share of
// the budget, the shares of the keys holding less going to the others, and a key past its share
// drops its items in the order of less (its first first) until it is within it. So a key that
// fills a budget shared with others fills it with its own items, not by pushing the others'
// out. Items within the budget are all kept.
//
// keep and drop are new slices; items is not changed, and is read in no particular order.
// Trim costs O(n log n) for n items.
func Trim[T any, K comparable](items []T, budget int, key func(T) K, size func(T) int, less func(a, b T) int) (keep, drop []T) {
	byKey := make(map[K][]T)
	held := make(map[K]int)
	for _, it := range items {
		k := key(it)
		byKey[k] = append(byKey[k], it)
		held[k] += size(it)
	}
	keys := slices.SortedFunc(maps.Keys(byKey), func(a, b K) int { return cmp.Compare(held[a], held[b]) })
	left := budget
	for i, k := range keys {
		share := left / (len(keys) - i)
		if held[k] <= share {
			left -= held[k]
			keep = append(keep, byKey[k]...)
			continue
		}
		// This key and those after it, which hold at least as much, keep a share each.
		for _, k := range keys[i:] {
			its := byKey[k]
			slices.SortFunc(its, less)
			h := held[k]
			for h > share {
				h -= size(its[0])
				drop = append(drop, its[0])
				its = its[1:]
			}
			keep = append(keep, its...)
		}
		break
	}
	return keep, drop
}
