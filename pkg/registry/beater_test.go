package registry

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeartbeatEqualityNamesEveryField: a Beater writes its last encoding again while the
// heartbeat is equal to the last one, so a field that equal does not compare would go unsent when
// only it changed. Every field of Host is changed in turn; clone shares nothing with the original.
func TestHeartbeatEqualityNamesEveryField(t *testing.T) {
	base := func() Host {
		return Host{ID: "h1", Agents: []string{"Echo"}, StartedAt: time.Unix(100, 0), Partitions: map[string][]int{"Echo": {0, 1}},
			Features: []string{FeatureInspect}, Leaving: false, InFlight: 1}
	}
	changes := map[string]func(*Host){
		"ID":         func(h *Host) { h.ID = "h2" },
		"Agents":     func(h *Host) { h.Agents = append(h.Agents, "Other") },
		"StartedAt":  func(h *Host) { h.StartedAt = h.StartedAt.Add(time.Second) },
		"Partitions": func(h *Host) { h.Partitions["Echo"] = []int{0} },
		"Features":   func(h *Host) { h.Features = nil },
		"Leaving":    func(h *Host) { h.Leaving = true },
		"InFlight":   func(h *Host) { h.InFlight = 2 },
	}
	typ := reflect.TypeFor[Host]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		change, ok := changes[name]
		require.True(t, ok, "Host.%s is new: compare it in Host.equal and change it here", name)
		h := base()
		change(&h)
		assert.False(t, h.equal(base()), "a heartbeat with another %s is equal to the first", name)
	}
	require.Len(t, changes, typ.NumField(), "a change names a field Host does not have")
	assert.True(t, base().equal(base()))

	orig := base()
	c := orig.clone()
	require.True(t, c.equal(orig))
	c.Agents[0], c.Features[0], c.Partitions["Echo"][0] = "X", "x", 9
	assert.True(t, orig.equal(base()), "the clone shares memory with the original: %+v", orig)
}
