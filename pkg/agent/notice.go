package agent

import (
	"context"
	"fmt"
	"sync"

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
	context.AfterFunc(ctx, n.follow(h.live.forget))
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
