package gogc_test

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/gogc"
)

func TestSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}

	// GOGC given: the runtime took it at start, and it stays.
	assert.Equal(t, "50", gogc.Set(env(map[string]string{"GOGC": "50"})))
	assert.Equal(t, 100, debug.SetGCPercent(100), "GOGC given, the target must not change")

	// No GOGC (or an empty one): the default.
	assert.Equal(t, "400", gogc.Set(env(nil)))
	assert.Equal(t, gogc.Default, debug.SetGCPercent(100))
	assert.Equal(t, "400", gogc.Set(env(map[string]string{"GOGC": ""})))
	assert.Equal(t, gogc.Default, debug.SetGCPercent(100))
}
