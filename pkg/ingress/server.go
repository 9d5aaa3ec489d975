// Package ingress is agentbus's HTTP API: it authenticates callers, validates what they send,
// publishes requests to the inbox and, for synchronous endpoints, waits for the workflow host's
// reply and answers with it.
//
// It keeps no state that another instance needs: caches fed by NATS watches, a rolling window of
// the calls it answered (stats.go, which its stats routes gather from every instance over NATS),
// and what limits the calls it serves (rate buckets with their shares of the rates, waiting
// callers and listeners, the bodies it holds). So any number of ingress instances can run side
// by side. services/ingress and services/standalone serve its Handler.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/subscription"
	"github.com/agentbus/agentbus/pkg/tenantlimits"
	"github.com/agentbus/agentbus/pkg/usage"
)

// Config configures the ingress. Zero values mean the documented defaults.
type Config struct {
	// Conn is the NATS connection. Required. The Server does not close it.
	Conn *nats.Conn
	// Directory, when set, is a directory of the agents and hosts shared with the workflow hosts
	// of the process (the standalone's), read instead of watching the buckets again: every
	// watch reads every heartbeat of every host. The Server does not close it. Nil makes one of
	// its own.
	Directory *registry.Directory
	// Bus sizes the streams and buckets, created if missing.
	Bus bus.Config
	// AdminKey, when set, is a system-admin key valid for every tenant.
	AdminKey string
	// WebhookTimeout bounds how long a webhook call waits for its handler. Default 30s.
	WebhookTimeout time.Duration
	// MaxBodyBytes bounds webhook request bodies. Default 32 MiB.
	MaxBodyBytes int64
	// MaxFileBytes bounds uploaded files (decoded). Default 25 MiB. The send endpoint takes
	// bodies large enough for such a file in base64.
	MaxFileBytes int64
	// RateLimit is every API key's request rate (a token bucket per key id), across every
	// ingress instance together. The zero value means no limit; the services set
	// AGENTBUS_RATE_LIMIT and AGENTBUS_RATE_BURST. Give every instance the same rates.
	RateLimit Rate
	// TenantRateLimits override RateLimit for the keys of a tenant; a zero Rate there means no
	// limit for that tenant's keys.
	TenantRateLimits map[string]Rate
	// TenantRateLimit is every tenant's request rate, all its keys together, across every
	// ingress instance together; the zero value means none. The system-admin key belongs to no
	// tenant and is not counted.
	TenantRateLimit Rate
	// TenantRateLimitTenants override TenantRateLimit for a tenant; a zero Rate there means no
	// limit for that tenant. Server.SetTenantRates changes a tenant's rates at runtime.
	TenantRateLimitTenants map[string]Rate
	// TenantWriteRate is every tenant's rate of configuration writes, all its keys together,
	// across every ingress instance together: creating, revoking and rotating keys, registering,
	// replacing and deleting remote agents, creating and deleting event subscriptions. Each makes
	// or removes records, streams or consumers that every process follows, so one tenant changing
	// its configuration in a loop would take the others' capacity. The zero value means none; the
	// services set AGENTBUS_TENANT_WRITE_RATE and AGENTBUS_TENANT_WRITE_BURST. The system-admin
	// key belongs to no tenant and is not counted.
	TenantWriteRate Rate
	// TenantListenRate is every tenant's rate of history listen streams opened, all its keys
	// together, across every ingress instance together: each opens a follow of its thread (a
	// consumer on the history stream) unless one of the same thread is open on the ingress. The
	// zero value means none; the services set AGENTBUS_TENANT_LISTEN_RATE and
	// AGENTBUS_TENANT_LISTEN_BURST. The system-admin key is not counted.
	TenantListenRate Rate
	// MaxWaitingPerTenant bounds each tenant's synchronous calls waiting for a reply at once
	// (webhook, converse, and send with wait=true). Default 1000.
	MaxWaitingPerTenant int
	// MaxBodyBytesPerTenant bounds the memory of the request bodies this instance holds at once
	// for one tenant (being received, or held until the call is answered), and for the requests
	// whose tenant is not known when their body is read, together. It must be larger than the
	// largest body. Default 256 MiB.
	MaxBodyBytesPerTenant int64
	// MaxListenersPerKey and MaxListenersPerTenant bound the history listen streams open at once
	// on this instance with one API key, and for one tenant. Defaults 20 and 200.
	MaxListenersPerKey    int
	MaxListenersPerTenant int
	// ListenBufferBytes and ListenBufferEvents bound what one listen stream holds for a client
	// that reads slower than its thread grows: events encoded and waiting to be written. A
	// stream whose client falls further behind is closed with an overflow event, and the client
	// resumes with Last-Event-ID. Defaults 256 KiB and 256 events.
	ListenBufferBytes  int
	ListenBufferEvents int
	// ReadHeaderTimeout bounds how long HTTPServer's clients may take to send the request
	// headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// InstanceID names this ingress instance in reply subjects. Default: a random id.
	InstanceID string
	// Subscriptions configures the tenants' event subscriptions: the allow-list of receiver URLs
	// and the limit per tenant. The zero value allows no receiver.
	Subscriptions subscription.Config
	// MaxRemoteAgentsPerTenant bounds the remote agents a tenant admin registers for its tenant
	// (remote.NewStore). Default remote.DefaultMaxPerTenant.
	MaxRemoteAgentsPerTenant int
	// MaxKeysPerTenant bounds each tenant's API keys in force, and the revoked ones kept
	// (keys.Store.WithCache). Default keys.DefaultMaxPerTenant.
	MaxKeysPerTenant int
	// KeyCompactEvery is how often the instance takes the purge markers of the keys it removed
	// out of the keys bucket, once they are that old (keys.Store.Compact). Default
	// DefaultKeyCompactEvery.
	KeyCompactEvery time.Duration
	// TenantIDHold is how long after a tenant's deletion its id cannot be used for a new tenant
	// (keys.Store.HoldDeletedIDs). 0 means the longer of the bus's de-duplication window and the
	// per-agent statistics' window (15 minutes at the defaults): until then a new tenant of the id
	// would have its requests with caller-chosen ids taken for the old one's, and see the old
	// one's statistics. Negative means no hold. AGENTBUS_TENANT_ID_HOLD sets it.
	TenantIDHold time.Duration
	// Logger receives the ingress's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the ingress's Prometheus metrics; nil means a registry of the Server's
	// own. GET /metrics serves it when it is also a prometheus.Gatherer, as a
	// *prometheus.Registry is; otherwise whoever owns it exposes the metrics, and GET /metrics
	// answers 404.
	Metrics prometheus.Registerer
	// MetricsElsewhere makes GET /metrics on the API answer 404: whoever owns Metrics serves them
	// on an address of their own (AGENTBUS_METRICS_ADDR, package opshttp).
	MetricsElsewhere bool
	// IdleTimeout is the hosts' AGENTBUS_IDLE_TIMEOUT: the instance inspector shows a running
	// instance idle for longer as idle (it counts as completed), unless its agent has a timeout
	// of its own (agent.IdleAfter). Zero: never.
	IdleTimeout time.Duration
	// Tracer receives a server span per HTTP request, whose context travels with the published
	// request to the workflow host; nil means otel.GetTracerProvider(). A no-op provider turns
	// tracing off at no cost per request.
	Tracer trace.TracerProvider
	// Quotas gives each tenant's storage quota: bytes stored and workflow instances
	// (docs/limits.md#storage-quotas). It is asked on every request that stores something, so
	// that a quota changed at runtime holds from the next request on. Nil means no quota; the
	// services set AGENTBUS_TENANT_MAX_BYTES and AGENTBUS_TENANT_MAX_INSTANCES.
	Quotas usage.Quotas
	// StoreGuard refuses requests that store while the JetStream account's storage is nearly
	// full. The zero value refuses nothing; the services set AGENTBUS_STORE_GUARD_*.
	StoreGuard StoreGuard
	// TenantLimits are the defaults of the limits set per tenant at runtime (tenantlimits.go):
	// MaxQueued, which this instance holds each tenant's requests of an agent to
	// (AGENTBUS_TENANT_MAX_QUEUED), and MaxConcurrent, which the hosts hold and the API shows
	// (AGENTBUS_TENANT_MAX_CONCURRENT). A tenant's record wins over them, and over the rates
	// and Quotas above.
	TenantLimits tenantlimits.Defaults
}

// Defaults.
const (
	DefaultWebhookTimeout = 30 * time.Second
	DefaultMaxBodyBytes   = 32 << 20
	DefaultMaxFileBytes   = 25 << 20

	DefaultMaxBodyBytesPerTenant = 256 << 20
)

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Conn == nil {
		return errors.New("ingress: Conn is required")
	}
	if c.WebhookTimeout < 0 || c.MaxBodyBytes < 0 || c.MaxFileBytes < 0 || c.ReadHeaderTimeout < 0 {
		return errors.New("ingress: negative timeout or body limit")
	}
	if c.MaxWaitingPerTenant < 0 {
		return errors.New("ingress: negative MaxWaitingPerTenant")
	}
	d := c.withDefaults()
	if largest := max(d.MaxBodyBytes, d.sendBodyLimit()); c.MaxBodyBytesPerTenant < 0 || d.MaxBodyBytesPerTenant <= largest {
		return fmt.Errorf("ingress: MaxBodyBytesPerTenant must be larger than the largest body (%d bytes)", largest)
	}
	if c.MaxListenersPerKey < 0 || c.MaxListenersPerTenant < 0 || c.ListenBufferBytes < 0 || c.ListenBufferEvents < 0 {
		return errors.New("ingress: negative listener limit")
	}
	if c.MaxKeysPerTenant < 0 {
		return errors.New("ingress: negative MaxKeysPerTenant")
	}
	for tenant, r := range c.TenantRateLimits {
		if !r.valid() {
			return fmt.Errorf("ingress: invalid rate limit of tenant %q", tenant)
		}
	}
	for tenant, r := range c.TenantRateLimitTenants {
		if !r.valid() {
			return fmt.Errorf("ingress: invalid tenant rate limit of tenant %q", tenant)
		}
	}
	if !c.RateLimit.valid() || !c.TenantRateLimit.valid() || !c.TenantWriteRate.valid() || !c.TenantListenRate.valid() {
		return errors.New("ingress: invalid rate limit")
	}
	if c.AdminKey != "" && len(c.AdminKey) < 16 {
		return errors.New("ingress: admin key must be at least 16 characters")
	}
	if err := c.StoreGuard.Validate(); err != nil {
		return err
	}
	if c.TenantLimits.MaxQueued < 0 || c.TenantLimits.MaxConcurrent < 0 {
		return errors.New("ingress: negative tenant limit")
	}
	return c.Bus.Validate()
}

func (c Config) withDefaults() Config {
	if c.WebhookTimeout == 0 {
		c.WebhookTimeout = DefaultWebhookTimeout
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxWaitingPerTenant == 0 {
		c.MaxWaitingPerTenant = DefaultMaxWaitingPerTenant
	}
	if c.MaxBodyBytesPerTenant == 0 {
		c.MaxBodyBytesPerTenant = DefaultMaxBodyBytesPerTenant
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.MaxListenersPerKey == 0 {
		c.MaxListenersPerKey = DefaultMaxListenersPerKey
	}
	if c.MaxListenersPerTenant == 0 {
		c.MaxListenersPerTenant = DefaultMaxListenersPerTenant
	}
	if c.MaxKeysPerTenant == 0 {
		c.MaxKeysPerTenant = keys.DefaultMaxPerTenant
	}
	if c.KeyCompactEvery <= 0 {
		c.KeyCompactEvery = DefaultKeyCompactEvery
	}
	if c.ListenBufferBytes == 0 {
		c.ListenBufferBytes = DefaultListenBufferBytes
	}
	if c.ListenBufferEvents == 0 {
		c.ListenBufferEvents = DefaultListenBufferEvents
	}
	if c.InstanceID == "" {
		c.InstanceID = uuid.NewString()[:8]
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Server is the HTTP API.
type Server struct {
	cfg  Config
	log  *slog.Logger
	js   jetstream.JetStream
	res  *bus.Resources
	auth *keys.Authenticator
	keys *keys.Store
	// stopKeyCompaction stops the compaction of the keys bucket (startKeyCompaction).
	stopKeyCompaction func() error
	dir               *registry.Directory
	closeDir          func() error // closes dir when the Server made it (Config.Directory nil), else nothing
	replies           *bus.Replies
	claims            *bus.Blobs
	dead              *deadletter.Store
	subs              *subscription.Store
	remote            *remote.Store
	handler           http.Handler
	// mcpHandler serves the MCP endpoint's requests once they are authenticated.
	mcpHandler http.Handler
	limits     *limiter
	// sharing exchanges the demand of busy keys and tenants with the other instances, so that
	// the rate limits hold across all of them (ratesharing.go).
	sharing   *rateSharing
	waiting   *waiting
	bodies    *bodyBudget
	listeners *listeners
	// revoked remembers the keys revoked lately, whose calls in flight get no answer.
	revoked *revocations
	feeds   *threadFeeds
	metrics *apiMetrics
	stats   *statsService
	// confirms makes admin writes wait until every instance's caches hold them (confirm.go).
	confirms *confirmer
	// params checks Data calls' parameters against their methods' registered schemas.
	params methodParams

	closing   chan struct{} // closed by CloseStreams
	closeOnce sync.Once
	ready     readiness

	// storage knows what tenants store, for their quotas and the store guard (quota.go).
	storage *storage
	// tenantLimits follows the limits set per tenant at runtime (tenantlimits.go).
	tenantLimits *tenantLimitsState
}

// New connects the ingress to the bus: it creates missing resources and loads keys and the
// registry. Close releases what it opened.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := newServer(cfg.withDefaults())
	if err != nil {
		return nil, err
	}
	if err := s.openBus(ctx); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	s.mcpHandler = s.newMCPHandler()
	s.handler = s.routes()
	return s, nil
}

// newServer makes a Server of cfg (with its defaults) and its own state: limits, budgets and
// metrics.
func newServer(cfg Config) (*Server, error) {
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.With("ingress", cfg.InstanceID),
		closing: make(chan struct{}),
		limits:  newLimiter(cfg.rates(), demandEvery),
		waiting: &waiting{max: cfg.MaxWaitingPerTenant, n: make(map[string]int)},
		bodies:  &bodyBudget{max: cfg.MaxBodyBytesPerTenant, held: make(map[string]int64)},
		listeners: &listeners{
			perKey: cfg.MaxListenersPerKey, perTenant: cfg.MaxListenersPerTenant,
			keys: make(map[string]int), tenants: make(map[string]int),
		},
		// A minute longer than the longest a call may wait for its answer.
		revoked: newRevocations(max(cfg.WebhookTimeout, maxWaitSecs*time.Second) + time.Minute),
	}
	var err error
	if s.metrics, err = newMetrics(cfg.Metrics, cfg.Tracer); err != nil {
		return nil, err
	}
	s.bodies.gauge = s.metrics.bodies
	s.feeds = &threadFeeds{store: s.store, log: s.log, feeds: make(map[threadKey]*threadFeed)}
	return s, nil
}

// openBus creates or checks JetStream's streams and buckets and the stores on them.
func (s *Server) openBus(ctx context.Context) error {
	var err error
	if s.js, err = jetstream.New(s.cfg.Conn); err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	if s.res, err = bus.Ensure(ctx, s.js, s.cfg.Bus); err != nil {
		return err
	}
	s.res.LogMove(s.log)
	hold := s.cfg.TenantIDHold
	if hold == 0 {
		hold = max(s.res.Config.DedupeWindow, statsWindowSpan)
	}
	s.keys = keys.NewStore(s.res.JS, s.res.Keys, s.res.Tenants).HoldDeletedIDs(hold)
	s.claims = bus.NewBlobs(s.res.Claims, s.cfg.Conn.MaxPayload())
	s.dead = deadletter.NewStore(s.res, s.claims)
	subs := s.cfg.Subscriptions
	if subs.Logger == nil {
		subs.Logger = s.log
	}
	s.subs = subscription.NewStore(s.res, subs)
	s.remote = remote.NewStore(s.res, subs.Allow, s.cfg.MaxRemoteAgentsPerTenant)
	// Registrations stored by a build that did not index them (an ingress of it in a rolling
	// upgrade, say) join the index; without it, listings read every registration.
	if err := s.remote.Index(ctx); err != nil {
		s.log.Warn("indexing the remote agents by tenant; until an ingress has, listings read every registration", "err", err)
	}
	return nil
}

// start starts, in order, the watches and subscriptions the server runs on (Close stops them);
// when one fails to start, those started before it are stopped again, the last first.
func (s *Server) start(ctx context.Context) (err error) {
	var started []func() error
	defer func() {
		if err != nil {
			for i := len(started) - 1; i >= 0; i-- {
				_ = started[i]()
			}
		}
	}()
	// The quotas a tenant's limits set win over the configured ones (tenantlimits.go).
	configured := s.cfg.Quotas
	s.cfg.Quotas = func(tenant string) usage.Quota { return s.tenantLimits.quota(configured, tenant) }
	if s.storage, err = s.startStorage(ctx); err != nil {
		return err
	}
	started = append(started, s.storage.close)
	// Before the caches load: a write this instance is not asked to confirm is in them.
	if s.confirms, err = startConfirmer(s.cfg.Conn, s.cfg.InstanceID, s.cacheHolds, s.log); err != nil {
		return err
	}
	started = append(started, s.confirms.close)
	if _, err = s.startTenantLimits(ctx, configured); err != nil {
		return err
	}
	started = append(started, s.tenantLimits.close)
	// Before the keys: a revocation withdraws the waits of the key's calls.
	if s.replies, err = bus.NewReplies(s.cfg.Conn, s.cfg.InstanceID, s.log); err != nil {
		return err
	}
	started = append(started, s.replies.Close)
	if s.auth, err = keys.NewAuthenticator(ctx, s.res.Keys, s.cfg.AdminKey, s.log); err != nil {
		return err
	}
	started = append(started, s.auth.Close)
	s.auth.OnRevoked(func(keyID string) {
		s.revoked.note(keyID)
		s.replies.Withdraw(keyID, errKeyRevoked)
		s.listeners.end(keyID)
	})
	s.keys = s.keys.WithCache(s.auth, s.cfg.MaxKeysPerTenant, s.log)
	s.stopKeyCompaction = s.startKeyCompaction()
	started = append(started, s.stopKeyCompaction)
	s.dir, s.closeDir = s.cfg.Directory, func() error { return nil } // a shared one is its maker's to close
	if s.dir == nil {
		if s.dir, err = registry.NewDirectory(ctx, s.res.Registry, s.res.Hosts, s.log); err != nil {
			return err
		}
		s.closeDir = s.dir.Close
		started = append(started, s.closeDir)
	}
	s.confirms.markLoaded()
	if s.stats, err = startStats(s.cfg.Conn, s.cfg.InstanceID, s.metrics.window, s.log); err != nil {
		return err
	}
	started = append(started, s.stats.close)
	s.sharing, err = startRateSharing(s.cfg.Conn, s.cfg.InstanceID, s.limits, s.confirms.present, s.log)
	return err
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.handler }

// AgentLive reports whether this ingress sees a live workflow host running the agent, as a
// webhook call to it would; readiness checks and tests use it.
func (s *Server) AgentLive(name string) bool { return s.dir.Live(name) }

// KeyKnown reports whether this ingress accepts the key now (keys arrive through a watch).
func (s *Server) KeyKnown(secret string) bool {
	_, err := s.auth.Authenticate(secret)
	return err == nil
}

// sendBodyLimit is the largest send body: a file of MaxFileBytes in base64, plus room for the
// other fields.
func (c Config) sendBodyLimit() int64 { return c.MaxFileBytes/3*4 + 1<<20 }

// CloseStreams ends the long-lived answers (Server-Sent Events), so that an HTTP server shutting
// down need not wait for them; clients reconnect to another instance and resume. Register it with
// http.Server.RegisterOnShutdown.
func (s *Server) CloseStreams() { s.closeOnce.Do(func() { close(s.closing) }) }

// Close ends streams, tells the other instances this one leaves (admin writes no longer wait for
// it, rate limits no longer count its demand), and stops the watches and the reply, stats,
// confirmation and rate demand subscriptions.
func (s *Server) Close() (err error) {
	defer func() { err = errors.Join(err, s.storage.close()) }()
	s.CloseStreams()
	return errors.Join(s.sharing.close(), s.confirms.close(), s.stats.close(), s.replies.Close(), s.closeDir(), s.stopKeyCompaction(), s.auth.Close(), s.tenantLimits.close())
}

// SetTenantRates sets a tenant's rate limits on this instance, in place of the configured ones,
// from its next request on; ResetTenantRates goes back to those. The rates hold across every
// instance together once every instance has the same: set them on each. A zero Rate is no
// limit; a Burst of 0 is twice the rate.
func (s *Server) SetTenantRates(tenant string, r TenantRates) error {
	return s.limits.setTenant(tenant, &r)
}

// ResetTenantRates gives a tenant the configured rate limits again (Config.RateLimit,
// TenantRateLimits, TenantRateLimit, TenantRateLimitTenants, TenantWriteRate, TenantListenRate).
func (s *Server) ResetTenantRates(tenant string) { _ = s.limits.setTenant(tenant, nil) }

// TenantRates returns the rate limits a tenant's calls have now.
func (s *Server) TenantRates(tenant string) TenantRates { return s.limits.tenantRates(tenant) }

// route is one line of the API: a method and a path template (gorilla/mux syntax), and the
// handler that answers it.
type route struct {
	method, path string
	handler      http.HandlerFunc
}

// api is the whole HTTP API, one line per method and path.
//
// Webhooks take the key in the apikey query parameter (docs/interface.md#5-authentication);
// converse and history in the Authorization header or the apikey query parameter; every admin
// endpoint takes it in the Authorization header only, since a key in a URL ends up in proxy and
// access logs. Tenants are managed by system admins; a tenant's keys and dead
// letters by its tenant admins and by system admins; the tenant-less system-admin keys, under
// /api/v1/admin/keys, by system admins. The admin messaging endpoints name the tenant in the
// path or, on their tenant-less variant, in X-Tenant-Id. /api/user/agents takes any valid key,
// in the header or the query. /healthz, /readyz, /metrics, /openapi.json, the playground page
// (/ui) and the operator console (/console) take no key: the pages ask the user for one and then
// call the API like any client. The routes marked counted take a token of one of the tenant's
// buckets: those that write its configuration of writesBucket (Config.TenantWriteRate), those
// that open listen streams of listensBucket (Config.TenantListenRate).
//
// The calls come first: gorilla/mux tries routes in order, and each route it tries on the way
// costs a match (and an allocation for an escaped path) on every request.
func (s *Server) api() []route {
	const (
		get, post, put, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	)
	return []route{
		{post, "/api/user/webhooks/{workflow}/{method}", s.syncCall(s.webhook)},
		{post, "/api/user/rest/converse", s.syncCall(s.converse)},
		{get, "/api/user/agents", s.listAgents},
		{post, mcpPath, s.syncCall(s.mcp)},

		{post, "/api/v1/admin/tenants/{tenantId}/messaging/send", s.syncCall(s.send)},
		{post, "/api/v1/admin/tenants/{tenantId}/messaging/signal", s.syncCall(s.signal)},
		{get, "/api/v1/admin/tenants/{tenantId}/messaging/history", s.historyPage},
		{get, "/api/v1/admin/tenants/{tenantId}/messaging/topics", s.historyTopics},
		{get, "/api/v1/admin/tenants/{tenantId}/messaging/listen", counted(listensBucket, s.historyListen)},
		{post, "/api/v1/admin/messaging/send", s.syncCall(s.send)},
		{post, "/api/v1/admin/messaging/signal", s.syncCall(s.signal)},
		{get, "/api/v1/admin/messaging/history", s.historyPage},
		{get, "/api/v1/admin/messaging/topics", s.historyTopics},
		{get, "/api/v1/admin/messaging/listen", counted(listensBucket, s.historyListen)},

		{get, "/api/v1/admin/tenants", s.listTenants},
		{post, "/api/v1/admin/tenants", s.createTenant},
		{get, "/api/v1/admin/tenants/{tenantId}", s.getTenant},
		{del, "/api/v1/admin/tenants/{tenantId}", s.deleteTenant},

		{get, "/api/v1/admin/tenants/{tenantId}/keys", s.listKeys},
		{post, "/api/v1/admin/tenants/{tenantId}/keys", counted(writesBucket, s.createKey)},
		{get, "/api/v1/admin/tenants/{tenantId}/keys/{keyId}", s.getKey},
		{del, "/api/v1/admin/tenants/{tenantId}/keys/{keyId}", counted(writesBucket, s.revokeKey)},
		{post, "/api/v1/admin/tenants/{tenantId}/keys/{keyId}/rotate", counted(writesBucket, s.rotateKey)},
		{get, "/api/v1/admin/keys", s.listKeys},
		{post, "/api/v1/admin/keys", s.createKey},
		{get, "/api/v1/admin/keys/{keyId}", s.getKey},
		{del, "/api/v1/admin/keys/{keyId}", s.revokeKey},
		{post, "/api/v1/admin/keys/{keyId}/rotate", s.rotateKey},

		{get, "/api/v1/admin/tenants/{tenantId}/deadletters", s.listDeadLetters},
		{get, "/api/v1/admin/tenants/{tenantId}/deadletters/{id}", s.getDeadLetter},
		{del, "/api/v1/admin/tenants/{tenantId}/deadletters/{id}", s.discardDeadLetter},
		{post, "/api/v1/admin/tenants/{tenantId}/deadletters/{id}/replay", s.replayDeadLetter},

		{get, "/api/v1/admin/tenants/{tenantId}/schedules", s.listSchedules},
		{del, "/api/v1/admin/tenants/{tenantId}/schedules/{name}", s.cancelSchedule},

		{get, agentInstancesPath, s.listInstances},
		{get, instancesPath + "/{workflowId}", s.showInstance},
		{post, instancesPath + "/{workflowId}/complete", s.completeInstance},
		{post, backfillPath, s.backfillInstances},
		{get, "/api/v1/admin/tenants/{tenantId}/stats", s.tenantStats},
		{get, "/api/v1/admin/tenants/{tenantId}/usage", s.tenantUsage},
		{get, tenantLimitsPath, s.getTenantLimits},
		{put, tenantLimitsPath, s.putTenantLimits},
		{get, "/api/v1/admin/stats", s.systemStats},

		{get, systemAgentsPath, s.listRemoteAgents},
		{post, systemAgentsPath, s.registerRemoteAgent},
		{get, systemAgentsPath + "/{name}", s.getRemoteAgent},
		{put, systemAgentsPath + "/{name}", s.putRemoteAgent},
		{del, systemAgentsPath + "/{name}", s.deleteRemoteAgent},
		{get, tenantAgentsPath, s.listRemoteAgents},
		{post, tenantAgentsPath, counted(writesBucket, s.registerRemoteAgent)},
		{get, tenantAgentsPath + "/{name}", s.getRemoteAgent},
		{put, tenantAgentsPath + "/{name}", counted(writesBucket, s.putRemoteAgent)},
		{del, tenantAgentsPath + "/{name}", counted(writesBucket, s.deleteRemoteAgent)},

		{get, subscriptionsPath, s.listSubscriptions},
		{post, subscriptionsPath, counted(writesBucket, s.createSubscription)},
		{get, subscriptionsPath + "/{subscriptionId}", s.getSubscription},
		{del, subscriptionsPath + "/{subscriptionId}", counted(writesBucket, s.deleteSubscription)},
		{get, subscriptionsPath + "/{subscriptionId}/undelivered", s.listUndelivered},
		{del, subscriptionsPath + "/{subscriptionId}/undelivered/{id}", s.discardUndelivered},
		{post, subscriptionsPath + "/{subscriptionId}/undelivered/{id}/replay", s.replayUndelivered},

		{get, hostsPath, s.listHosts},
		{get, tenantHostsPath, s.listHosts},
		{get, instanceQueuePath, s.instanceQueue},
		{post, instanceQueuePath + "/{requestId}/retry", s.retryQueued},

		{get, "/healthz", s.healthz},
		{get, "/readyz", s.readyz},
		{get, "/metrics", s.serveMetrics},
		{get, "/openapi.json", s.serveOpenAPI},

		{get, "/", s.toPlayground},
		{get, playgroundPath, s.playgroundPage},
		{get, playgroundPath + "/", s.toPlayground},
		{get, playgroundPath + "/{file}", s.playgroundFile},
		{get, consolePath, s.consolePage},
		{get, consolePath + "/", s.toConsole},
		{get, consolePath + "/{file}", s.consoleFile},
	}
}

// routes builds the router of the API.
func (s *Server) routes() http.Handler {
	router := mux.NewRouter()
	// Routes match the path as sent, before unescaping, so that a URL-encoded workflow id may
	// hold any character, %2F included: pathTemplate matches the escaped path, and pathValues
	// unescapes what handlers read. The router itself is not told to use the escaped path: it
	// would escape the path again on every request to look for variables it has no pattern for.
	// cleanPaths refuses unclean paths with 400, where mux would redirect them with a 301.
	router.SkipClean(true)
	for _, rt := range s.api() {
		t := compileTemplate(rt.path)
		router.MatcherFunc(t.matcher(rt.method)).Methods(rt.method).
			Handler(s.metrics.measure(rt.path, s.heldBodies(pathValues(rt.method, rt.path, rt.handler))))
	}
	// Requests no route takes are counted too, under route "unknown".
	router.NotFoundHandler = s.metrics.measure(unknownRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.NotFound.Write(w, "no such endpoint")
	}))
	router.MethodNotAllowedHandler = s.metrics.measure(unknownRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list := strings.Join(allowed(router, r), ", ")
		w.Header().Set("Allow", list)
		problem.MethodNotAllowed.Write(w, "this endpoint takes "+list)
	}))
	// Requests refused for their header size are counted under route "unknown", as above.
	return recoverer(s.log, limitHeaders(s.metrics.measure(unknownRoute, http.HandlerFunc(headersTooLarge)), cleanPaths(router)))
}

// cleanPaths refuses a request whose path has an empty, "." or ".." segment with 400: such a
// path names no resource, and redirecting it (as net/http's ServeMux does) would send the caller,
// with its query and the apikey in it, to a path it did not ask for.
func cleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.RawPath == "" && cleanPath(r.URL.Path) == r.URL.Path {
			// The escaped path is then the path escaped, and escaping leaves "/" and "." as
			// they are: it is clean too, and need not be made.
			next.ServeHTTP(w, r)
			return
		}
		if escaped := r.URL.EscapedPath(); cleanPath(escaped) != escaped {
			problem.InvalidPath.Write(w, `the path has an empty, "." or ".." segment`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath is net/http's: path.Clean, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// pathValues hands the handler the route's path variables as r.PathValue, unescaped, and the
// route's template as r.Pattern, as net/http's ServeMux does; handlers need nothing of mux. It is
// also the edge of the path and the headers: a path variable or a header the route takes that
// breaks its rule (params.go) is refused with 400 before the handler runs. The query's
// parameters are checked by readQuery, where handlers read them.
func pathValues(method, template string, h http.HandlerFunc) http.HandlerFunc {
	headers := paramsOf(method, template).header
	return func(w http.ResponseWriter, r *http.Request) {
		for name, v := range mux.Vars(r) {
			u, err := url.PathUnescape(v)
			if err != nil {
				// net/http refuses such a URL before routing; this is a guard, not a path.
				problem.InvalidPath.Write(w, "the path is not valid URL encoding")
				return
			}
			if p := checkParam("path", name, template, u); p != nil {
				problem.Write(w, *p)
				return
			}
			r.SetPathValue(name, u)
		}
		if p := checkHeaders(r, template, headers); p != nil {
			problem.Write(w, *p)
			return
		}
		r.Pattern = template
		h(w, r)
	}
}

// allowed lists, sorted, the methods of the routes whose path matches r.
func allowed(router *mux.Router, r *http.Request) []string {
	var methods []string
	_ = router.Walk(func(rt *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		var m mux.RouteMatch
		if rt.Match(r, &m) || errors.Is(m.MatchErr, mux.ErrMethodMismatch) {
			ms, _ := rt.GetMethods()
			methods = append(methods, ms...)
		}
		return nil
	})
	slices.Sort(methods)
	return slices.Compact(methods)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.cfg.Conn.Status() != nats.CONNECTED {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"nats disconnected"}`))
		return
	}
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}

// recoverer turns a panic in a handler into a 500 problem and logs it; the client sees no
// internals.
func recoverer(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("handler panicked", "path", r.URL.Path, "panic", p)
				problem.Internal.Write(w, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// connKey is the context key of the connection a request came on (withConn).
type connKey struct{}

// withConn is HTTPServer's ConnContext: it keeps each connection in its requests' context, for
// the handlers that set options on it (limitSendBuffer).
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// connOf is the connection of a request served by HTTPServer, or nil.
func connOf(ctx context.Context) net.Conn {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	return c
}

// HTTPServer returns an http.Server for the API with timeouts that fit the configuration: slow
// clients cannot hold connections, a webhook may wait its whole timeout for the handler, and a
// shutdown marks the server draining (Drain) and ends open event streams instead of waiting for
// them.
func (s *Server) HTTPServer() *http.Server {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       5 * time.Minute, // bodies up to the file limit on slow links
		WriteTimeout:      max(s.cfg.WebhookTimeout, maxWaitSecs*time.Second) + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    hardHeaderBytes, // limitHeaders refuses more than maxHeaderBytes
		ConnContext:       withConn,
	}
	hs.RegisterOnShutdown(s.Drain)
	hs.RegisterOnShutdown(s.CloseStreams)
	return hs
}
