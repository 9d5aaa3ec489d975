package config_test

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

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
	if err != nil {
		t.Fatalf("Load with nothing set: %v", err)
	}
	want := config.Config{
		HTTPAddr:            "127.0.0.1:8080",
		DataDir:             "./data",
		NATSListen:          "127.0.0.1:4222",
		Partitions:          32,
		Replicas:            1,
		WebhookTimeout:      30 * time.Second,
		HistoryMaxAge:       180 * 24 * time.Hour,
		MaxFileBytes:        25 << 20,
		RateLimit:           50,
		RateBurst:           100,
		MaxWaitingPerTenant: 1000,
		ContinueAsNewEvents: 1000,
		IdleTimeout:         7 * 24 * time.Hour,
		MaxDeliveries:       5,
		RetryBackoff:        time.Second,
		AckWait:             10 * time.Second,
		LogLevel:            slog.LevelInfo,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
}

func TestOverrides(t *testing.T) {
	tests := []struct {
		name  string
		vars  map[string]string
		args  []string
		check func(config.Config) bool
	}{
		{
			name:  "env overrides http addr",
			vars:  map[string]string{"AGENTBUS_HTTP_ADDR": ":9000"},
			check: func(c config.Config) bool { return c.HTTPAddr == ":9000" },
		},
		{
			name:  "flag overrides env",
			vars:  map[string]string{"AGENTBUS_HTTP_ADDR": ":9000"},
			args:  []string{"-http-addr", ":9100"},
			check: func(c config.Config) bool { return c.HTTPAddr == ":9100" },
		},
		{
			name:  "flag with equals and double dash",
			args:  []string{"--partitions=7"},
			check: func(c config.Config) bool { return c.Partitions == 7 },
		},
		{
			name:  "env partitions",
			vars:  map[string]string{"AGENTBUS_PARTITIONS": "64"},
			check: func(c config.Config) bool { return c.Partitions == 64 },
		},
		{
			name:  "flag partitions over env",
			vars:  map[string]string{"AGENTBUS_PARTITIONS": "64"},
			args:  []string{"-partitions", "4"},
			check: func(c config.Config) bool { return c.Partitions == 4 },
		},
		{
			name:  "env webhook timeout",
			vars:  map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "1m30s"},
			check: func(c config.Config) bool { return c.WebhookTimeout == 90*time.Second },
		},
		{
			name:  "flag webhook timeout over env",
			vars:  map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "1m"},
			args:  []string{"-webhook-timeout", "5s"},
			check: func(c config.Config) bool { return c.WebhookTimeout == 5*time.Second },
		},
		{
			name: "shutdown timeout 0 means the webhook timeout plus 5s",
			vars: map[string]string{"AGENTBUS_WEBHOOK_TIMEOUT": "20s"},
			check: func(c config.Config) bool {
				return c.ShutdownTimeout == 0 && c.IngressShutdownTimeout() == 25*time.Second
			},
		},
		{
			name:  "flag shutdown timeout",
			vars:  map[string]string{"AGENTBUS_SHUTDOWN_TIMEOUT": "1m"},
			args:  []string{"-shutdown-timeout", "12s"},
			check: func(c config.Config) bool { return c.IngressShutdownTimeout() == 12*time.Second },
		},
		{
			name:  "drain delay off by default",
			check: func(c config.Config) bool { return c.DrainDelay == 0 },
		},
		{
			name:  "env drain delay",
			vars:  map[string]string{"AGENTBUS_DRAIN_DELAY": "5s"},
			check: func(c config.Config) bool { return c.DrainDelay == 5*time.Second },
		},
		{
			name:  "flag drain delay over env",
			vars:  map[string]string{"AGENTBUS_DRAIN_DELAY": "5s"},
			args:  []string{"-drain-delay", "1500ms"},
			check: func(c config.Config) bool { return c.DrainDelay == 1500*time.Millisecond },
		},
		{
			name:  "env continue-as-new",
			vars:  map[string]string{"AGENTBUS_CONTINUE_AS_NEW_EVENTS": "-1"},
			check: func(c config.Config) bool { return c.ContinueAsNewEvents == -1 },
		},
		{
			name:  "idle timeout 0 means never",
			vars:  map[string]string{"AGENTBUS_IDLE_TIMEOUT": "0"},
			check: func(c config.Config) bool { return c.IdleTimeout == 0 && c.HostIdleTimeout() < 0 },
		},
		{
			name: "host settings",
			vars: map[string]string{"AGENTBUS_HOST_ID": "host-a", "AGENTBUS_IDLE_TIMEOUT": "30m", "AGENTBUS_MAX_DELIVERIES": "3",
				"AGENTBUS_RETRY_BACKOFF": "250ms", "AGENTBUS_METRICS_ADDR": "127.0.0.1:9090"},
			check: func(c config.Config) bool {
				return c.HostID == "host-a" && c.IdleTimeout == 30*time.Minute && c.HostIdleTimeout() == 30*time.Minute &&
					c.MaxDeliveries == 3 && c.RetryBackoff == 250*time.Millisecond && c.MetricsAddr == "127.0.0.1:9090"
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
			check: func(c config.Config) bool {
				return c.NATSURL == "nats://a:4222,nats://b:4222" && c.DataDir == "/var/lib/agentbus" &&
					c.NATSListen == "0.0.0.0:4333" && c.DevAPIKey == "dev-key-0123456789" &&
					c.AdminKey == "admin-key-0123456789" && c.LLMBaseURL == "http://llm/v1" &&
					c.LLMModel == "m" && c.LLMAPIKey == "k"
			},
		},
		{
			name:  "empty flag clears nats listen",
			args:  []string{"-nats-listen="},
			check: func(c config.Config) bool { return c.NATSListen == "" },
		},
		{
			name:  "env replicas and sync-always",
			vars:  map[string]string{"AGENTBUS_REPLICAS": "3", "AGENTBUS_SYNC_ALWAYS": "true"},
			check: func(c config.Config) bool { return c.Replicas == 3 && c.SyncAlways },
		},
		{
			name:  "env log level",
			vars:  map[string]string{"AGENTBUS_LOG_LEVEL": "debug"},
			check: func(c config.Config) bool { return c.LogLevel == slog.LevelDebug },
		},
		{
			name:  "flag log level over env",
			vars:  map[string]string{"AGENTBUS_LOG_LEVEL": "debug"},
			args:  []string{"-log-level", "warn"},
			check: func(c config.Config) bool { return c.LogLevel == slog.LevelWarn },
		},
		{
			name: "env limits",
			vars: map[string]string{
				"AGENTBUS_RATE_LIMIT": "2.5", "AGENTBUS_RATE_BURST": "7",
				"AGENTBUS_RATE_LIMIT_TENANTS": " acme=200:400, beta=0:1,gamma=5", "AGENTBUS_MAX_WAITING_PER_TENANT": "3",
			},
			check: func(c config.Config) bool {
				return c.RateLimit == 2.5 && c.RateBurst == 7 && c.MaxWaitingPerTenant == 3 &&
					reflect.DeepEqual(c.TenantRateLimits, map[string]config.Rate{
						"acme": {PerSecond: 200, Burst: 400}, "beta": {PerSecond: 0, Burst: 1}, "gamma": {PerSecond: 5},
					})
			},
		},
		{
			name:  "rate limit off",
			args:  []string{"-rate-limit=0"},
			check: func(c config.Config) bool { return c.RateLimit == 0 && c.RateBurst == 100 },
		},
		{
			name:  "unrelated env left alone",
			vars:  map[string]string{"AGENTBUS_PARTITIONS": "16"},
			check: func(c config.Config) bool { return c.Partitions == 16 && c.HTTPAddr == "127.0.0.1:8080" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.vars)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !tt.check(c) {
				t.Errorf("Load(%v, %v) = %+v", tt.args, tt.vars, c)
			}
		})
	}
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
		{name: "tenant rate twice", vars: map[string]string{"AGENTBUS_RATE_LIMIT_TENANTS": "acme=5:10,acme=6:10"}, mention: []string{"twice"}},
		{name: "negative drain delay", vars: map[string]string{"AGENTBUS_DRAIN_DELAY": "-1s"}, mention: []string{"AGENTBUS_DRAIN_DELAY"}},
		{name: "drain delay without unit", args: []string{"-drain-delay", "5"}, mention: []string{"drain-delay"}},
		{name: "negative idle timeout", vars: map[string]string{"AGENTBUS_IDLE_TIMEOUT": "-1h"}, mention: []string{"AGENTBUS_IDLE_TIMEOUT"}},
		{name: "short ack wait", vars: map[string]string{"AGENTBUS_ACK_WAIT": "100ms"}, mention: []string{"AGENTBUS_ACK_WAIT"}},
		{name: "zero deliveries", vars: map[string]string{"AGENTBUS_MAX_DELIVERIES": "0"}, mention: []string{"AGENTBUS_MAX_DELIVERIES"}},
		{name: "zero retry backoff", args: []string{"-retry-backoff", "0s"}, mention: []string{"retry-backoff"}},
		{name: "zero waiting cap", vars: map[string]string{"AGENTBUS_MAX_WAITING_PER_TENANT": "0"}, mention: []string{"AGENTBUS_MAX_WAITING_PER_TENANT"}},
		{name: "short admin key", vars: map[string]string{"AGENTBUS_ADMIN_KEY": "short"}, mention: []string{"admin key"}},
		{name: "short dev key", args: []string{"-dev-api-key", "short"}, mention: []string{"dev API key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.args, tt.vars)
			if err == nil {
				t.Fatalf("Load(%v, %v) succeeded, want an error", tt.args, tt.vars)
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
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
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("Load(%v) err = %v, want flag.ErrHelp", tt.args, err)
			}
			usage := out.String()
			for _, want := range []string{"-http-addr", "AGENTBUS_HTTP_ADDR", "-partitions", "AGENTBUS_PARTITIONS", "127.0.0.1:8080"} {
				if !strings.Contains(usage, want) {
					t.Errorf("usage does not mention %q:\n%s", want, usage)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	valid := func() config.Config {
		c, err := config.Load("test", nil, env(nil), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
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
			if err := c.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := config.Config{Partitions: 0, Replicas: 0, WebhookTimeout: 0, AdminKey: "short"}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	for _, want := range []string{"partitions", "replicas", "webhook-timeout", "admin key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, does not mention %q", err, want)
		}
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
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			log := c.Logger(&buf)
			log.Debug("dbg-line")
			log.Info("info-line")
			if got := strings.Contains(buf.String(), "dbg-line"); got != tt.wantDebug {
				t.Errorf("debug logged = %v, want %v", got, tt.wantDebug)
			}
			if got := strings.Contains(buf.String(), "info-line"); got != tt.wantInfo {
				t.Errorf("info logged = %v, want %v", got, tt.wantInfo)
			}
		})
	}
}
