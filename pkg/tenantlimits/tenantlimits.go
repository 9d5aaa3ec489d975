// Package tenantlimits is what a system admin sets per tenant, and per tenant and agent, while
// agentbus runs: a tenant's weight in the turns of an agent's handler slots, its requests of an
// agent running at once and queued, its request rates, and its storage quotas. The limits live
// in the bucket AGENTBUS_TENANT_LIMITS, one record per tenant (Store); every ingress instance
// and workflow host follows the bucket with a watch (Cache) and applies a change within
// moments. A tenant without a record, and every value a record leaves out, gets the
// deployment's settings (Defaults, and the rates and quotas the ingress is configured with).
//
// It holds and checks the values; it enforces none of them. The ingress refuses what passes a
// rate, a queue or a quota; the workflow hosts give slots by the weights and caps
// (docs/limits.md#per-tenant-limits).
package tenantlimits

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// Rate is a request rate: PerSecond requests a second on average, and bursts of up to Burst.
type Rate struct {
	// PerSecond is the rate; 0 means no limit.
	PerSecond float64 `json:"perSecond"`
	// Burst is the bucket's size; 0 means twice the rate, at least 1.
	Burst int `json:"burst,omitempty"`
}

// Values are the limits of a tenant's requests of one agent. A value left out (nil) is the one
// under it: an agent's, the tenant's; the tenant's, the deployment's default.
type Values struct {
	// Weight is the tenant's part of the turns of the agent's handler slots on each host: a
	// tenant of weight 3 gets three slots to another's one while both wait. 1 to 1000.
	Weight *int `json:"weight,omitempty"`
	// MaxConcurrent caps the tenant's requests of the agent running at once, over every host
	// together. 0 means no cap.
	MaxConcurrent *int `json:"maxConcurrent,omitempty"`
	// MaxQueued caps the tenant's requests of the agent accepted and waiting to run; past it
	// the ingress answers 429 too-many-queued. 0 means no cap.
	MaxQueued *int `json:"maxQueued,omitempty"`
	// Rate, on an agent, is the rate of the tenant's calls to it (all its keys, every ingress
	// instance together); on the tenant, the rate of all its requests (Limits.Rate).
	Rate *Rate `json:"rate,omitempty"`
}

// Limits is a tenant's record: its own values, which hold for each of its agents (but Rate,
// which is the tenant's whole), and the overrides of some agents.
type Limits struct {
	Values
	// KeyRate is the rate of each of the tenant's API keys.
	KeyRate *Rate `json:"keyRate,omitempty"`
	// WriteRate is the rate of the tenant's configuration writes (its keys, remote agents and
	// subscriptions; docs/limits.md#configuration-writes), all its keys together.
	WriteRate *Rate `json:"writeRate,omitempty"`
	// ListenRate is the rate of the history listen streams the tenant opens, all its keys
	// together (docs/limits.md#listen-streams).
	ListenRate *Rate `json:"listenRate,omitempty"`
	// MaxBytes is the bytes the tenant may keep stored, MaxInstances its workflow instances
	// (docs/limits.md#storage-quotas). 0 means no quota.
	MaxBytes     *int64 `json:"maxBytes,omitempty"`
	MaxInstances *int64 `json:"maxInstances,omitempty"`
	// Agents are the values of the tenant's requests of some of its agents, by agent name, in
	// place of the tenant's.
	Agents map[string]Values `json:"agents,omitempty"`
}

// Bounds of the values (Validate).
const (
	MaxWeight        = 1000
	MaxConcurrentCap = 100_000
	MaxQueuedCap     = 10_000_000
	MaxPerSecond     = 1_000_000
	MaxBurst         = 10_000_000
	MaxBytesQuota    = 1 << 50 // 1 PiB
	MaxInstanceQuota = 1_000_000_000_000
	// MaxAgents bounds the agents a record names.
	MaxAgents = 256
)

// FieldError is a value Validate refuses: Field names it as the JSON has it
// ("agents.Echo.maxQueued"), Reason what is wrong.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Reason }

// Validate checks every value against its bounds, and the agents' names; the error is a
// *FieldError.
func (l Limits) Validate() error {
	if err := l.Values.validate(""); err != nil {
		return err
	}
	if err := checkRate("keyRate", l.KeyRate); err != nil {
		return err
	}
	if err := checkRate("writeRate", l.WriteRate); err != nil {
		return err
	}
	if err := checkRate("listenRate", l.ListenRate); err != nil {
		return err
	}
	if err := checkInt64("maxBytes", l.MaxBytes, MaxBytesQuota); err != nil {
		return err
	}
	if err := checkInt64("maxInstances", l.MaxInstances, MaxInstanceQuota); err != nil {
		return err
	}
	if len(l.Agents) > MaxAgents {
		return &FieldError{"agents", fmt.Sprintf("names %d agents, at most %d", len(l.Agents), MaxAgents)}
	}
	for _, name := range slices.Sorted(maps.Keys(l.Agents)) {
		if err := subject.CheckName("", name); err != nil {
			var ve *subject.ValueError
			if errors.As(err, &ve) {
				return &FieldError{"agents", "has a name that " + ve.Reason}
			}
			return &FieldError{"agents", "has an invalid name"}
		}
		if err := l.Agents[name].validate("agents." + name + "."); err != nil {
			return err
		}
	}
	return nil
}

func (v Values) validate(prefix string) error {
	if v.Weight != nil && (*v.Weight < 1 || *v.Weight > MaxWeight) {
		return &FieldError{prefix + "weight", fmt.Sprintf("must be a whole number from 1 to %d", MaxWeight)}
	}
	if err := checkInt(prefix+"maxConcurrent", v.MaxConcurrent, MaxConcurrentCap); err != nil {
		return err
	}
	if err := checkInt(prefix+"maxQueued", v.MaxQueued, MaxQueuedCap); err != nil {
		return err
	}
	return checkRate(prefix+"rate", v.Rate)
}

func checkInt(field string, v *int, max int) error {
	if v != nil && (*v < 0 || *v > max) {
		return &FieldError{field, fmt.Sprintf("must be a whole number from 0 (no limit) to %d", max)}
	}
	return nil
}

func checkInt64(field string, v *int64, max int64) error {
	if v != nil && (*v < 0 || *v > max) {
		return &FieldError{field, fmt.Sprintf("must be a whole number from 0 (no quota) to %d", max)}
	}
	return nil
}

func checkRate(field string, r *Rate) error {
	if r == nil {
		return nil
	}
	if math.IsNaN(r.PerSecond) || r.PerSecond < 0 || r.PerSecond > MaxPerSecond {
		return &FieldError{field + ".perSecond", fmt.Sprintf("must be a number from 0 (no limit) to %d", MaxPerSecond)}
	}
	if r.Burst < 0 || r.Burst > MaxBurst {
		return &FieldError{field + ".burst", fmt.Sprintf("must be a whole number from 0 (twice the rate) to %d", MaxBurst)}
	}
	return nil
}

// For returns the values of the tenant's requests of agent: the agent's own where the record
// sets them, else the tenant's; nil where neither does. Rate is the agent's only: the tenant's
// Rate bounds all its requests, not each agent's.
func (l Limits) For(agent string) Values {
	v := l.Values
	v.Rate = nil
	a, ok := l.Agents[agent]
	if !ok {
		return v
	}
	if a.Weight != nil {
		v.Weight = a.Weight
	}
	if a.MaxConcurrent != nil {
		v.MaxConcurrent = a.MaxConcurrent
	}
	if a.MaxQueued != nil {
		v.MaxQueued = a.MaxQueued
	}
	v.Rate = a.Rate
	return v
}

// Defaults are the values of a tenant without a record, and of what a record leaves out: the
// deployment's settings. The rates and storage quotas have theirs in the ingress's
// configuration.
type Defaults struct {
	// MaxConcurrent caps each tenant's requests of an agent running at once over every host
	// (AGENTBUS_TENANT_MAX_CONCURRENT); 0 means no cap.
	MaxConcurrent int
	// MaxQueued caps each tenant's requests of an agent queued (AGENTBUS_TENANT_MAX_QUEUED); 0
	// means no cap.
	MaxQueued int
}

// Effective are the limits that hold for a tenant's requests of an agent: the record's values
// with the defaults filled in. Zero means no limit.
type Effective struct {
	Weight        int  `json:"weight"`
	MaxConcurrent int  `json:"maxConcurrent"`
	MaxQueued     int  `json:"maxQueued"`
	Rate          Rate `json:"rate"`
}

// Resolve returns what holds for the tenant's requests of agent.
func (l Limits) Resolve(agent string, d Defaults) Effective {
	v := l.For(agent)
	e := Effective{Weight: 1, MaxConcurrent: d.MaxConcurrent, MaxQueued: d.MaxQueued}
	if v.Weight != nil {
		e.Weight = *v.Weight
	}
	if v.MaxConcurrent != nil {
		e.MaxConcurrent = *v.MaxConcurrent
	}
	if v.MaxQueued != nil {
		e.MaxQueued = *v.MaxQueued
	}
	if v.Rate != nil {
		e.Rate = *v.Rate
	}
	return e
}

// Record is a tenant's limits as the admin API answers them: what was set, and what holds.
type Record struct {
	Tenant string `json:"tenant"`
	// Limits is what was set; empty when nothing was.
	Limits Limits `json:"limits"`
	// Effective is what holds: the tenant's values with the deployment's filled in, and each
	// agent's that Limits names.
	Effective EffectiveLimits `json:"effective"`
	// UpdatedAt and UpdatedBy (a key id, "admin" for AGENTBUS_ADMIN_KEY) tell the last change;
	// left out when nothing was set.
	UpdatedAt *timefmt.Time `json:"updatedAt,omitempty"`
	UpdatedBy string        `json:"updatedBy,omitempty"`
}

// EffectiveLimits are the limits that hold for a tenant: those of its requests of an agent the
// record does not name, its own rates and quotas, and those of the agents the record names.
// Zero means no limit.
type EffectiveLimits struct {
	Effective
	KeyRate      Rate                 `json:"keyRate"`
	WriteRate    Rate                 `json:"writeRate"`
	ListenRate   Rate                 `json:"listenRate"`
	MaxBytes     int64                `json:"maxBytes"`
	MaxInstances int64                `json:"maxInstances"`
	Agents       map[string]Effective `json:"agents,omitempty"`
}
