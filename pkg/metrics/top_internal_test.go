package metrics

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a time the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestTop(limit int, dropped *[]string) (*TopLabel, *clock) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	t := NewTopLabel(limit, time.Minute, func(n string) { *dropped = append(*dropped, n) })
	t.now = c.now
	t.due.Store(c.t.Add(time.Minute).UnixNano())
	return t, c
}

// use asks about name n times.
func use(t *TopLabel, name string, n int) (v string) {
	for range n {
		v = t.Value(name)
	}
	return v
}

func TestTopLabelKeepsTheFirstUntilFull(t *testing.T) {
	var dropped []string
	top, _ := newTestTop(2, &dropped)
	assert.Equal(t, "a", top.Value("a"))
	assert.Equal(t, "b", top.Value("b"))
	assert.Equal(t, Other, top.Value("c"))
	assert.Equal(t, "a", top.Value("a"), "a labelled name keeps its value")
	assert.Empty(t, dropped)
}

func TestTopLabelBusyNewcomerTakesTheQuietestPlace(t *testing.T) {
	var dropped []string
	top, clk := newTestTop(2, &dropped)
	use(top, "a", 50)
	use(top, "quiet", 3)
	assert.Equal(t, Other, use(top, "busy", 40), "no place before the period ends")

	clk.t = clk.t.Add(time.Minute)
	assert.Equal(t, "busy", top.Value("busy"), "the busy name took a place")
	assert.Equal(t, []string{"quiet"}, dropped)
	assert.Equal(t, Other, top.Value("quiet"))
	assert.Equal(t, "a", top.Value("a"))
}

func TestTopLabelDoesNotChurn(t *testing.T) {
	var dropped []string
	top, clk := newTestTop(2, &dropped)
	for round := range 5 {
		use(top, "a", 30)
		use(top, "b", 20)
		use(top, "c", 25) // busier than b, but not twice as busy
		clk.t = clk.t.Add(time.Minute)
		assert.Equal(t, Other, top.Value("c"), "round %d", round)
	}
	assert.Empty(t, dropped)
}

func TestTopLabelRecentTrafficWins(t *testing.T) {
	var dropped []string
	top, clk := newTestTop(1, &dropped)
	use(top, "old", 1000)
	for range 6 { // "old" goes quiet: its count halves every period
		use(top, "new", 100)
		clk.t = clk.t.Add(time.Minute)
	}
	assert.Equal(t, "new", top.Value("new"))
	assert.Equal(t, []string{"old"}, dropped)
}

func TestTopLabelFindsABusyNameAmongManyRareOnes(t *testing.T) {
	var dropped []string
	top, clk := newTestTop(3, &dropped)
	for _, n := range []string{"a", "b", "c"} {
		top.Value(n)
	}
	// 10,000 tenants that call once, and one that makes every tenth call.
	for i := range 10_000 {
		top.Value(fmt.Sprintf("tenant-%d", i))
		if i%10 == 0 {
			top.Value("busy")
		}
	}
	top.mu.RLock()
	n := len(top.counts)
	top.mu.RUnlock()
	assert.LessOrEqual(t, n, 8*3, "names counted")

	clk.t = clk.t.Add(time.Minute)
	assert.Equal(t, "busy", top.Value("busy"))
	require.Len(t, dropped, 1)
	assert.Contains(t, []string{"a", "b", "c"}, dropped[0])
	assert.Equal(t, Other, top.Value("tenant-9999"), "rare names never add up to a place")
}

func TestTopLabelConcurrent(t *testing.T) {
	const limit = 10
	top := NewTopLabel(limit, time.Millisecond, nil)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		kept = make(map[string]bool)
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				name := fmt.Sprintf("n%d", (g*7+i)%50)
				if v := top.Value(name); v != Other {
					assert.Equal(t, name, v)
					mu.Lock()
					kept[v] = true
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.NotEmpty(t, kept)
	top.mu.RLock()
	defer top.mu.RUnlock()
	assert.Len(t, top.labelled, limit, "never more places than the limit")
}
