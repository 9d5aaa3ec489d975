package jsonschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// schemaN is a small schema of its own for each n.
func schemaN(n int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"a%d":{"type":"string"}},"required":["a%d"]}`, n, n))
}

// A schema is compiled when first used, and kept.
func TestLazyCompilesWhenUsed(t *testing.T) {
	c := NewCache(DefaultCacheBudget)
	l := c.Lazy("t1", schemaN(1))
	assert.Zero(t, c.Held(), "nothing compiled before it is used")
	assert.Nil(t, l.v.Load())
	require.NoError(t, l.Validate([]byte(`{"a1":"x"}`)))
	require.Error(t, l.Validate([]byte(`{}`)))
	assert.Equal(t, l.v.Load().Size(), c.Held())
	assert.Positive(t, c.Held())

	// A schema that takes every object holds nothing.
	any := c.Lazy("t1", json.RawMessage(`{"type":"object"}`))
	require.NoError(t, any.Validate([]byte(`{"b":1}`)))
	assert.Equal(t, l.v.Load().Size(), c.Held())
}

// One that does not compile says so once, then checks nothing.
func TestLazyThatDoesNotCompile(t *testing.T) {
	c := NewCache(DefaultCacheBudget)
	l := c.Lazy("t1", json.RawMessage(`{"type":"foo"}`))
	err := l.Validate([]byte(`{}`))
	var ce *CompileError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Contains(t, ce.Error(), "the schema is not a valid JSON Schema")
	assert.NoError(t, l.Validate([]byte(`{}`)))
	assert.Zero(t, c.Held())
}

// Past the budget, the owner holding the most gives way, its least recently used first; an owner
// within its share keeps its schemas compiled, however long ago it used them.
func TestCacheKeepsEachOwnersShare(t *testing.T) {
	one := NewCache(1<<30).Lazy("", schemaN(100))
	require.NoError(t, one.Validate([]byte(`{"a100":""}`)))
	size := one.v.Load().Size()

	c := NewCache(10 * size)
	quiet := []*Lazy{c.Lazy("quiet", schemaN(1)), c.Lazy("quiet", schemaN(2))}
	for _, l := range quiet {
		require.Error(t, l.Validate(nil), "parameters left out count as {}") // compiles it
	}
	var busy []*Lazy
	for i := range 30 {
		l := c.Lazy("busy", schemaN(100+i))
		busy = append(busy, l)
		_ = l.Validate([]byte(`{}`))
		assert.LessOrEqual(t, c.Held(), 10*size+size/2, "within the budget, give or take the sizes' differences")
	}
	for _, l := range quiet {
		assert.NotNil(t, l.v.Load(), "the quiet owner's schemas stay compiled")
	}
	kept := 0
	for i, l := range busy {
		if l.v.Load() != nil {
			kept++
			assert.GreaterOrEqual(t, i, 22, "the busy owner keeps its most recently used")
		}
	}
	assert.Equal(t, 8, kept, "the busy owner keeps what the quiet one leaves")

	// Dropped, a schema is compiled again when next used.
	require.Error(t, busy[0].Validate([]byte(`{}`)))
	assert.NotNil(t, busy[0].v.Load())
	assert.Nil(t, busy[22].v.Load(), "its owner's least recently used went in its place")
}

// Used from many goroutines at once, with a budget that drops schemas all the time.
func TestCacheConcurrent(t *testing.T) {
	c := NewCache(3 * 48 * len(schemaN(10)))
	var ls []*Lazy
	for i := range 10 {
		ls = append(ls, c.Lazy(fmt.Sprint("owner", i%3), schemaN(i)))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				n := (g + i) % len(ls)
				assert.NoError(t, ls[n].Validate(fmt.Appendf(nil, `{"a%d":"x"}`, n)))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, c.Held(), 4*48*len(schemaN(10)))
}

// Compile compiles a schema before its first use and keeps it; the error is its compile error.
func TestLazyCompile(t *testing.T) {
	c := NewCache(DefaultCacheBudget)
	l := c.Lazy("t1", schemaN(1))
	require.NoError(t, l.Compile())
	v := l.v.Load()
	require.NotNil(t, v)
	assert.Equal(t, v.Size(), c.Held())
	require.Error(t, l.Validate([]byte(`{}`)))
	assert.Same(t, v, l.v.Load(), "not compiled again")

	var ce *CompileError
	assert.True(t, errors.As(c.Lazy("t1", json.RawMessage(`{"type":"foo"}`)).Compile(), &ce))
}
