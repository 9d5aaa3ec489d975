package agent

import (
	"context"
	"errors"

	"github.com/agentbus/agentbus/pkg/fairshare"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
)

// The tenants' limits on a host (docs/limits.md#per-tenant-limits). The host follows the tenant
// limits bucket (tenantlimits.Cache) and gives each tenant's requests of an agent, in the turns
// of the agent's slots, the weight its limits set, and its part of the tenant's cap on the
// requests running at once over every host (grants.go). A change reaches the slots' queues when
// the watch delivers it: the shares of the tenant's keys are read anew (fairshare.Reshare).

// shareKey is whose turn a request takes in its slots: its tenant's, for its agent.
type shareKey struct{ tenant, agent string }

// startLimits starts following the tenants' limits; stopLimits stops it.
func (h *Host) startLimits(ctx context.Context) error {
	if c := h.cfg.TenantLimits; c != nil {
		h.limits.Store(c)
		cancel := c.Subscribe(h.limitsChanged)
		h.unfollowLimits = func() error { cancel(); return nil }
		return nil
	}
	c, err := tenantlimits.Watch(ctx, h.res.TenantLimits, h.limitsChanged, h.log)
	if err != nil {
		return err
	}
	h.limits.Store(c)
	h.unfollowLimits = c.Close
	return nil
}

func (h *Host) stopLimits() error {
	if h.unfollowLimits != nil {
		return h.unfollowLimits()
	}
	return nil
}

// tenantLimits returns the limits of the tenant's requests of agent as set: nil values where
// nothing is set.
func (h *Host) tenantLimits(k shareKey) tenantlimits.Values {
	return h.limits.Load().Limits(k.tenant).For(k.agent)
}

// capOf returns the tenant's cap on its requests of the agent running at once over every host;
// 0 when none.
func (h *Host) capOf(k shareKey) int {
	if v := h.tenantLimits(k); v.MaxConcurrent != nil {
		return *v.MaxConcurrent
	}
	return h.cfg.TenantMaxConcurrent
}

// shareOf is the share of the tenant's requests of an agent in its slots (the slots' queues ask
// it, under h.mu): HostConfig.Share's, with the weight the tenant's limits set, and capped by
// the host's grant of the tenant's cap across the hosts.
func (h *Host) shareOf(k shareKey) fairshare.Share {
	var s fairshare.Share
	if h.cfg.Share != nil {
		s = h.cfg.Share(k.tenant, k.agent)
	}
	if v := h.tenantLimits(k); v.Weight != nil {
		s.Weight = *v.Weight
	}
	if g, capped := h.grants.local(k); capped {
		switch {
		case g == 0:
			s.Hold = true
			h.grants.kick() // a request waits for a grant
		case s.MaxConcurrent <= 0 || g < s.MaxConcurrent:
			s.MaxConcurrent = g
		}
	}
	return s
}

// limitsChanged takes in a change of a tenant's limits: its weights and caps are read anew.
func (h *Host) limitsChanged(c *tenantlimits.Cache, tenant string) {
	h.limits.CompareAndSwap(nil, c) // while it loads
	h.reshare(func(k shareKey) bool { return k.tenant == tenant })
	h.grants.kick()
}

// reshare reads anew the shares of the keys match takes in every slots' queue, and has what
// they let out now run.
func (h *Host) reshare(match func(shareKey) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[*slots]bool{}
	for _, s := range h.slots {
		if seen[s] {
			continue
		}
		seen[s] = true
		for range min(s.ready.Reshare(match), s.size) {
			h.wakeLocked(s)
		}
	}
}

// errNoGrants: the grants' bucket could not be watched.
var errNoGrants = errors.New("watching the slot grants")
