package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/subject"
)

// CapWatch follows what the tenants' caps across the hosts are divided by: the hosts' load
// reports (load.go) and the slot grants (grants.go). Hosts of one process share one
// (HostConfig.Caps, made by ShareWatches): every load report then reaches the process and is
// decoded once, not once per host, and the grants bucket is watched once, not once per agent
// served. A host given none follows both itself.
type CapWatch struct {
	board *inspect.LoadBoard
	sub   *nats.Subscription

	watcher   jetstream.KeyWatcher
	stopWatch context.CancelFunc
	done      chan struct{}

	// mu orders the grants' deliveries: a subscriber takes in what is held, then each change,
	// never two at once.
	mu sync.Mutex
	// held is the newest record of each key (a grant of a tenant's requests of an agent).
	held map[string]jetstream.KeyValueEntry
	// subs are the subscribers of the grants by agent token (the key's first token).
	subs   map[string]map[uint64]func(jetstream.KeyValueEntry)
	nextID uint64
}

// WatchCaps starts following the load reports on nc and the grants of kv (the bucket
// AGENTBUS_SLOT_GRANTS, bus.Resources.SlotGrants) until Close.
func WatchCaps(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue) (*CapWatch, error) {
	return watchCaps(ctx, nc, kv, inspect.NewLoadBoard(), nil)
}

// watchCaps is WatchCaps feeding board, watching only the grants of agents when any are named.
// While JetStream answers as a cluster still electing its leaders does, it tries again
// (bus.Starting).
func watchCaps(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, board *inspect.LoadBoard, agents []string) (*CapWatch, error) {
	return bus.Starting(ctx, func(ctx context.Context) (*CapWatch, error) {
		return watchCapsOnce(ctx, nc, kv, board, agents)
	})
}

// watchCapsOnce is one try of watchCaps; it stops what it started when it fails.
func watchCapsOnce(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, board *inspect.LoadBoard, agents []string) (*CapWatch, error) {
	c := &CapWatch{board: board, held: map[string]jetstream.KeyValueEntry{},
		subs: map[string]map[uint64]func(jetstream.KeyValueEntry){}, done: make(chan struct{})}
	var err error
	if c.sub, err = nc.Subscribe(subject.HostLoad, func(m *nats.Msg) { board.Take(m.Data, time.Now()) }); err != nil {
		return nil, fmt.Errorf("subscribing to load reports: %w", err)
	}
	// The watch outlives ctx: it is bound to the CapWatch and stopped by Close.
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var w jetstream.KeyWatcher
	if len(agents) == 0 {
		w, err = kv.WatchAll(wctx)
	} else {
		filters := make([]string, 0, len(agents))
		for _, a := range agents {
			filters = append(filters, subject.AgentSlotGrants(a))
		}
		w, err = kv.WatchFiltered(wctx, filters)
	}
	if err != nil {
		stop()
		_ = c.sub.Unsubscribe()
		return nil, fmt.Errorf("%w: %w", errNoGrants, err)
	}
	c.watcher, c.stopWatch = w, stop
	go func() {
		defer close(c.done)
		bus.Follow(w, 0, nil, func(e jetstream.KeyValueEntry, _ bool) { c.take(e) })
	}()
	return c, nil
}

// take keeps a record the watch delivered and hands it to the subscribers of its agent.
func (c *CapWatch) take(e jetstream.KeyValueEntry) {
	tok, _, _ := strings.Cut(e.Key(), ".")
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Operation() == jetstream.KeyValuePut {
		c.held[e.Key()] = e
	} else {
		delete(c.held, e.Key())
	}
	for _, fn := range c.subs[tok] {
		fn(e)
	}
}

// subscribeGrants calls fn with each record held of agents' grants, then with each change of
// one, until cancel returns. fn runs on the watch's goroutine or, for the records held, on
// subscribeGrants's; it must not call cancel.
func (c *CapWatch) subscribeGrants(agents []string, fn func(jetstream.KeyValueEntry)) (cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextID
	c.nextID++
	toks := make([]string, 0, len(agents))
	for _, a := range agents {
		tok := subject.Token(a)
		toks = append(toks, tok)
		if c.subs[tok] == nil {
			c.subs[tok] = map[uint64]func(jetstream.KeyValueEntry){}
		}
		c.subs[tok][id] = fn
	}
	for key, e := range c.held {
		if tok, _, _ := strings.Cut(key, "."); c.subs[tok][id] != nil {
			fn(e)
		}
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, tok := range toks {
			delete(c.subs[tok], id)
			if len(c.subs[tok]) == 0 {
				delete(c.subs, tok)
			}
		}
	}
}

// Close stops following.
func (c *CapWatch) Close() error {
	err := c.sub.Unsubscribe()
	if errors.Is(err, nats.ErrConnectionClosed) {
		err = nil
	}
	_ = c.watcher.Stop()
	c.stopWatch()
	<-c.done
	return err
}
