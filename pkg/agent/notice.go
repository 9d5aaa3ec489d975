package agent

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/subject"
)

// followNotices subscribes, until ctx ends, to the announcements of instance records an operator
// changed (subject.InstanceNotice: the admin API's complete). A host that holds such an instance
// in memory drops its copy, so that the instance's next request reads the record anew and, for
// a completed run, starts a new one. A notice that does not arrive costs only time: the host's
// next write of the record is compare-and-set against the revision it read, so it conflicts,
// reloads, and never overwrites the operator's change.
func (h *Host) followNotices(ctx context.Context) error {
	sub, err := h.cfg.Conn.Subscribe(subject.InstanceNotices(), func(m *nats.Msg) {
		tenant, workflowID, err := subject.ParseInstanceNotice(m.Subject)
		if err != nil {
			return
		}
		h.live.forget(tenant, workflowID)
	})
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}

// forget makes the instance's copy in memory, if there is one, read the record anew before its
// next request.
func (s *liveSet) forget(tenant, workflowID string) {
	s.mu.Lock()
	l := s.m[liveKey{tenant, workflowID}]
	s.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	l.loaded = false
	l.mu.Unlock()
}
