package ingress_test

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/ingress"
)

// The settings' defaults (docs/configuration.md) are the ingress's own, so that a program that
// embeds the ingress without the settings gets the limits the services have.
func TestSettingsDefaultsAreTheIngressDefaults(t *testing.T) {
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
