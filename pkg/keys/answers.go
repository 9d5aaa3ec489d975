package keys

import "github.com/agentbus/agentbus/pkg/timefmt"

// TenantInfo is a tenant as the admin API shows it.
type TenantInfo struct {
	ID        string       `json:"id"`
	CreatedAt timefmt.Time `json:"createdAt"`
}

// InfoOf is t as the admin API shows it.
func InfoOf(t Tenant) TenantInfo { return TenantInfo{ID: t.ID, CreatedAt: timefmt.Of(t.CreatedAt)} }

// TenantList is the answer of the tenant list: every tenant.
type TenantList struct {
	Tenants []TenantInfo `json:"tenants"`
}

// KeyList is the answer of a key list: the keys of a tenant, or the tenant-less ones.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// Created is a key just created or rotated, as the admin API answers it: its secret, shown this
// once, and its record.
type Created struct {
	Secret string `json:"key"`
	Key
	// Replaces is the id of the key a rotation revoked.
	Replaces string `json:"replaces,omitempty"`
}
