package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/subject"
)

// Notices follows the announcements of instance records an operator changed
// (subject.InstanceNotice: the admin API's complete; subject.TenantNotice: a deleted tenant's
// erasure) with one subscription, and hands each to
// every host of the process that follows it (HostConfig.Notices): hosts of one process that share
// it receive each notice once, not once each. Make one with FollowNotices; ShareWatches makes one
// for the hosts of a process.
type Notices struct {
	sub *nats.Subscription

	mu     sync.Mutex
	nextID uint64
	hosts  map[uint64]func(tenant, workflowID string)
}

// FollowNotices subscribes on nc to the instance notices until Close.
func FollowNotices(nc *nats.Conn) (*Notices, error) {
	n := &Notices{hosts: make(map[uint64]func(tenant, workflowID string))}
	sub, err := nc.Subscribe(subject.InstanceNotices(), n.hand)
	if err != nil {
		return nil, fmt.Errorf("subscribing to instance notices: %w", err)
	}
	n.sub = sub
	return n, nil
}

// hand gives a notice to every follower.
func (n *Notices) hand(m *nats.Msg) {
	tenant, workflowID, err := subject.ParseInstanceNotice(m.Subject)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range n.hosts {
		f(tenant, workflowID)
	}
}

// follow calls f with each notice's instance until the returned func is called.
func (n *Notices) follow(f func(tenant, workflowID string)) (stop func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id := n.nextID
	n.nextID++
	n.hosts[id] = f
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.hosts, id)
	}
}

// Close ends the subscription.
func (n *Notices) Close() error { return n.sub.Unsubscribe() }

// followNotices follows the instance notices (HostConfig.Notices, or a subscription of its own)
// until ctx ends. A host that holds such an instance in memory drops its copy, so that the
// instance's next request reads the record anew and, for a completed run, starts a new one. A
// notice that does not arrive costs only time: the host's next write of the record is
// compare-and-set against the revision it read, so it conflicts, reloads, and never overwrites
// the operator's change.
//
// A tenant's notice (its data erased) also makes the host drop, unrun, every request of the
// tenant stored before the notice arrived that it holds or is delivered later (erasedBefore):
// the tenant's backlog does not run on, writing its data anew and taking handler slots from the
// other tenants, after its deletion.
func (h *Host) followNotices(ctx context.Context) error {
	n := h.cfg.Notices
	if n == nil {
		own, err := FollowNotices(h.cfg.Conn)
		if err != nil {
			return err
		}
		n = own
		context.AfterFunc(ctx, func() { _ = own.Close() })
	}
	context.AfterFunc(ctx, n.follow(func(tenant, workflowID string) {
		if workflowID == "" {
			h.noteErased(tenant, time.Now())
		}
		h.live.forget(tenant, workflowID)
	}))
	return nil
}

// forget makes the instance's copy in memory, if there is one, read the record anew before its
// next request. An empty workflowID does so for every copy of the tenant's instances, whose data
// was erased, and makes them read their threads anew too: what their cursors knew to be stored
// is gone.
func (s *liveSet) forget(tenant, workflowID string) {
	var ls []*liveInstance
	s.mu.Lock()
	if workflowID != "" {
		if l := s.m[liveKey{tenant, workflowID}]; l != nil {
			ls = append(ls, l)
		}
	} else {
		for k, l := range s.m {
			if k.tenant == tenant {
				ls = append(ls, l)
			}
		}
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.mu.Lock()
		l.loaded = false
		if workflowID == "" {
			l.cursors, l.stale = nil, nil
		}
		l.mu.Unlock()
	}
}

// erasedTenants are, by tenant, when the host learnt that the tenant's data was erased (Unix
// nanoseconds): its requests stored before are dropped. Copied on write; nil while none.
type erasedTenants = map[string]int64

// erasedKeep is how long the host remembers an erasure: longer than a request may wait in an
// inbox (bus.Config.InboxMaxAge).
const erasedKeep = 8 * 24 * time.Hour

// noteErased records that tenant's data was erased at now.
func (h *Host) noteErased(tenant string, now time.Time) {
	h.erasedMu.Lock()
	defer h.erasedMu.Unlock()
	next := make(erasedTenants)
	if old := h.erased.Load(); old != nil {
		for t, at := range *old {
			if now.Sub(time.Unix(0, at)) < erasedKeep {
				next[t] = at
			}
		}
	}
	next[tenant] = now.UnixNano()
	h.erased.Store(&next)
}

// erasedBefore reports whether a request of tenant stored at stored (Unix nanoseconds) was
// stored before the tenant's data was erased: one atomic load while no tenant was.
func (h *Host) erasedBefore(tenant string, stored int64) bool {
	m := h.erased.Load()
	if m == nil {
		return false
	}
	at, ok := (*m)[tenant]
	return ok && stored < at
}
