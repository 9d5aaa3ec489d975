package fairshare_test

import (
	"cmp"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/fairshare"
)

// item is something a key holds: its size and its age (0 the oldest).
type item struct {
	key       string
	size, age int
}

// The keys holding the most give way, each its oldest first, down to equal shares of what the
// keys holding less leave.
func TestTrim(t *testing.T) {
	var items []item
	add := func(key string, n, size int) {
		for i := range n {
			items = append(items, item{key, size, i})
		}
	}
	add("big", 10, 1)
	add("small", 2, 1)
	add("middle", 5, 1)
	trim := func(budget int) (keep, drop []item) {
		return fairshare.Trim(items, budget, func(it item) string { return it.key }, func(it item) int { return it.size },
			func(a, b item) int { return cmp.Compare(a.age, b.age) })
	}
	keep, drop := trim(9)
	held := map[string]int{}
	for _, it := range keep {
		held[it.key]++
	}
	assert.Equal(t, map[string]int{"small": 2, "middle": 3, "big": 3}, held, "small within its share; the others 7/2 each")
	assert.Len(t, drop, 9)
	for _, it := range drop {
		if it.key == "middle" {
			assert.Less(t, it.age, 2, "the oldest go")
		} else {
			assert.Less(t, it.age, 7)
		}
	}

	keep, drop = trim(17)
	assert.Len(t, keep, 17, "within the budget, all kept")
	assert.Empty(t, drop)

	items = []item{{"a", 5, 0}, {"a", 1, 1}, {"b", 1, 0}}
	keep, drop = trim(3)
	assert.ElementsMatch(t, []item{{"b", 1, 0}, {"a", 1, 1}}, keep, "a drops its oldest, larger than what is left")
	assert.Equal(t, []item{{"a", 5, 0}}, drop)
}

// Shares keeps what each key holds within the budget, and splits the rest evenly among the keys
// holding more.
func TestShares(t *testing.T) {
	held := map[string]int{"a": 10, "b": 2, "c": 5}
	assert.Equal(t, held, fairshare.Shares(held, 17))
	assert.Equal(t, map[string]int{"a": 3, "b": 2, "c": 3}, fairshare.Shares(held, 9))
	assert.Equal(t, map[string]int{"a": 0, "b": 0, "c": 0}, fairshare.Shares(held, 0))
	assert.Empty(t, fairshare.Shares(map[string]int{}, 5))
}

func TestDropMost(t *testing.T) {
	m := map[string]map[int]bool{"a": {1: true}, "b": {1: true, 2: true, 3: true}, "c": {1: true, 2: true}}
	assert.Equal(t, 3, fairshare.DropMost(m))
	assert.Equal(t, map[string]map[int]bool{"a": {1: true}, "c": {1: true, 2: true}}, m, "b, which held the most, went")
	assert.Equal(t, 2, fairshare.DropMost(m))
	assert.Equal(t, 1, fairshare.DropMost(m))
	assert.Zero(t, fairshare.DropMost(m), "an empty map")
}
