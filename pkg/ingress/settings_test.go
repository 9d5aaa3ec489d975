package ingress_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/ingress"
)

// The settings' defaults (docs/configuration.md) are the ingress's own, so that a program that
// embeds the ingress without the settings gets the limits the services have.
func TestSettingsDefaultsAreTheIngressDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load("test", nil, func(string) (string, bool) { return "", false }, io.Discard)
	require.NoError(t, err)
	ic := ingress.FromSettings(c)
	assert.Equal(t, ingress.DefaultWebhookTimeout, ic.WebhookTimeout)
	assert.EqualValues(t, ingress.DefaultMaxFileBytes, ic.MaxFileBytes)
	assert.Equal(t, ingress.DefaultMaxWaitingPerTenant, ic.MaxWaitingPerTenant)
	assert.Equal(t, ingress.DefaultMaxListenersPerKey, ic.MaxListenersPerKey)
	assert.Equal(t, ingress.DefaultMaxListenersPerTenant, ic.MaxListenersPerTenant)
	assert.Equal(t, ingress.DefaultListenBufferBytes, ic.ListenBufferBytes)
	assert.False(t, ic.MetricsElsewhere)

	c.MetricsAddr = "127.0.0.1:9090"
	assert.True(t, ingress.FromSettings(c).MetricsElsewhere, "with a metrics address, /metrics leaves the API")
}

// The rate settings reach the ingress: each key's, a tenant's keys', each tenant's and a
// tenant's own.
func TestSettingsRates(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"AGENTBUS_RATE_LIMIT": "5", "AGENTBUS_RATE_BURST": "7", "AGENTBUS_RATE_LIMIT_TENANTS": "acme=9:10",
		"AGENTBUS_TENANT_RATE_LIMIT": "100", "AGENTBUS_TENANT_RATE_LIMIT_TENANTS": "acme=1000:1500,beta=0",
	}
	c, err := config.Load("test", nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	require.NoError(t, err)
	ic := ingress.FromSettings(c)
	assert.Equal(t, ingress.Rate{PerSecond: 5, Burst: 7}, ic.RateLimit)
	assert.Equal(t, map[string]ingress.Rate{"acme": {PerSecond: 9, Burst: 10}}, ic.TenantRateLimits)
	assert.Equal(t, ingress.Rate{PerSecond: 100}, ic.TenantRateLimit, "a burst of 0: twice the rate")
	assert.Equal(t, map[string]ingress.Rate{"acme": {PerSecond: 1000, Burst: 1500}, "beta": {}}, ic.TenantRateLimitTenants)
}

// AGENTBUS_TENANT_ID_HOLD reaches the ingress; its 0, no hold, is the Config's negative.
func TestSettingsTenantIDHold(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{"": 15 * time.Minute, "90s": 90 * time.Second, "0": -1} {
		env := map[string]string{}
		if v != "" {
			env["AGENTBUS_TENANT_ID_HOLD"] = v
		}
		c, err := config.Load("test", nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
		require.NoError(t, err)
		assert.Equal(t, want, ingress.FromSettings(c).TenantIDHold, "AGENTBUS_TENANT_ID_HOLD=%q", v)
	}
}
