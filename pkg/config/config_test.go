package config_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/config"
)

// env returns a LookupEnv over m; variables not in m are unset, whatever the process has.
func env(m map[string]string) config.LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func load(t *testing.T, args []string, vars map[string]string) (config.Config, error) {
	t.Helper()
	var out bytes.Buffer
	return config.Load("test", args, env(vars), &out)
}

func TestDefaults(t *testing.T) {
	c, err := load(t, nil, nil)
	require.NoError(t, err, "Load with nothing set")
	want := config.Config{
		HTTPAddr:                  "127.0.0.1:8080",
		DataDir:                   "./data",
		NATSListen:                "127.0.0.1:4222",
		Partitions:                16,
		Replicas:                  1,
		WebhookTimeout:            30 * time.Second,
		ShutdownTimeout:           10 * time.Second,
		HistoryMaxAge:             180 * 24 * time.Hour,
		MaxFileBytes:              25 << 20,
		RateLimit:                 50,
		RateBurst:                 100,
		TenantWriteRate:           1,
		TenantWriteBurst:          120,
		TenantListenRate:          50,
		TenantListenBurst:         1000,
		MaxWaitingPerTenant:       1000,
		MaxBodyBytesPerTenant:     256 << 20,
		MaxListenersPerKey:        20,
		MaxListenersPerTenant:     200,
		ListenBufferBytes:         256 << 10,
		ContinueAsNewEvents:       1000,
		MaxDeliveries:             5,
		RetryBackoff:              time.Second,
		AckWait:                   10 * time.Second,
		ConsumerInactiveThreshold: time.Hour,
		PartitionIdleAfter:        30 * time.Second,
		LogLevel:                  slog.LevelInfo,
		MemoryLimit:               256 << 20,

		MaxSubscriptionsPerTenant: 10,
		MaxRemoteAgentsPerTenant:  10,
		MaxKeysPerTenant:          100,
		TenantIDHold:              15 * time.Minute,
		SubscriptionTimeout:       10 * time.Second,
		SubscriptionRetryFor:      24 * time.Hour,
		SubscriptionMaxBackoff:    10 * time.Minute,
		Echo:                      true,

		TenantMaxBytes:         1 << 30,
		TenantMaxInstances:     100_000,
		StoreGuardLargePercent: 90,
		StoreGuardAllPercent:   97,
	}
	assert.Equal(t, want, c, "defaults")
}

// overrideCase is one setting given in the environment or on the command line, and what Load
// must make of it.
type overrideCase struct {
	name  string
	vars  map[string]string
	args  []string
	check func(*testing.T, config.Config)
}

// testOverrides loads each case's settings and runs its check.
func testOverrides(t *testing.T, tests []overrideCase) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.vars)
			require.NoError(t, err, "Load")
			tt.check(t, c)
			if t.Failed() {
				t.Logf("Load(%v, %v) = %+v", tt.args, tt.vars, c)
			}
		})
	}
}

// Environment over defaults, flags over environment.
func TestOverrides(t *testing.T) {
	testOverrides(t, []overrideCase{
		{
			name:  "env overrides http addr",
			vars:  map[string]string{"AGENTBUS_HTTP_ADDR": ":9000"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, ":9000", c.HTTPAddr) },
		},
		{
			name:  "flag overrides env",
			vars:  map[string]string{"AGENTBUS_HTTP_ADDR": ":9000"},
			args:  []string{"-http-addr", ":9100"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, ":9100", c.HTTPAddr) },
		},
		{
			name:  "flag with equals and double dash",
			args:  []string{"--partitions=7"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 7, c.Partitions) },
		},
		{
			name:  "env partitions",
			vars:  map[string]string{"AGENTBUS_PARTITIONS": "64"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 64, c.Partitions) },
		},
		{
			name:  "flag partitions over env",
			vars:  map[string]string{"AGENTBUS_PARTITIONS": "64"},
			args:  []string{"-partitions", "4"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 4, c.Partitions) },
		},
		{
			name:  "env webhook timeout",
			vars:  map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "1m30s"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 90*time.Second, c.WebhookTimeout) },
		},
		{
			name:  "flag webhook timeout over env",
			vars:  map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "1m"},
			args:  []string{"-webhook-timeout", "5s"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 5*time.Second, c.WebhookTimeout) },
		},
	})
}

// Shutdown, continue-as-new and the workflow host's settings.
func TestOverridesOfLifecycle(t *testing.T) {
	testOverrides(t, []overrideCase{
		{
			name: "shutdown timeout 10s by default, the host's handlers get all but a second",
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, 10*time.Second, c.StopTimeout())
				assert.Equal(t, 9*time.Second, c.Host().ShutdownGrace)
			},
		},
		{
			name: "shutdown timeout 0 means the webhook timeout plus 5s",
			vars: map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "20s", "AGENTBUS_SHUTDOWN_TIMEOUT": "0"},
			check: func(t *testing.T, c config.Config) {
				assert.Zero(t, c.ShutdownTimeout)
				assert.Equal(t, 25*time.Second, c.StopTimeout())
			},
		},
		{
			name:  "flag shutdown timeout",
			vars:  map[string]string{"AGENTBUS_SHUTDOWN_TIMEOUT": "1m"},
			args:  []string{"-shutdown-timeout", "12s"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 12*time.Second, c.StopTimeout()) },
		},
		{
			name: "a short shutdown timeout keeps a quarter for exiting",
			vars: map[string]string{"AGENTBUS_SHUTDOWN_TIMEOUT": "2s"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, 500*time.Millisecond, c.ExitReserve())
				assert.Equal(t, 1500*time.Millisecond, c.Host().ShutdownGrace)
			},
		},
		{
			name:  "drain delay off by default",
			check: func(t *testing.T, c config.Config) { assert.Zero(t, c.DrainDelay) },
		},
		{
			name:  "env drain delay",
			vars:  map[string]string{"AGENTBUS_DRAIN_DELAY": "5s"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 5*time.Second, c.DrainDelay) },
		},
		{
			name:  "flag drain delay over env",
			vars:  map[string]string{"AGENTBUS_DRAIN_DELAY": "5s"},
			args:  []string{"-drain-delay", "1500ms"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, 1500*time.Millisecond, c.DrainDelay) },
		},
		{
			name:  "env continue-as-new",
			vars:  map[string]string{"AGENTBUS_CONTINUE_AS_NEW_EVENTS": "-1"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, -1, c.ContinueAsNewEvents) },
		},
		{
			name: "idle timeout 0 means never",
			vars: map[string]string{"AGENTBUS_IDLE_TIMEOUT": "0"},
			check: func(t *testing.T, c config.Config) {
				assert.Zero(t, c.IdleTimeout)
				assert.Zero(t, c.Host().IdleTimeout)
			},
		},
		{
			name: "host settings",
			vars: map[string]string{"AGENTBUS_HOST_ID": "host-a", "AGENTBUS_IDLE_TIMEOUT": "30m", "AGENTBUS_MAX_DELIVERIES": "3",
				"AGENTBUS_RETRY_BACKOFF": "250ms", "AGENTBUS_METRICS_ADDR": "127.0.0.1:9090"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, "host-a", c.HostID)
				assert.Equal(t, 30*time.Minute, c.IdleTimeout)
				assert.Equal(t, 30*time.Minute, c.Host().IdleTimeout)
				assert.Equal(t, 3, c.MaxDeliveries)
				assert.Equal(t, 250*time.Millisecond, c.RetryBackoff)
				assert.Equal(t, "127.0.0.1:9090", c.MetricsAddr)
			},
		},
	})
}

// Strings, the bus, logging and the limits.
func TestOverridesOfTheRest(t *testing.T) {
	testOverrides(t, []overrideCase{
		{
			name: "memory limit",
			vars: map[string]string{"AGENTBUS_MEMORY_LIMIT": "1GiB"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, int64(1<<30), c.MemoryLimit)
			},
		},
		{
			name: "memory limit flag, none",
			vars: map[string]string{"AGENTBUS_MEMORY_LIMIT": "1GiB"},
			args: []string{"-memory-limit", "0"},
			check: func(t *testing.T, c config.Config) {
				assert.Zero(t, c.MemoryLimit)
			},
		},
		{
			name: "memory limit in bytes",
			args: []string{"-memory-limit", "300000000"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, int64(300_000_000), c.MemoryLimit)
			},
		},
		{
			name: "subscriptions",
			vars: map[string]string{
				"AGENTBUS_OUTBOUND_URLS": "https://*.example.com, http://127.0.0.1:*", "AGENTBUS_MAX_SUBSCRIPTIONS_PER_TENANT": "3",
				"AGENTBUS_SUBSCRIPTION_RETRY_FOR": "1h",
			},
			args: []string{"-subscription-timeout", "5s", "-subscription-max-backoff", "30s"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, "https://*.example.com,http://127.0.0.1:*", c.OutboundURLs.String())
				sc := c.Subscriptions()
				assert.Equal(t, 3, sc.MaxPerTenant)
				assert.Equal(t, 5*time.Second, sc.Timeout)
				assert.Equal(t, time.Hour, sc.RetryFor)
				assert.Equal(t, 30*time.Second, sc.MaxBackoff)
			},
		},
		{
			name: "env strings",
			vars: map[string]string{
				"AGENTBUS_NATS_URL": "nats://a:4222,nats://b:4222", "AGENTBUS_DATA_DIR": "/var/lib/agentbus",
				"AGENTBUS_NATS_LISTEN": "0.0.0.0:4333", "AGENTBUS_DEV_API_KEY": "dev-key-0123456789",
				"AGENTBUS_ADMIN_KEY": "admin-key-0123456789", "AGENTBUS_LLM_BASE_URL": "http://llm/v1",
				"AGENTBUS_LLM_MODEL": "m", "AGENTBUS_LLM_API_KEY": "k",
			},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, "nats://a:4222,nats://b:4222", c.NATSURL)
				assert.Equal(t, "/var/lib/agentbus", c.DataDir)
				assert.Equal(t, "0.0.0.0:4333", c.NATSListen)
				assert.Equal(t, "dev-key-0123456789", c.DevAPIKey)
				assert.Equal(t, "admin-key-0123456789", c.AdminKey)
				assert.Equal(t, "http://llm/v1", c.LLMBaseURL)
				assert.Equal(t, "m", c.LLMModel)
				assert.Equal(t, "k", c.LLMAPIKey)
			},
		},
		{
			name:  "empty flag clears nats listen",
			args:  []string{"-nats-listen="},
			check: func(t *testing.T, c config.Config) { assert.Empty(t, c.NATSListen) },
		},
		{
			name: "env replicas and sync-always",
			vars: map[string]string{"AGENTBUS_REPLICAS": "3", "AGENTBUS_SYNC_ALWAYS": "true"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, 3, c.Replicas)
				assert.True(t, c.SyncAlways)
			},
		},
		{
			name:  "env log level",
			vars:  map[string]string{"AGENTBUS_LOG_LEVEL": "debug"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, slog.LevelDebug, c.LogLevel) },
		},
		{
			name:  "flag log level over env",
			vars:  map[string]string{"AGENTBUS_LOG_LEVEL": "debug"},
			args:  []string{"-log-level", "warn"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, slog.LevelWarn, c.LogLevel) },
		},
		{
			name: "env limits",
			vars: map[string]string{
				"AGENTBUS_RATE_LIMIT": "2.5", "AGENTBUS_RATE_BURST": "7",
				"AGENTBUS_RATE_LIMIT_TENANTS": " acme=200:400, beta=0:1,gamma=5", "AGENTBUS_MAX_WAITING_PER_TENANT": "3",
			},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, 2.5, c.RateLimit)
				assert.Equal(t, 7, c.RateBurst)
				assert.Equal(t, 3, c.MaxWaitingPerTenant)
				assert.Equal(t, map[string]config.Rate{
					"acme": {PerSecond: 200, Burst: 400}, "beta": {PerSecond: 0, Burst: 1}, "gamma": {PerSecond: 5},
				}, c.TenantRateLimits)
			},
		},
		{
			name: "env tenant rates",
			vars: map[string]string{
				"AGENTBUS_TENANT_RATE_LIMIT": "100", "AGENTBUS_TENANT_RATE_BURST": "150",
				"AGENTBUS_TENANT_RATE_LIMIT_TENANTS": "acme=1000:1000,beta=0",
			},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, 100.0, c.TenantRateLimit)
				assert.Equal(t, 150, c.TenantRateBurst)
				assert.Equal(t, map[string]config.Rate{"acme": {PerSecond: 1000, Burst: 1000}, "beta": {}}, c.TenantRateLimitTenants)
				assert.Nil(t, c.TenantRateLimits, "the tenants' key rates")
			},
		},
		{
			name: "rate limit off",
			args: []string{"-rate-limit=0"},
			check: func(t *testing.T, c config.Config) {
				assert.Zero(t, c.RateLimit)
				assert.Equal(t, 100, c.RateBurst)
			},
		},
		{
			name: "unrelated env left alone",
			vars: map[string]string{"AGENTBUS_PARTITIONS": "16"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, 16, c.Partitions)
				assert.Equal(t, "127.0.0.1:8080", c.HTTPAddr)
			},
		},
	})
}

func TestBadValues(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		args []string
		// mention must all appear in the error.
		mention []string
	}{
		{name: "env partitions not a number", vars: map[string]string{"AGENTBUS_PARTITIONS": "lots"}, mention: []string{"AGENTBUS_PARTITIONS", "lots"}},
		{name: "env replicas not a number", vars: map[string]string{"AGENTBUS_REPLICAS": "3.5"}, mention: []string{"AGENTBUS_REPLICAS"}},
		{name: "env webhook timeout without unit", vars: map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "30"}, mention: []string{"AGENTBUS_WEBHOOK_TIMEOUT"}},
		{name: "env continue-as-new not a number", vars: map[string]string{"AGENTBUS_CONTINUE_AS_NEW_EVENTS": "1e3"}, mention: []string{"AGENTBUS_CONTINUE_AS_NEW_EVENTS"}},
		{name: "env sync-always not a bool", vars: map[string]string{"AGENTBUS_SYNC_ALWAYS": "yes please"}, mention: []string{"AGENTBUS_SYNC_ALWAYS"}},
		{name: "env log level unknown", vars: map[string]string{"AGENTBUS_LOG_LEVEL": "verbose"}, mention: []string{"AGENTBUS_LOG_LEVEL"}},
		{name: "flag partitions not a number", args: []string{"-partitions", "x"}, mention: []string{"partitions"}},
		{name: "flag webhook timeout bad", args: []string{"-webhook-timeout", "soon"}, mention: []string{"webhook-timeout"}},
		{name: "unknown flag", args: []string{"-no-such-flag"}, mention: []string{"no-such-flag"}},
		{name: "positional argument", args: []string{"extra"}, mention: []string{"extra"}},
		{name: "env partitions zero", vars: map[string]string{"AGENTBUS_PARTITIONS": "0"}, mention: []string{"partitions"}},
		{name: "env partitions too many", vars: map[string]string{"AGENTBUS_PARTITIONS": "1025"}, mention: []string{"partitions"}},
		{name: "flag replicas zero", args: []string{"-replicas=0"}, mention: []string{"replicas"}},
		{name: "zero webhook timeout", vars: map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "0s"}, mention: []string{"webhook-timeout"}},
		{name: "negative rate limit", vars: map[string]string{"AGENTBUS_RATE_LIMIT": "-1"}, mention: []string{"AGENTBUS_RATE_LIMIT"}},
		{name: "rate limit not a number", args: []string{"-rate-limit", "fast"}, mention: []string{"rate-limit"}},
		{name: "zero burst", vars: map[string]string{"AGENTBUS_RATE_BURST": "0"}, mention: []string{"AGENTBUS_RATE_BURST"}},
		{name: "tenant rate without equals", vars: map[string]string{"AGENTBUS_RATE_LIMIT_TENANTS": "acme:200"}, mention: []string{"AGENTBUS_RATE_LIMIT_TENANTS", "acme:200"}},
		{name: "tenant rate bad burst", vars: map[string]string{"AGENTBUS_RATE_LIMIT_TENANTS": "acme=200:0"}, mention: []string{"acme=200:0"}},
		{name: "tenant rate negative", vars: map[string]string{"AGENTBUS_RATE_LIMIT_TENANTS": "acme=-5:10"}, mention: []string{"acme=-5:10"}},
		{name: "tenant rate bad tenant", vars: map[string]string{"AGENTBUS_RATE_LIMIT_TENANTS": "a b=5:10"}, mention: []string{"rate-limit-tenants"}},
		{name: "negative tenant rate", vars: map[string]string{"AGENTBUS_TENANT_RATE_LIMIT": "-5"}, mention: []string{"AGENTBUS_TENANT_RATE_LIMIT"}},
		{name: "negative tenant burst", vars: map[string]string{"AGENTBUS_TENANT_RATE_BURST": "-1"}, mention: []string{"AGENTBUS_TENANT_RATE_BURST"}},
		{name: "tenant's own rate bad", vars: map[string]string{"AGENTBUS_TENANT_RATE_LIMIT_TENANTS": "acme:5"}, mention: []string{"tenant-rate-limit-tenants", "acme:5"}},
		{name: "tenant rate twice", vars: map[string]string{"AGENTBUS_RATE_LIMIT_TENANTS": "acme=5:10,acme=6:10"}, mention: []string{"twice"}},
		{name: "negative drain delay", vars: map[string]string{"AGENTBUS_DRAIN_DELAY": "-1s"}, mention: []string{"AGENTBUS_DRAIN_DELAY"}},
		{name: "drain delay without unit", args: []string{"-drain-delay", "5"}, mention: []string{"drain-delay"}},
		{name: "negative idle timeout", vars: map[string]string{"AGENTBUS_IDLE_TIMEOUT": "-1h"}, mention: []string{"AGENTBUS_IDLE_TIMEOUT"}},
		{name: "short ack wait", vars: map[string]string{"AGENTBUS_ACK_WAIT": "100ms"}, mention: []string{"AGENTBUS_ACK_WAIT"}},
		{name: "short consumer inactive threshold", vars: map[string]string{"AGENTBUS_CONSUMER_INACTIVE_THRESHOLD": "30s"}, mention: []string{"AGENTBUS_CONSUMER_INACTIVE_THRESHOLD"}},
		{name: "zero deliveries", vars: map[string]string{"AGENTBUS_MAX_DELIVERIES": "0"}, mention: []string{"AGENTBUS_MAX_DELIVERIES"}},
		{name: "zero retry backoff", args: []string{"-retry-backoff", "0s"}, mention: []string{"retry-backoff"}},
		{name: "zero waiting cap", vars: map[string]string{"AGENTBUS_MAX_WAITING_PER_TENANT": "0"}, mention: []string{"AGENTBUS_MAX_WAITING_PER_TENANT"}},
		{name: "short admin key", vars: map[string]string{"AGENTBUS_ADMIN_KEY": "short"}, mention: []string{"admin key"}},
		{name: "short dev key", args: []string{"-dev-api-key", "short"}, mention: []string{"dev API key"}},
		{name: "plain http receivers elsewhere", vars: map[string]string{"AGENTBUS_OUTBOUND_URLS": "http://example.com"}, mention: []string{"AGENTBUS_OUTBOUND_URLS", "loopback"}},
		{name: "long subscription timeout", args: []string{"-subscription-timeout", "1m"}, mention: []string{"subscription-timeout"}},
		{name: "memory limit without a known unit", vars: map[string]string{"AGENTBUS_MEMORY_LIMIT": "1GB"}, mention: []string{"AGENTBUS_MEMORY_LIMIT", "1GB"}},
		{name: "negative memory limit", args: []string{"-memory-limit", "-1"}, mention: []string{"memory-limit"}},
		{name: "zero subscriptions", vars: map[string]string{"AGENTBUS_MAX_SUBSCRIPTIONS_PER_TENANT": "0"}, mention: []string{"AGENTBUS_MAX_SUBSCRIPTIONS_PER_TENANT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.args, tt.vars)
			require.Error(t, err, "Load(%v, %v) succeeded, want an error", tt.args, tt.vars)
			for _, m := range tt.mention {
				assert.ErrorContains(t, err, m, "error does not mention %q", m)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "-h", args: []string{"-h"}},
		{name: "-help", args: []string{"-help"}},
		{name: "--help after a flag", args: []string{"-partitions", "4", "--help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := config.Load("agentbus", tt.args, env(nil), &out)
			require.ErrorIs(t, err, flag.ErrHelp, "Load(%v)", tt.args)
			usage := out.String()
			for _, want := range []string{"-http-addr", "AGENTBUS_HTTP_ADDR", "-partitions", "AGENTBUS_PARTITIONS", "127.0.0.1:8080"} {
				assert.Contains(t, usage, want, "usage does not mention %q", want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	valid := func() config.Config {
		c, err := config.Load("test", nil, env(nil), &bytes.Buffer{})
		require.NoError(t, err)
		return c
	}
	tests := []struct {
		name    string
		mutate  func(*config.Config)
		wantErr bool
	}{
		{name: "defaults", mutate: func(*config.Config) {}},
		{name: "partitions 0", mutate: func(c *config.Config) { c.Partitions = 0 }, wantErr: true},
		{name: "partitions negative", mutate: func(c *config.Config) { c.Partitions = -1 }, wantErr: true},
		{name: "partitions 1", mutate: func(c *config.Config) { c.Partitions = 1 }},
		{name: "partitions 1024", mutate: func(c *config.Config) { c.Partitions = 1024 }},
		{name: "partitions 1025", mutate: func(c *config.Config) { c.Partitions = 1025 }, wantErr: true},
		{name: "replicas 0", mutate: func(c *config.Config) { c.Replicas = 0 }, wantErr: true},
		{name: "replicas 5", mutate: func(c *config.Config) { c.Replicas = 5 }},
		{name: "replicas 6", mutate: func(c *config.Config) { c.Replicas = 6 }, wantErr: true},
		{name: "webhook timeout 0", mutate: func(c *config.Config) { c.WebhookTimeout = 0 }, wantErr: true},
		{name: "webhook timeout negative", mutate: func(c *config.Config) { c.WebhookTimeout = -time.Second }, wantErr: true},
		{name: "admin key 15 chars", mutate: func(c *config.Config) { c.AdminKey = strings.Repeat("k", 15) }, wantErr: true},
		{name: "admin key 16 chars", mutate: func(c *config.Config) { c.AdminKey = strings.Repeat("k", 16) }},
		{name: "dev key 15 chars", mutate: func(c *config.Config) { c.DevAPIKey = strings.Repeat("k", 15) }, wantErr: true},
		{name: "dev key 16 chars", mutate: func(c *config.Config) { c.DevAPIKey = strings.Repeat("k", 16) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			if tt.wantErr {
				assert.Error(t, c.Validate(), "Validate()")
			} else {
				assert.NoError(t, c.Validate(), "Validate()")
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := config.Config{Partitions: 0, Replicas: 0, WebhookTimeout: 0, AdminKey: "short"}
	err := c.Validate()
	require.Error(t, err, "Validate()")
	for _, want := range []string{"partitions", "replicas", "webhook-timeout", "admin key"} {
		assert.ErrorContains(t, err, want, "Validate() does not mention %q", want)
	}
}

func TestLogger(t *testing.T) {
	tests := []struct {
		name      string
		level     string
		wantDebug bool
		wantInfo  bool
	}{
		{name: "info", level: "info", wantInfo: true},
		{name: "debug", level: "debug", wantDebug: true, wantInfo: true},
		{name: "error", level: "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, []string{"-log-level", tt.level}, nil)
			require.NoError(t, err)
			var buf bytes.Buffer
			log := c.Logger(&buf)
			log.Debug("dbg-line")
			log.Info("info-line")
			assert.Equal(t, tt.wantDebug, strings.Contains(buf.String(), "dbg-line"), "debug logged")
			assert.Equal(t, tt.wantInfo, strings.Contains(buf.String(), "info-line"), "info logged")
		})
	}
}

// TestLoggerBoundsValues (docs/configuration.md#logs): a value of a log line, a string or an
// error's text, is cut at MaxLogValueBytes, at a character's start; short values are as they were.
func TestLoggerBoundsValues(t *testing.T) {
	var buf bytes.Buffer
	log := config.Config{LogLevel: slog.LevelInfo}.Logger(&buf)
	long := strings.Repeat("é", 10_000) // two bytes each: the cut falls inside one at an odd limit
	log.Error("cancelling schedule", "name", long, "err", fmt.Errorf("reading schedule %q: %w", long, errors.New("boom")), "short", "kept")
	line := buf.String()
	assert.Less(t, len(line), 3*config.MaxLogValueBytes, "the line: %d bytes", len(line))
	assert.Contains(t, line, "more bytes)")
	assert.Contains(t, line, "short=kept")
	assert.True(t, utf8.ValidString(line), "cut at a character's start")
	assert.NotContains(t, line, strings.Repeat("é", config.MaxLogValueBytes/2+1))

	buf.Reset()
	log.Info("with a group", slog.Group("req", "path", long))
	assert.Less(t, len(buf.String()), 2*config.MaxLogValueBytes, "a group's values are bounded too")
}
