// Package config reads agentbus's settings (docs/configuration.md) from environment variables and from
// command-line flags that mirror them: AGENTBUS_HTTP_ADDR is also -http-addr, and a flag given
// on the command line wins over the variable.
//
// It only reads and checks settings; the services decide what to do with them.
package config

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/gogc"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/subscription"
)

// Config holds every setting. Each service uses the ones it needs.
type Config struct {
	HTTPAddr         string
	NATSURL          string
	DataDir          string
	NATSListen       string
	DevAPIKey        string
	AdminKey         string
	Partitions       int
	Replicas         int
	WebhookTimeout   time.Duration
	ShutdownTimeout  time.Duration
	DrainDelay       time.Duration
	HistoryMaxAge    time.Duration
	MaxFileBytes     int64
	RateLimit        float64
	RateBurst        int
	TenantRateLimits map[string]Rate
	// TenantRateLimit and TenantRateBurst are every tenant's rate, all its keys together (0:
	// none; a burst of 0 is twice the rate), and TenantRateLimitTenants a tenant's own.
	TenantRateLimit        float64
	TenantRateBurst        int
	TenantRateLimitTenants map[string]Rate
	MaxWaitingPerTenant    int
	MaxBodyBytesPerTenant  int64
	MaxListenersPerKey     int
	MaxListenersPerTenant  int
	ListenBufferBytes      int
	ContinueAsNewEvents    int
	HostID                 string
	IdleTimeout            time.Duration
	MaxDeliveries          int
	RetryBackoff           time.Duration
	AckWait                time.Duration
	// TenantWriteRate and TenantWriteBurst are every tenant's rate of configuration writes
	// (keys, remote agents, subscriptions; 0: none; a burst of 0 is twice the rate).
	TenantWriteRate  float64
	TenantWriteBurst int
	// TenantListenRate and TenantListenBurst are every tenant's rate of history listen streams
	// opened (0: none; a burst of 0 is twice the rate).
	TenantListenRate  float64
	TenantListenBurst int
	// ConsumerInactiveThreshold is how long an agent's partition consumer stays once no host
	// pulls from it (agent.HostConfig.ConsumerInactiveThreshold).
	ConsumerInactiveThreshold time.Duration
	// PartitionIdleAfter is how long a partition goes without a request before its host stops
	// pulling it until a request for it comes; 0 never (agent.HostConfig.IdleAfter).
	PartitionIdleAfter time.Duration
	MetricsAddr        string
	PprofAddr          string
	// MemoryLimit is the process's soft memory limit in bytes (0: none), unless GOMEMLIMIT
	// sets one (package gogc).
	MemoryLimit int64
	SyncAlways  bool
	LLMBaseURL  string
	LLMModel    string
	LLMAPIKey   string
	LogLevel    slog.Level
	// OutboundURLs is the allow-list of the URLs tenants may make agentbus call: event
	// subscription receivers and their remote agents.
	OutboundURLs              *outbound.AllowList
	MaxSubscriptionsPerTenant int
	MaxRemoteAgentsPerTenant  int
	MaxKeysPerTenant          int
	// TenantIDHold is how long a deleted tenant's id stays taken; 0: not at all.
	TenantIDHold           time.Duration
	SubscriptionTimeout    time.Duration
	SubscriptionRetryFor   time.Duration
	SubscriptionMaxBackoff time.Duration
	// Echo runs the built-in reference agent Echo.
	Echo bool

	// The storage quotas of each tenant (0: none) and the store guard (docs/limits.md).
	TenantMaxBytes, TenantMaxInstances           int64
	StoreGuardLargePercent, StoreGuardAllPercent int
	StoreMaxBytes                                int64
	// TenantMaxQueued and TenantMaxConcurrent cap each tenant's requests of an agent queued and
	// running at once over every host (0: none), unless the tenant's limits set their own.
	TenantMaxQueued, TenantMaxConcurrent int
}

// Rate is one tenant's rate limit: PerSecond requests a second (0: no limit) and bursts of up to
// Burst (0: twice PerSecond).
type Rate struct {
	PerSecond float64
	Burst     int
}

// parseTenantRates reads "tenant=rate[:burst],…", for example "acme=200:400,beta=5:10", the
// value of the setting name.
func parseTenantRates(name, v string) (map[string]Rate, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	bad := func(item string) error {
		return fmt.Errorf("%s: %q is not tenant=rate:burst, such as acme=200:400", name, item)
	}
	rates := make(map[string]Rate)
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		tenant, spec, ok := strings.Cut(item, "=")
		tenant = strings.TrimSpace(tenant)
		if !ok || !ident.ValidTenant(tenant) {
			return nil, bad(item)
		}
		if _, dup := rates[tenant]; dup {
			return nil, fmt.Errorf("%s: tenant %q is given twice", name, tenant)
		}
		perSec, burst, hasBurst := strings.Cut(spec, ":")
		var r Rate
		var err error
		if r.PerSecond, err = strconv.ParseFloat(strings.TrimSpace(perSec), 64); err != nil || r.PerSecond < 0 || math.IsInf(r.PerSecond, 0) {
			return nil, bad(item)
		}
		if hasBurst {
			if r.Burst, err = strconv.Atoi(strings.TrimSpace(burst)); err != nil || r.Burst < 1 {
				return nil, bad(item)
			}
		}
		rates[tenant] = r
	}
	return rates, nil
}

type setting struct {
	env, flag, def, usage string
	set                   func(string) error
}

// anyDuration is the least duration of an option that takes any.
const anyDuration = time.Duration(math.MinInt64)

// duration returns the setter of a duration option that must be at least min (anyDuration: any,
// 0: none negative, time.Nanosecond: positive); example is a valid value its error shows.
func duration(dst *time.Duration, name, example string, min time.Duration) func(string) error {
	want := "a duration such as " + example
	switch {
	case min == 0:
		want += ", or 0"
	case min == time.Nanosecond:
		want = "a positive duration such as " + example
	case min > time.Nanosecond:
		want = "a duration of at least " + min.String()
	}
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < min {
			return fmt.Errorf("%s: %q is not %s", name, v, want)
		}
		*dst = d
		return nil
	}
}

// text returns the setter of a text option.
func text(dst *string) func(string) error { return func(v string) error { *dst = v; return nil } }

// whole returns the setter of a whole-number option, negative ones included.
func whole(dst *int, name string) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not a whole number", name, v)
		}
		*dst = n
		return nil
	}
}

// positive64 returns the setter of a positive whole-number option counted in 64 bits.
func positive64(dst *int64, name string) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("%s: %q is not a positive whole number", name, v)
		}
		*dst = n
		return nil
	}
}

// boolean returns the setter of a true-or-false option.
func boolean(dst *bool, name string) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not true or false", name, v)
		}
		*dst = b
		return nil
	}
}

// memoryLimit returns the setter of the memory limit, a byte count as GOMEMLIMIT takes it.
func memoryLimit(dst *int64) func(string) error {
	return func(v string) error {
		n, ok := gogc.ParseBytes(v)
		if !ok {
			return fmt.Errorf("memory-limit: %q is not a byte count such as 256MiB, 1GiB or 0", v)
		}
		*dst = n
		return nil
	}
}

// allowList returns the setter of the outbound URLs' allow-list; an empty one is nil.
func allowList(dst **outbound.AllowList) func(string) error {
	return func(v string) error {
		a, err := outbound.ParseAllowList(v)
		if err != nil {
			return fmt.Errorf("outbound-urls: %w", err)
		}
		*dst = a
		if a.Empty() {
			*dst = nil
		}
		return nil
	}
}

// positive returns the setter of a whole-number option that must be at least 1.
func positive(dst *int, name string) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%s: %q is not a positive whole number", name, v)
		}
		*dst = n
		return nil
	}
}

// byteCount returns the setter of a whole-number option that may be 0 (none) and is counted in
// 64 bits: bytes, instances.
func byteCount(dst *int64, name string) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%s: %q is not a whole number, 0 or more", name, v)
		}
		*dst = n
		return nil
	}
}

// nonNegative returns the setter of a whole-number option that may be 0 (none).
func nonNegative(dst *int, name string) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%s: %q is not a whole number, 0 or more", name, v)
		}
		*dst = n
		return nil
	}
}

// percent returns the setter of a share in percent, 0 to 100.
func percent(dst *int, name string) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			return fmt.Errorf("%s: %q is not a whole percentage from 0 to 100", name, v)
		}
		*dst = n
		return nil
	}
}

// rate returns the setter of a requests-a-second option: a finite number, 0 or more.
func rate(dst *float64, name string) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) {
			return fmt.Errorf("%s: %q is not a number of requests a second, 0 or more", name, v)
		}
		*dst = f
		return nil
	}
}

// tenantRates returns the setter of per-tenant rates, the setting name (parseTenantRates).
func tenantRates(dst *map[string]Rate, name string) func(string) error {
	return func(v string) error {
		rates, err := parseTenantRates(name, v)
		if err != nil {
			return err
		}
		*dst = rates
		return nil
	}
}

// settings is the table of every setting: its variable, its flag, its default, its usage and
// where its value goes.
func (c *Config) settings() []setting {
	return []setting{
		{"AGENTBUS_HTTP_ADDR", "http-addr", "127.0.0.1:8080", "ingress listen address", text(&c.HTTPAddr)},
		{"AGENTBUS_NATS_URL", "nats-url", "", "NATS server URLs (comma-separated); empty means embedded (standalone only)", text(&c.NATSURL)},
		{"AGENTBUS_DATA_DIR", "data-dir", "./data", "embedded JetStream store directory", text(&c.DataDir)},
		{"AGENTBUS_NATS_LISTEN", "nats-listen", "127.0.0.1:4222", "standalone: also serve the embedded NATS here; empty keeps it in-process", text(&c.NATSListen)},
		{"AGENTBUS_DEV_API_KEY", "dev-api-key", "", "standalone: seed this tenant-admin key for tenant default (else one is generated and printed once)", text(&c.DevAPIKey)},
		{"AGENTBUS_ADMIN_KEY", "admin-key", "", "system-admin key accepted for all tenants (prefer the variable: flags show in ps)", text(&c.AdminKey)},
		{"AGENTBUS_PARTITIONS", "partitions", "16", "inbox partitions: at most this many hosts share one agent", whole(&c.Partitions, "partitions")},
		{"AGENTBUS_REPLICAS", "replicas", "1", "replicas of streams and buckets (3 on a production cluster)", whole(&c.Replicas, "replicas")},
		{"AGENTBUS_WEBHOOK_TIMEOUT", "webhook-timeout", "30s", "how long a webhook call waits for its handler", duration(&c.WebhookTimeout, "webhook-timeout", "30s", anyDuration)},
		{"AGENTBUS_SHUTDOWN_TIMEOUT", "shutdown-timeout", "10s", "how long a process takes at most to stop after SIGTERM (an ingress: after its drain delay), NATS reachable or not; synchronous calls in flight and running handlers get most of it; 0 means the webhook timeout plus 5s", duration(&c.ShutdownTimeout, "shutdown-timeout", "10s", 0)},
		{"AGENTBUS_DRAIN_DELAY", "drain-delay", "0", "ingress: how long after SIGTERM /readyz answers 503 draining while requests are still served, before the listener closes, so that load balancers stop sending first", duration(&c.DrainDelay, "drain-delay", "5s", 0)},
		{"AGENTBUS_HISTORY_MAX_AGE", "history-max-age", "4320h", "how long conversation history is kept (4320h = 180 days)", duration(&c.HistoryMaxAge, "history-max-age", "720h", time.Nanosecond)},
		{"AGENTBUS_MAX_FILE_BYTES", "max-file-bytes", "26214400", "largest uploaded file in bytes (25 MiB)", positive64(&c.MaxFileBytes, "max-file-bytes")},
		{"AGENTBUS_RATE_LIMIT", "rate-limit", "50", "requests a second per API key; 0 means no limit", rate(&c.RateLimit, "rate-limit")},
		{"AGENTBUS_RATE_BURST", "rate-burst", "100", "requests an API key may make at once above its rate", positive(&c.RateBurst, "rate-burst")},
		{"AGENTBUS_RATE_LIMIT_TENANTS", "rate-limit-tenants", "", "per-tenant rate:burst overrides, such as acme=200:400,beta=5:10", tenantRates(&c.TenantRateLimits, "rate-limit-tenants")},
		{"AGENTBUS_TENANT_RATE_LIMIT", "tenant-rate-limit", "0", "requests a second per tenant, all its keys together; 0 means no limit", rate(&c.TenantRateLimit, "tenant-rate-limit")},
		{"AGENTBUS_TENANT_RATE_BURST", "tenant-rate-burst", "0", "requests a tenant may make at once above its rate; 0 means twice the rate", nonNegative(&c.TenantRateBurst, "tenant-rate-burst")},
		{"AGENTBUS_TENANT_RATE_LIMIT_TENANTS", "tenant-rate-limit-tenants", "", "a tenant's own rate:burst, all its keys together, such as acme=1000:1000,beta=5", tenantRates(&c.TenantRateLimitTenants, "tenant-rate-limit-tenants")},
		{"AGENTBUS_TENANT_WRITE_RATE", "tenant-write-rate", "1", "configuration writes a second per tenant, all its keys together: creating, revoking and rotating keys, registering, replacing and deleting remote agents, creating and deleting subscriptions; 0 means no limit", rate(&c.TenantWriteRate, "tenant-write-rate")},
		{"AGENTBUS_TENANT_WRITE_BURST", "tenant-write-burst", "120", "configuration writes a tenant may make at once above its rate; 0 means twice the rate", nonNegative(&c.TenantWriteBurst, "tenant-write-burst")},
		{"AGENTBUS_TENANT_LISTEN_RATE", "tenant-listen-rate", "50", "history listen streams a tenant may open a second, all its keys together; 0 means no limit", rate(&c.TenantListenRate, "tenant-listen-rate")},
		{"AGENTBUS_TENANT_LISTEN_BURST", "tenant-listen-burst", "1000", "listen streams a tenant may open at once above its rate; 0 means twice the rate", nonNegative(&c.TenantListenBurst, "tenant-listen-burst")},
		{"AGENTBUS_MAX_WAITING_PER_TENANT", "max-waiting-per-tenant", "1000", "synchronous requests a tenant may have waiting for a reply at once", positive(&c.MaxWaitingPerTenant, "max-waiting-per-tenant")},
		{"AGENTBUS_MAX_BODY_BYTES_PER_TENANT", "max-body-bytes-per-tenant", "268435456", "ingress: memory of the request bodies a tenant may have being received or waiting at once on an instance, and so may requests without a known key together (256 MiB); larger than the largest body", positive64(&c.MaxBodyBytesPerTenant, "max-body-bytes-per-tenant")},
		{"AGENTBUS_MAX_LISTENERS_PER_KEY", "max-listeners-per-key", "20", "history listen streams one API key may have open at once on an ingress", positive(&c.MaxListenersPerKey, "max-listeners-per-key")},
		{"AGENTBUS_MAX_LISTENERS_PER_TENANT", "max-listeners-per-tenant", "200", "history listen streams a tenant may have open at once on an ingress", positive(&c.MaxListenersPerTenant, "max-listeners-per-tenant")},
		{"AGENTBUS_LISTEN_BUFFER_BYTES", "listen-buffer-bytes", "262144", "bytes of events a listen stream holds for a client that reads slower than its thread grows, before it ends the stream with an overflow event (256 KiB)", positive(&c.ListenBufferBytes, "listen-buffer-bytes")},
		{"AGENTBUS_TENANT_MAX_BYTES", "tenant-max-bytes", "1073741824", "bytes each tenant may keep stored (1 GiB): history, files, large payloads, dead letters, undelivered events, instance records and timers until they age out; 0 means no quota", byteCount(&c.TenantMaxBytes, "tenant-max-bytes")},
		{"AGENTBUS_TENANT_MAX_INSTANCES", "tenant-max-instances", "100000", "workflow instances each tenant may have; 0 means no quota", byteCount(&c.TenantMaxInstances, "tenant-max-instances")},
		{"AGENTBUS_STORE_GUARD_LARGE_PERCENT", "store-guard-large-percent", "90", "share of the JetStream account's storage from which requests storing more than 64 KiB are refused; 0 turns it off", percent(&c.StoreGuardLargePercent, "store-guard-large-percent")},
		{"AGENTBUS_STORE_GUARD_ALL_PERCENT", "store-guard-all-percent", "97", "share of the JetStream account's storage from which every request that stores is refused; 0 turns it off", percent(&c.StoreGuardAllPercent, "store-guard-all-percent")},
		{"AGENTBUS_TENANT_MAX_QUEUED", "tenant-max-queued", "0", "each tenant's requests of an agent that may wait to run; past it webhook, send and converse answer 429 too-many-queued; 0 means no cap", nonNegative(&c.TenantMaxQueued, "tenant-max-queued")},
		{"AGENTBUS_TENANT_MAX_CONCURRENT", "tenant-max-concurrent", "0", "each tenant's requests of an agent running at once over every workflow host together; 0 means no cap", nonNegative(&c.TenantMaxConcurrent, "tenant-max-concurrent")},
		{"AGENTBUS_STORE_MAX_BYTES", "store-max-bytes", "0", "the store guard's max storage when the JetStream account has no limit of its own (the servers' max_file_store together); 0 means the account's only", byteCount(&c.StoreMaxBytes, "store-max-bytes")},
		{"AGENTBUS_CONTINUE_AS_NEW_EVENTS", "continue-as-new-events", "1000", "run length before continue-as-new (negative disables)", whole(&c.ContinueAsNewEvents, "continue-as-new-events")},
		{"AGENTBUS_HOST_ID", "host-id", "", "workflow host: its id in heartbeats and logs; empty means hostname-pid", text(&c.HostID)},
		{"AGENTBUS_IDLE_TIMEOUT", "idle-timeout", "0", "complete an instance after this long without a message (0 never); the next message starts a new run", duration(&c.IdleTimeout, "idle-timeout", "24h", 0)},
		{"AGENTBUS_MAX_DELIVERIES", "max-deliveries", "5", "attempts of a failing request (a panic, a retryable error, a host crash) before it goes to the dead letters", positive(&c.MaxDeliveries, "max-deliveries")},
		{"AGENTBUS_RETRY_BACKOFF", "retry-backoff", "1s", "wait before the first retry of a failed request; it doubles with each attempt", duration(&c.RetryBackoff, "retry-backoff", "1s", time.Nanosecond)},
		{"AGENTBUS_ACK_WAIT", "ack-wait", "10s", "workflow host: how long the bus waits for news of a request before giving it to another host (a host that died hands its requests over after this)", duration(&c.AckWait, "ack-wait", "10s", time.Second)},
		{"AGENTBUS_CONSUMER_INACTIVE_THRESHOLD", "consumer-inactive-threshold", "1h", "workflow host: how long an agent's inbox consumers stay once no host pulls from them (an agent no host runs any more); its waiting requests stay, and its next host makes them again", duration(&c.ConsumerInactiveThreshold, "consumer-inactive-threshold", "1h", time.Minute)},
		{"AGENTBUS_PARTITION_IDLE_AFTER", "partition-idle-after", "30s", "workflow host: how long an agent's inbox partition goes without a request before the host stops pulling it until a request for it comes; 0 means never", duration(&c.PartitionIdleAfter, "partition-idle-after", "30s", 0)},
		{"AGENTBUS_METRICS_ADDR", "metrics-addr", "", "serve /healthz, /readyz and /metrics on this address, and on the ingress and the standalone no longer /metrics on the HTTP address; empty means none", text(&c.MetricsAddr)},
		{"AGENTBUS_PPROF_ADDR", "pprof-addr", "", "serve Go's profiling endpoints (/debug/pprof/) on this address; empty means none (keep it off public networks)", text(&c.PprofAddr)},
		{"AGENTBUS_MEMORY_LIMIT", "memory-limit", "256MiB", "soft limit of the memory the Go runtime holds (the garbage collector collects more often near it, never more often than at GOGC 100): a byte count with B, KiB, MiB, GiB or TiB; 0 means none; GOMEMLIMIT, when set, wins", memoryLimit(&c.MemoryLimit)},
		{"AGENTBUS_SYNC_ALWAYS", "sync-always", "false", "standalone: fsync every JetStream write before acknowledging it", boolean(&c.SyncAlways, "sync-always")},
		{"AGENTBUS_LLM_BASE_URL", "llm-base-url", "", "OpenAI-compatible chat API base URL; empty means the offline model", text(&c.LLMBaseURL)},
		{"AGENTBUS_LLM_MODEL", "llm-model", "", "chat model name", text(&c.LLMModel)},
		{"AGENTBUS_LLM_API_KEY", "llm-api-key", "", "chat API key (prefer the variable)", text(&c.LLMAPIKey)},
		{"AGENTBUS_OUTBOUND_URLS", "outbound-urls", "", "receiver URLs tenants may subscribe, comma-separated patterns such as https://*.example.com (docs/subscriptions.md); empty allows none, and the standalone then allows loopback HTTP", allowList(&c.OutboundURLs)},
		{"AGENTBUS_MAX_SUBSCRIPTIONS_PER_TENANT", "max-subscriptions-per-tenant", "10", "event subscriptions a tenant may have; each has at most one delivery in flight", positive(&c.MaxSubscriptionsPerTenant, "max-subscriptions-per-tenant")},
		{"AGENTBUS_MAX_REMOTE_AGENTS_PER_TENANT", "max-remote-agents-per-tenant", "10", "remote agents a tenant admin may register for its tenant (a system admin's are not counted); each adds an inbox stream with a consumer per partition, and a host in every process serving remote agents", positive(&c.MaxRemoteAgentsPerTenant, "max-remote-agents-per-tenant")},
		{"AGENTBUS_MAX_KEYS_PER_TENANT", "max-keys-per-tenant", "100", "ingress: API keys in force a tenant may have, and revoked keys of it kept (the most recently revoked); every ingress holds every key in memory", positive(&c.MaxKeysPerTenant, "max-keys-per-tenant")},
		{"AGENTBUS_TENANT_ID_HOLD", "tenant-id-hold", "15m", "ingress: how long after a tenant's deletion its id cannot be used for a new tenant; 0 means at once, and a new tenant of the id may then have its requests with caller-chosen ids taken for the old tenant's (10 minutes) and see its per-agent statistics (15 minutes)", duration(&c.TenantIDHold, "tenant-id-hold", "15m", 0)},
		{"AGENTBUS_SUBSCRIPTION_TIMEOUT", "subscription-timeout", "10s", "workflow host: how long one delivery of an event waits for the receiver's answer (at most 20s)", duration(&c.SubscriptionTimeout, "subscription-timeout", "10s", time.Nanosecond)},
		{"AGENTBUS_SUBSCRIPTION_RETRY_FOR", "subscription-retry-for", "24h", "workflow host: how long after an event was stored its delivery is still tried, before it is kept as undelivered", duration(&c.SubscriptionRetryFor, "subscription-retry-for", "24h", time.Nanosecond)},
		{"AGENTBUS_SUBSCRIPTION_MAX_BACKOFF", "subscription-max-backoff", "10m", "workflow host: the longest wait between two deliveries of a failing event (the first retry waits 1s, then twice as long each time)", duration(&c.SubscriptionMaxBackoff, "subscription-max-backoff", "10m", time.Nanosecond)},
		{"AGENTBUS_ECHO", "echo", "true", "standalone, workflowhost: run the built-in reference agent Echo; false serves only remote agents (one may then be named Echo)", boolean(&c.Echo, "echo")},
		{"AGENTBUS_LOG_LEVEL", "log-level", "info", "debug, info, warn or error", func(v string) error { return c.LogLevel.UnmarshalText([]byte(v)) }},
	}
}

// LookupEnv reads one environment variable and says whether it is set, as os.LookupEnv does. A
// variable set to the empty string counts as set: AGENTBUS_NATS_LISTEN= turns the listener off.
type LookupEnv func(key string) (string, bool)

// Load reads the settings: defaults, then the environment (through lookupEnv; nil means
// os.LookupEnv), then args. It returns flag.ErrHelp after printing usage to out when -h is given.
func Load(name string, args []string, lookupEnv LookupEnv, out io.Writer) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	var c Config
	settings := c.settings()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	for _, s := range settings {
		if err := s.set(s.def); err != nil {
			return Config{}, fmt.Errorf("default of %s: %w", s.env, err)
		}
		if v, ok := lookupEnv(s.env); ok {
			if err := s.set(v); err != nil {
				return Config{}, fmt.Errorf("%s: %w", s.env, err)
			}
		}
		fs.Func(s.flag, fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def), s.set)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return c, c.Validate()
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Partitions < 1 || c.Partitions > 1024 {
		errs = append(errs, fmt.Errorf("partitions %d: want 1 to 1024", c.Partitions))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5", c.Replicas))
	}
	if c.WebhookTimeout <= 0 {
		errs = append(errs, errors.New("webhook-timeout must be positive"))
	}
	if c.AdminKey != "" && len(c.AdminKey) < 16 {
		errs = append(errs, errors.New("admin key must be at least 16 characters"))
	}
	if c.SubscriptionTimeout > subscription.MaxTimeout {
		errs = append(errs, fmt.Errorf("subscription-timeout %v: at most %v", c.SubscriptionTimeout, subscription.MaxTimeout))
	}
	if c.DevAPIKey != "" && len(c.DevAPIKey) < 16 {
		errs = append(errs, errors.New("dev API key must be at least 16 characters"))
	}
	return errors.Join(errs...)
}

// StopTimeout bounds how long a process takes to stop after SIGTERM or SIGINT (an ingress:
// after its drain delay): ShutdownTimeout, or when that is zero the webhook timeout plus 5 s, so
// that a webhook call that arrived just before the signal still gets its answer.
func (c Config) StopTimeout() time.Duration {
	if c.ShutdownTimeout == 0 {
		return c.WebhookTimeout + 5*time.Second
	}
	return c.ShutdownTimeout
}

// ExitReserve is the end of StopTimeout that a process keeps for closing its NATS connection
// and flushing its traces: a second, or a quarter of StopTimeout when that is shorter than 4 s.
// Calls in flight and running handlers get the rest.
func (c Config) ExitReserve() time.Duration {
	return min(time.Second, c.StopTimeout()/4)
}

// Bus is the bus sizing every process of a deployment must share.
func (c Config) Bus() bus.Config {
	return bus.Config{Partitions: c.Partitions, Replicas: c.Replicas, HistoryMaxAge: c.HistoryMaxAge}
}

// Host is the workflow host's configuration from the settings; the caller fills in Conn,
// Agents and Logger (and Bus, from Bus).
func (c Config) Host() agent.HostConfig {
	return agent.HostConfig{
		ID:                        c.HostID,
		ContinueAsNewEvents:       c.ContinueAsNewEvents,
		IdleTimeout:               c.IdleTimeout,
		MaxDeliveries:             c.MaxDeliveries,
		RetryBackoff:              c.RetryBackoff,
		AckWait:                   c.AckWait,
		ConsumerInactiveThreshold: c.ConsumerInactiveThreshold,
		IdleAfter:                 cmp.Or(c.PartitionIdleAfter, -1),
		TenantMaxConcurrent:       c.TenantMaxConcurrent,
		ShutdownGrace:             c.StopTimeout() - c.ExitReserve(),
	}
}

// Subscriptions is the configuration of event subscriptions from the settings; the caller fills
// in the Logger.
func (c Config) Subscriptions() subscription.Config {
	return subscription.Config{
		Allow:        c.OutboundURLs,
		MaxPerTenant: c.MaxSubscriptionsPerTenant,
		Timeout:      c.SubscriptionTimeout,
		RetryFor:     c.SubscriptionRetryFor,
		MaxBackoff:   c.SubscriptionMaxBackoff,
	}
}

// Logger returns a text logger on w at the configured level, whose values are bounded
// (BoundLogValue).
func (c Config) Logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: c.LogLevel, ReplaceAttr: BoundLogValue}))
}

// MaxLogValueBytes bounds each value of a log line (docs/configuration.md#logs): what a caller
// sends may reach a log line as a value or inside an error, and a line must not repeat a large
// request.
const MaxLogValueBytes = 512

// BoundLogValue is a slog.HandlerOptions.ReplaceAttr: a string value or an error's text longer
// than MaxLogValueBytes is cut there, at a character's start, and ends with "…" and how many
// bytes were cut.
func BoundLogValue(_ []string, a slog.Attr) slog.Attr {
	var s string
	switch a.Value.Kind() {
	case slog.KindString:
		s = a.Value.String()
	case slog.KindAny:
		err, ok := a.Value.Any().(error)
		if !ok {
			return a
		}
		s = err.Error()
	default:
		return a
	}
	if len(s) <= MaxLogValueBytes {
		return a
	}
	n := MaxLogValueBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	a.Value = slog.StringValue(s[:n] + "…(" + strconv.Itoa(len(s)-n) + " more bytes)")
	return a
}

// chatModelTimeout is shorter than a synchronous caller's default wait (60 s), so that a caller
// gets the model's own 504 rather than a bare handler timeout.
const chatModelTimeout = 45 * time.Second

// ChatModel builds the chat model the AGENTBUS_LLM_* settings name (the offline model when no
// base URL is set) and logs which one it is.
func (c Config) ChatModel(log *slog.Logger) (llm.Model, error) {
	model, err := llm.New(llm.Config{BaseURL: c.LLMBaseURL, Model: c.LLMModel, APIKey: c.LLMAPIKey, Timeout: chatModelTimeout})
	if err != nil {
		return nil, fmt.Errorf("configuring the language model: %w", err)
	}
	log.Info("chat model", "model", model.Name(), "offline", c.LLMBaseURL == "")
	return model, nil
}
