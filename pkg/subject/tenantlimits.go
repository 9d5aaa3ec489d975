package subject

// The tenants' limits set at runtime (package tenantlimits), the grants of the concurrency caps
// that hold across the workflow hosts, and the hosts' load reports.
const (
	// TenantLimitsBucket holds the limits a system admin set for a tenant, and for its agents,
	// by tenant id (TenantLimitsKey). Every ingress instance and workflow host follows it.
	TenantLimitsBucket = "AGENTBUS_TENANT_LIMITS"
	// SlotGrantsBucket holds, per tenant and agent whose requests running at once are capped
	// across the hosts (SlotGrantKey), how many of them each host may run: the hosts' grants
	// add up to the cap at most, and a host changes its own by compare-and-set.
	SlotGrantsBucket = "AGENTBUS_SLOT_GRANTS"
)

// HostLoad is the core NATS subject (no stream) on which every workflow host tells, every
// quarter of a second while it holds requests, how many of each tenant's requests of each agent
// it holds queued and running, and how long the oldest has waited: the ingress instances bound
// the requests a tenant has queued with it, and the hosts divide the concurrency caps by it.
const HostLoad = "agentbus.hosts.load"

// TenantLimitsKey is the TenantLimitsBucket key of a tenant's limits: its id, token safe
// (package ident checks tenant ids).
func TenantLimitsKey(tenant string) string { return tenant }

// SlotGrantKey is the SlotGrantsBucket key of a tenant's requests of an agent: the agent first,
// so that a host watches the keys of its own agents (AgentSlotGrants).
func SlotGrantKey(tenant, agent string) string { return Token(agent) + "." + tenant }

// AgentSlotGrants is the key filter of every grant of an agent's tenants.
func AgentSlotGrants(agent string) string { return Token(agent) + ".*" }

// TenantSlotGrants is the subject filter of a tenant's grants of every agent in the
// SlotGrantsBucket's stream, for the tenant's erasure.
func TenantSlotGrants(tenant string) string { return KVKeyPrefix(SlotGrantsBucket) + "*." + tenant }
