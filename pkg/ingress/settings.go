package ingress

import (
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
)

// FromSettings is the ingress configuration the AGENTBUS_* settings give
// (docs/configuration.md), for the services that serve the API: the caller fills in Conn, and
// Logger, Metrics and Tracer as it wants them. With AGENTBUS_METRICS_ADDR set, /metrics is served
// there and not on the API's address.
func FromSettings(c config.Config) Config {
	rates := func(m map[string]config.Rate) map[string]Rate {
		out := make(map[string]Rate, len(m))
		for tenant, r := range m {
			out[tenant] = Rate(r)
		}
		return out
	}
	cfg := Config{
		Bus:                      c.Bus(),
		AdminKey:                 c.AdminKey,
		WebhookTimeout:           c.WebhookTimeout,
		MaxFileBytes:             c.MaxFileBytes,
		RateLimit:                Rate{PerSecond: c.RateLimit, Burst: c.RateBurst},
		TenantRateLimits:         rates(c.TenantRateLimits),
		MaxWaitingPerTenant:      c.MaxWaitingPerTenant,
		MaxBodyBytesPerTenant:    c.MaxBodyBytesPerTenant,
		MaxListenersPerKey:       c.MaxListenersPerKey,
		MaxListenersPerTenant:    c.MaxListenersPerTenant,
		ListenBufferBytes:        c.ListenBufferBytes,
		MetricsElsewhere:         c.MetricsAddr != "",
		Subscriptions:            c.Subscriptions(),
		MaxRemoteAgentsPerTenant: c.MaxRemoteAgentsPerTenant,
		MaxKeysPerTenant:         c.MaxKeysPerTenant,
		TenantIDHold:             c.TenantIDHold,
		IdleTimeout:              c.IdleTimeout,

		TenantRateLimit:        Rate{PerSecond: c.TenantRateLimit, Burst: c.TenantRateBurst},
		TenantRateLimitTenants: rates(c.TenantRateLimitTenants),
		TenantWriteRate:        Rate{PerSecond: c.TenantWriteRate, Burst: c.TenantWriteBurst},
		TenantListenRate:       Rate{PerSecond: c.TenantListenRate, Burst: c.TenantListenBurst},
	}
	if c.TenantIDHold == 0 {
		cfg.TenantIDHold = -1 // the setting's 0 is none; the Config's, its default
	}
	cfg.Quotas, cfg.StoreGuard = storageSettings(c)
	cfg.TenantLimits = tenantlimits.Defaults{MaxQueued: c.TenantMaxQueued, MaxConcurrent: c.TenantMaxConcurrent}
	return cfg
}
