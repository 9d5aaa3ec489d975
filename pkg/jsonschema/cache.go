package jsonschema

import (
	"cmp"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/fairshare"
)

// DefaultCacheBudget is the memory a process's compiled schemas may hold (Validator.Size) before
// the owners holding the most give way: some thousands of schemas as methods have them.
const DefaultCacheBudget = 64 << 20

// Cache holds compiled schemas within a budget of memory, each compiled when it is first used
// (Lazy), for the schemas of many agents and tenants in one process. A schema nobody calls costs
// no compilation and no memory beyond its text. Past the budget, the owners holding the most
// give way, each its least recently used schemas first (fairshare.Trim): an owner whose schemas
// fill the budget fills it with its own, and compiles them again when next used, rather than
// push the others' out. A schema larger than its owner's share is compiled for each use while
// the budget is that full. It is safe for concurrent use.
type Cache struct {
	budget int
	// uses counts the uses of its schemas: a Lazy's last use is the count it took.
	uses atomic.Int64
	mu   sync.Mutex
	held int
	kept map[*Lazy]struct{} // those compiled now
}

// NewCache returns a Cache whose compiled schemas hold about budget bytes at most.
func NewCache(budget int) *Cache {
	return &Cache{budget: budget, kept: make(map[*Lazy]struct{})}
}

// Held is about how many bytes the compiled schemas kept now hold.
func (c *Cache) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// Lazy returns schema, compiled when first used; owner names whose it is (a tenant, or an agent
// several tenants share), for the budget's shares. schema is kept as it is, not copied.
func (c *Cache) Lazy(owner string, schema json.RawMessage) *Lazy {
	return &Lazy{cache: c, owner: owner, schema: schema}
}

// Lazy is a schema compiled when first used and kept compiled while its Cache's budget allows.
type Lazy struct {
	cache  *Cache
	owner  string
	schema json.RawMessage
	// v is the compiled schema while the cache keeps it; used is when it was last used (the
	// cache's count of uses then), for the cache to drop the least recently used first.
	v    atomic.Pointer[Validator]
	used atomic.Int64
	// state says what compiling it gave, once known: a schema that takes every object or does
	// not compile is never compiled again.
	state atomic.Uint32
	mu    sync.Mutex // held while compiling
}

// A Lazy's state.
const (
	lazyUnknown uint32 = iota // not compiled yet, or compiled and kept
	lazyNothing               // takes every object: nothing to check or keep
	lazyInvalid               // does not compile
)

// CompileError is what Lazy.Validate returns, once, for a schema that does not compile.
type CompileError struct{ Err error }

func (e *CompileError) Error() string { return e.Err.Error() }
func (e *CompileError) Unwrap() error { return e.Err }

// Validate checks params as Validator.Validate does, compiling the schema first when the cache
// does not hold it compiled; a nil Lazy accepts every value. A schema that does not compile
// checks nothing: the first Validate (or Compile) returns its *CompileError, for the caller to
// report, and every later one nil.
func (l *Lazy) Validate(params []byte) error {
	if l == nil {
		return nil
	}
	v, err := l.validator()
	if err != nil {
		return err
	}
	return v.Validate(params)
}

// Compile compiles the schema now, unless the cache holds it compiled, so that a schema the
// program wrote is known good before its first call; the error is what Validate would return
// about it (its *CompileError the first time it does not compile, nil after).
func (l *Lazy) Compile() error {
	_, err := l.validator()
	return err
}

// validator returns the compiled schema (nil: nothing to check), compiling it when needed; the
// error is the compile error, on the first call that met it.
func (l *Lazy) validator() (*Validator, error) {
	if v := l.v.Load(); v != nil {
		l.used.Store(l.cache.uses.Add(1))
		return v, nil
	}
	if l.state.Load() != lazyUnknown {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if v := l.v.Load(); v != nil || l.state.Load() != lazyUnknown {
		return v, nil
	}
	v, err := Compile(l.schema)
	switch {
	case err != nil:
		l.state.Store(lazyInvalid)
		return nil, &CompileError{Err: err}
	case v == nil:
		l.state.Store(lazyNothing)
		return nil, nil
	}
	l.used.Store(l.cache.uses.Add(1))
	l.v.Store(v)
	l.cache.keep(l, v.Size())
	return v, nil
}

// keep adds l, just compiled into size bytes, to what the cache holds, and past the budget
// drops what the owners holding the most used least recently (l among them: a schema larger
// than its owner's share is dropped again at once).
func (c *Cache) keep(l *Lazy, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kept[l] = struct{}{}
	c.held += size
	if c.held <= c.budget {
		return
	}
	type kept struct {
		l    *Lazy
		used int64
		size int
	}
	all := make([]kept, 0, len(c.kept))
	for k := range c.kept {
		// Read once: a call may use it while the budget is shared out.
		all = append(all, kept{k, k.used.Load(), k.v.Load().Size()})
	}
	_, drop := fairshare.Trim(all, c.budget, func(k kept) string { return k.l.owner },
		func(k kept) int { return k.size }, func(a, b kept) int { return cmp.Compare(a.used, b.used) })
	for _, d := range drop {
		c.held -= d.size
		delete(c.kept, d.l)
		d.l.v.Store(nil)
	}
}
