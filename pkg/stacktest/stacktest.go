// Package stacktest runs the whole agentbus stack inside a test (package stack: embedded NATS
// on a temporary store, a workflow host with the reference agents, and the ingress on a real
// loopback HTTP server) and seeds two tenants with keys. Tests talk to it over HTTP, as clients
// do.
package stacktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/subscription"
)

// RaceWebhookTimeout is the ingress's default webhook timeout in a test binary built with the
// race detector, which makes moving bytes about nine times slower: a webhook call with a 32 MiB
// body took 32–35 s through such a stack on a 2-core machine (2026-11-27), 4–7 s without it,
// against the ingress's default of 30 s.
const RaceWebhookTimeout = 2 * time.Minute

// Options change the stack. The zero value is the default stack.
type Options struct {
	// Agents run by the host; default the Echo agent.
	Agents []*agent.Agent
	// NoAgents starts no Go agent and no host: the stack serves remote agents only, as a
	// process with AGENTBUS_ECHO=false does.
	NoAgents bool
	// WebhookTimeout of the ingress; default 30s, or RaceWebhookTimeout in a test binary built
	// with the race detector.
	WebhookTimeout time.Duration
	// Partitions of the inbox; default 4 (fewer consumers keep tests quick).
	Partitions int
	// AdminKey is accepted as a system-admin key when set.
	AdminKey string
	// MaxFileBytes of the ingress; default 25 MiB.
	MaxFileBytes int64
	// MaxRemoteAgentsPerTenant of the ingress; default remote.DefaultMaxPerTenant.
	MaxRemoteAgentsPerTenant int
	// MaxKeysPerTenant of the ingress; default keys.DefaultMaxPerTenant.
	MaxKeysPerTenant int
	// KeyCompactEvery of the ingress; default ingress.DefaultKeyCompactEvery.
	KeyCompactEvery time.Duration
	// TenantIDHold of the ingress: how long a deleted tenant's id stays taken; default 15 min.
	TenantIDHold time.Duration
	// ContinueAsNewEvents of the host; default 1000.
	ContinueAsNewEvents int
	// Dir is the JetStream store; default a fresh natstest.StoreDir. Reuse it to restart on the
	// same data.
	Dir string
	// Host settings of every host of the stack (Conn, Agents, Bus, Logger and ID are filled in).
	// Zero fields get the stack's test defaults: a 10 s shutdown grace and 10 ms retry backoff.
	Host agent.HostConfig
	// Tracer receives the spans of the ingress and, unless Host.Tracer is set, of the hosts;
	// nil means otel's global provider.
	Tracer trace.TracerProvider
	// Subscriptions configures event subscriptions. Zero fields get the stack's test defaults:
	// loopback HTTP receivers allowed, and at most 200 ms between two attempts.
	Subscriptions subscription.Config
	// MaxStore bounds what the embedded JetStream stores on disk; zero means the server's
	// default.
	MaxStore int64
}

// loopbackReceivers is the test stacks' default allow-list of subscription receivers.
var loopbackReceivers, _ = outbound.ParseAllowList("http://127.0.0.1:*")

// Stack is a running stack.
type Stack struct {
	*stack.Stack
	// Key is a tenant-admin key of tenant "default"; OtherKey one of tenant "other".
	Key, OtherKey string
	// Dir is the JetStream store.
	Dir string
}

// Start runs a stack for the test; it stops when the test ends.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	if len(opts.Agents) == 0 && !opts.NoAgents {
		opts.Agents = []*agent.Agent{echo.New()}
	}
	if opts.Partitions == 0 {
		opts.Partitions = 4
	}
	if opts.WebhookTimeout == 0 && raceDetector {
		opts.WebhookTimeout = RaceWebhookTimeout
	}
	if opts.Dir == "" {
		opts.Dir = natstest.StoreDir(t)
	}
	hc := opts.Host
	if hc.ShutdownGrace == 0 {
		hc.ShutdownGrace = 10 * time.Second
	}
	if hc.RetryBackoff == 0 {
		// Retries are quick in tests, so that a request that fails reaches its dead letter soon.
		hc.RetryBackoff = 10 * time.Millisecond
	}
	if hc.Tracer == nil {
		hc.Tracer = opts.Tracer
	}
	if opts.ContinueAsNewEvents != 0 {
		hc.ContinueAsNewEvents = opts.ContinueAsNewEvents
	}
	subs := opts.Subscriptions
	if subs.Allow == nil {
		subs.Allow = loopbackReceivers
	}
	if subs.MaxBackoff == 0 {
		subs.MaxBackoff = 200 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := stack.Start(ctx, stack.Config{
		DataDir:  opts.Dir,
		HTTPAddr: "127.0.0.1:0",
		Agents:   opts.Agents,
		Bus:      bus.Config{Partitions: opts.Partitions},
		Ingress: ingress.Config{WebhookTimeout: opts.WebhookTimeout, AdminKey: opts.AdminKey, MaxFileBytes: opts.MaxFileBytes, Tracer: opts.Tracer, Subscriptions: subs,
			MaxRemoteAgentsPerTenant: opts.MaxRemoteAgentsPerTenant, MaxKeysPerTenant: opts.MaxKeysPerTenant,
			KeyCompactEvery: opts.KeyCompactEvery, TenantIDHold: opts.TenantIDHold},
		Host:     hc,
		Logger:   Logger(t),
		MaxStore: opts.MaxStore,
	})
	require.NoError(t, err, "starting stack")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, st.Stop(ctx), "stopping stack")
	})
	s := &Stack{Stack: st, Dir: opts.Dir}
	for tenant, dst := range map[string]*string{"default": &s.Key, "other": &s.OtherKey} {
		require.NoError(t, st.Keys.EnsureTenant(ctx, tenant), "ensuring tenant %s", tenant)
		*dst, _, err = st.Keys.Create(ctx, keys.NewKey{Tenant: tenant, Role: keys.RoleTenantAdmin, Name: "test"})
		require.NoError(t, err, "creating a key of tenant %s", tenant)
	}
	for _, k := range []string{s.Key, s.OtherKey} {
		require.NoError(t, st.WaitKnown(ctx, k), "waiting until the stack knows a new key")
	}
	return s
}
