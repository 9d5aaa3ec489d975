package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Admin writes are answered once every ingress instance sees them (docs/architecture.md#admin-writes).
// Every instance authenticates from a cache of the keys bucket and routes from a cache of the
// registry and the hosts' heartbeats, each fed by a watch, so that no call pays a NATS round trip
// for them. A watch delivers a write a moment after it is stored, and later on an instance whose
// NATS server is loaded or far: a key created and used at once, or revoked and used at once,
// through another instance behind the same load balancer would meet the cache as it was. So
// the instance that makes a write asks every instance, itself included, whether its caches hold
// the bucket's revision after the write (a confirmation, subject.IngressConfirm), and answers
// once all of them do.
//
// Every instance is the ones heard lately, and the ones that got the request: each announces
// itself every presenceEvery on subject.IngressPresence and counts for presenceFor after its last
// announcement, or until it says it leaves; and one whose caches do not hold the state yet when
// it is asked says so at once (a pending answer), and is waited for too. An instance that starts
// subscribes to confirmations before it loads its caches, so that a write whose request it did
// not get was stored before it loaded them. One that died is waited for until presenceFor has
// passed.

// confirmVersion is the version of the presence and confirmation messages; an instance ignores
// messages of another version.
const confirmVersion = 1

// Timing of the confirmations.
const (
	// presenceEvery is how often an instance announces itself.
	presenceEvery = time.Second
	// presenceFor is how long after its last announcement an instance is waited for: three
	// announcements, so that two late or lost ones do not drop it.
	presenceFor = 3 * presenceEvery
	// confirmTimeout bounds how long a write waits for every instance to see it (a confirmer's
	// timeout, which tests shorten); longer than presenceFor, so that an instance that died just
	// before the write is dropped within it.
	confirmTimeout = 5 * time.Second
	// reaskEvery is how often a confirmation is asked again of the instances that have not
	// answered: core NATS may lose a message, and an instance that just started may not have
	// got the first.
	reaskEvery = 250 * time.Millisecond
	// holdPoll is how often an instance looks at its caches while a confirmation waits.
	holdPoll = 2 * time.Millisecond
)

// cacheState is what a write needs every instance's caches to hold.
type cacheState struct {
	// Keys is a revision of the keys bucket the key cache must have taken in.
	Keys uint64 `json:"keys,omitempty"`
	// Agents is a revision of the registry bucket the directory must have taken in.
	Agents uint64 `json:"agents,omitempty"`
	// Live are agents the directory must see a live host of.
	Live []string `json:"live,omitempty"`
	// Limits is a revision of the tenant limits bucket the limits cache must have taken in.
	Limits uint64 `json:"limits,omitempty"`
}

// presence is an announcement on subject.IngressPresence.
type presence struct {
	V        int    `json:"v"`
	Instance string `json:"instance"`
	// Leaving: the instance stops, and is no longer waited for.
	Leaving bool `json:"leaving,omitempty"`
}

// confirmRequest is a request on subject.IngressConfirm.
type confirmRequest struct {
	V int `json:"v"`
	// From is the asking instance, which looks at its own caches itself.
	From string `json:"from"`
	// ID names the request: asked again, it is answered by one wait.
	ID    string     `json:"id"`
	State cacheState `json:"state"`
	// WaitMs is how long the asking instance waits for answers.
	WaitMs int64 `json:"waitMs"`
}

// confirmAnswer is an instance's answer: its caches hold the request's state, or, Pending, they
// do not yet and it waits.
type confirmAnswer struct {
	V        int    `json:"v"`
	Instance string `json:"instance"`
	Pending  bool   `json:"pending,omitempty"`
}

// confirmer announces this instance, answers the confirmations other instances ask, and asks
// its own.
type confirmer struct {
	conn     *nats.Conn
	instance string
	log      *slog.Logger
	// holds reports whether this instance's caches hold a state; it is called once loaded is
	// closed.
	holds  func(cacheState) bool
	loaded chan struct{}

	presenceSub, confirmSub *nats.Subscription
	ctx                     context.Context // ends with close
	cancel                  context.CancelFunc
	wg                      sync.WaitGroup

	mu sync.Mutex
	// peers are the other instances heard, with when they last announced themselves.
	peers map[string]time.Time
	// answering are the requests (from and id) this instance waits to answer.
	answering map[string]bool
	// closed: close began, and no wait starts any more.
	closed bool

	// timeout is confirmTimeout in nanoseconds, unless a test set another (Server.SetConfirmTimeout).
	timeout atomic.Int64
}

// limit bounds how long a write waits for every instance to see it.
func (c *confirmer) limit() time.Duration { return time.Duration(c.timeout.Load()) }

// startConfirmer subscribes to presence and confirmations and announces this instance. It
// answers confirmations once markLoaded was called, with holds.
func startConfirmer(conn *nats.Conn, instance string, holds func(cacheState) bool, log *slog.Logger) (*confirmer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &confirmer{conn: conn, instance: instance, log: log, holds: holds, loaded: make(chan struct{}),
		ctx: ctx, cancel: cancel, peers: map[string]time.Time{}, answering: map[string]bool{}}
	c.timeout.Store(int64(confirmTimeout))
	var err error
	if c.presenceSub, err = conn.Subscribe(subject.IngressPresence, c.heard); err != nil {
		cancel()
		return nil, fmt.Errorf("subscribing to ingress presence: %w", err)
	}
	if c.confirmSub, err = conn.Subscribe(subject.IngressConfirm, c.asked); err != nil {
		_ = c.presenceSub.Unsubscribe()
		cancel()
		return nil, fmt.Errorf("subscribing to confirmations: %w", err)
	}
	// The server has the subscriptions before the caches are read (see above).
	if err := conn.Flush(); err != nil {
		_ = c.close()
		return nil, fmt.Errorf("subscribing to confirmations: %w", err)
	}
	c.announce(false)
	c.wg.Go(c.announceEvery)
	return c, nil
}

// markLoaded lets the confirmations be answered: the caches holds looks at are loaded.
func (c *confirmer) markLoaded() { close(c.loaded) }

// close announces that this instance leaves and stops answering. A connection closed already
// is not an error.
func (c *confirmer) close() error {
	c.announce(true)
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	var errs []error
	for _, sub := range []*nats.Subscription{c.presenceSub, c.confirmSub} {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			errs = append(errs, err)
		}
	}
	c.wg.Wait()
	return errors.Join(errs...)
}

// announce publishes this instance's presence, or that it leaves.
func (c *confirmer) announce(leaving bool) {
	b, _ := json.Marshal(presence{V: confirmVersion, Instance: c.instance, Leaving: leaving})
	if err := c.conn.Publish(subject.IngressPresence, b); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		c.log.Warn("announcing this ingress instance", "err", err)
	}
}

func (c *confirmer) announceEvery() {
	t := time.NewTicker(presenceEvery)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.announce(false)
		}
	}
}

// heard notes another instance's announcement. An instance heard of for the first time is
// answered with this one's announcement, so that an instance that starts knows the others at
// once rather than at their next announcement: the rate limits' even shares count them.
func (c *confirmer) heard(m *nats.Msg) {
	var p presence
	if json.Unmarshal(m.Data, &p) != nil || p.V != confirmVersion || p.Instance == "" || p.Instance == c.instance {
		return
	}
	c.mu.Lock()
	_, known := c.peers[p.Instance]
	if p.Leaving {
		delete(c.peers, p.Instance)
	} else {
		c.peers[p.Instance] = time.Now()
	}
	answer := !known && !p.Leaving && !c.closed
	c.mu.Unlock()
	if answer {
		c.announce(false)
	}
}

// present returns the other instances heard within presenceFor, sorted.
func (c *confirmer) present() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	out := make([]string, 0, len(c.peers))
	for id, at := range c.peers {
		if now.Sub(at) >= presenceFor {
			delete(c.peers, id)
			continue
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// asked answers another instance's confirmation once the caches hold its state, within the
// request's wait.
func (c *confirmer) asked(m *nats.Msg) {
	var req confirmRequest
	if json.Unmarshal(m.Data, &req) != nil || req.V != confirmVersion || req.From == c.instance || m.Reply == "" {
		return
	}
	key := req.From + "/" + req.ID
	c.mu.Lock()
	if c.closed || c.answering[key] {
		c.mu.Unlock()
		return // asked again while it waits: the wait answers
	}
	c.answering[key] = true
	c.wg.Add(1) // under mu: close waits for every wait it did not stop from starting
	c.mu.Unlock()
	wait := min(time.Duration(req.WaitMs)*time.Millisecond, c.limit())
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.answering, key)
			c.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(c.ctx, wait)
		defer cancel()
		if !c.isLoaded() || !c.holds(req.State) {
			c.answer(m.Reply, true)
			if !c.await(ctx, req.State) {
				return
			}
		}
		c.answer(m.Reply, false)
	}()
}

// answer answers a confirmation request on reply: the caches hold its state, or are pending.
func (c *confirmer) answer(reply string, pending bool) {
	b, _ := json.Marshal(confirmAnswer{V: confirmVersion, Instance: c.instance, Pending: pending})
	if err := c.conn.Publish(reply, b); err != nil {
		c.log.Warn("answering a confirmation", "err", err)
	}
}

// isLoaded reports whether markLoaded was called.
func (c *confirmer) isLoaded() bool {
	select {
	case <-c.loaded:
		return true
	default:
		return false
	}
}

// await waits until the caches are loaded and hold want, and reports whether they came to
// before ctx ended.
func (c *confirmer) await(ctx context.Context, want cacheState) bool {
	select {
	case <-c.loaded:
	case <-ctx.Done():
		return false
	}
	t := time.NewTicker(holdPoll)
	defer t.Stop()
	for !c.holds(want) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// confirm waits until every instance's caches hold want, this one's included, for at most
// c.limit() or until ctx ends, and reports whether they all came to.
func (c *confirmer) confirm(ctx context.Context, want cacheState) bool {
	ctx, cancel := context.WithTimeout(ctx, c.limit())
	defer cancel()
	deadline, _ := ctx.Deadline()
	id := nuid.Next()
	inbox := subject.ConfirmReply(c.instance, id)
	sub, err := c.conn.SubscribeSync(inbox)
	if err != nil {
		c.log.Warn("asking the ingress instances to confirm a write", "err", err)
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(confirmRequest{V: confirmVersion, From: c.instance, ID: id, State: want, WaitMs: time.Until(deadline).Milliseconds()})
	ask := func() {
		if err := c.conn.PublishRequest(subject.IngressConfirm, inbox, req); err != nil {
			c.log.Warn("asking the ingress instances to confirm a write", "err", err)
		}
	}
	ask()
	// answered: true once an instance's caches hold want, false while it said it waits.
	answered := map[string]bool{}
	reask := time.Now().Add(reaskEvery)
	for {
		selfHolds := c.holds(want)
		missing := c.missing(answered)
		if selfHolds && len(missing) == 0 {
			return true
		}
		if ctx.Err() != nil {
			c.log.Warn("not every ingress instance confirmed a write in time", "state", want, "self", selfHolds, "missing", missing)
			return false
		}
		now := time.Now()
		if !now.Before(reask) {
			ask()
			reask = now.Add(reaskEvery)
		}
		until := reask
		if next := now.Add(holdPoll); !selfHolds && next.Before(until) {
			until = next // this instance's own caches are looked at, too
		}
		wctx, wcancel := context.WithDeadline(ctx, until)
		m, err := sub.NextMsgWithContext(wctx)
		wcancel()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			continue
		}
		if err != nil {
			c.log.Warn("waiting for the ingress instances to confirm a write", "err", err)
			return false
		}
		var a confirmAnswer
		if json.Unmarshal(m.Data, &a) == nil && a.V == confirmVersion && a.Instance != "" {
			answered[a.Instance] = answered[a.Instance] || !a.Pending
		}
	}
}

// missing returns the instances present, and those that said they wait, whose caches have not
// been confirmed to hold the state (answered), sorted.
func (c *confirmer) missing(answered map[string]bool) []string {
	var out []string
	for _, id := range c.present() {
		if !answered[id] {
			out = append(out, id)
		}
	}
	for id, done := range answered {
		if !done && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// cacheHolds reports whether this instance's caches hold want.
func (s *Server) cacheHolds(want cacheState) bool {
	if s.auth.Revision() < want.Keys || s.dir.AgentsRevision() < want.Agents || s.tenantLimits.cache.Revision() < want.Limits {
		return false
	}
	for _, a := range want.Live {
		if !s.dir.Live(a) {
			return false
		}
	}
	return true
}

// confirmKeys waits until every instance's key cache holds the keys bucket as it is after a
// write to it, for at most confirmTimeout, and reports whether they came to.
func (s *Server) confirmKeys(ctx context.Context) bool {
	rev, err := bus.NewestRevision(ctx, s.res.Keys)
	if err != nil {
		s.log.Warn("confirming a write of keys", "err", err)
		return false
	}
	return s.confirms.confirm(ctx, cacheState{Keys: rev})
}

// confirmAgents waits until every instance's directory holds the registry bucket as it is after
// a write to it (a removal), for at most confirmTimeout, and reports whether they came to.
func (s *Server) confirmAgents(ctx context.Context) bool {
	rev, err := bus.NewestRevision(ctx, s.res.Registry)
	if err != nil {
		s.log.Warn("confirming a write of agents", "err", err)
		return false
	}
	return s.confirms.confirm(ctx, cacheState{Agents: rev})
}

// confirmServed waits until a workflow host serves the agent, with a registration the hosts
// wrote to the registry bucket after its revision before, and every instance's directory holds
// that registration and sees the host live; for at most confirmTimeout in all. It reports
// whether they came to.
//
// A remote agent's registration is in the remote agents bucket, and the hosts write its entry
// in the registry when they start serving it; calls are routed by that entry.
func (s *Server) confirmServed(ctx context.Context, name string, before uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, s.confirms.limit())
	defer cancel()
	t := time.NewTicker(holdPoll)
	defer t.Stop()
	for s.dir.AgentRevision(name) <= before || !s.dir.Live(name) {
		select {
		case <-ctx.Done():
			s.log.Warn("no workflow host serves a remote agent yet", "agent", name)
			return false
		case <-t.C:
		}
	}
	return s.confirms.confirm(ctx, cacheState{Agents: s.dir.AgentRevision(name), Live: []string{name}})
}
