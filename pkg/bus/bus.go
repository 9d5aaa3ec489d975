// Package bus sets up and uses agentbus's JetStream resources: it declares the streams, buckets
// and object store, moves payloads too large for one NATS message through the object store
// (claim check), and routes synchronous replies to the ingress requests waiting for them.
//
// It knows agents only by name (each has an inbox stream, Resources.InboxOf) and does not know
// HTTP; ingress and the workflow host build on it.
package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/retry"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Config sizes the bus resources. The zero value is a single-node setup with the defaults of
// docs/configuration.md#settings.
type Config struct {
	// Replicas of every stream and bucket: 1 for one server, 3 for a production cluster.
	// Zero means 1.
	Replicas int
	// Partitions of a new agent inbox. Zero means 16. An inbox keeps the count it was created
	// with, which every process uses (Resources.InboxOf, InboxPartitions); Resources.Repartition
	// changes the count of an empty one.
	Partitions int
	// DedupeWindow is how long a requestId is remembered for idempotency. Zero means 10 minutes.
	DedupeWindow time.Duration
	// InboxMaxAge bounds how long an unprocessed request is kept. Zero means 7 days.
	InboxMaxAge time.Duration
	// HistoryMaxAge is how long conversation history is kept. Zero means 180 days.
	HistoryMaxAge time.Duration
}

// Defaults for Config's zero values.
const (
	// DefaultPartitions bounds how many hosts share one agent's work. Each partition is a
	// consumer on the agent's inbox, and the server's work per request grows with their number
	// (docs/performance.md: CPU per call 16 against 32 partitions).
	DefaultPartitions   = 16
	DefaultDedupeWindow = 10 * time.Minute
	DefaultInboxMaxAge  = 7 * 24 * time.Hour
	DefaultHistoryAge   = 180 * 24 * time.Hour
	// HostTTL is how long a host heartbeat stays in the hosts bucket.
	HostTTL = 30 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.DedupeWindow == 0 {
		c.DedupeWindow = DefaultDedupeWindow
	}
	if c.InboxMaxAge == 0 {
		c.InboxMaxAge = DefaultInboxMaxAge
	}
	if c.HistoryMaxAge == 0 {
		c.HistoryMaxAge = DefaultHistoryAge
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("replicas %d: want 1 to 5", c.Replicas)
	}
	if c.Partitions < 1 || c.Partitions > 1024 {
		return fmt.Errorf("partitions %d: want 1 to 1024", c.Partitions)
	}
	if c.DedupeWindow < time.Second {
		return errors.New("dedupe window must be at least 1s")
	}
	return nil
}

// PartitionCount returns the configured partition count (with its default applied).
func (c Config) PartitionCount() int { return c.withDefaults().Partitions }

// Resources are the handles to agentbus's JetStream resources.
type Resources struct {
	JS        jetstream.JetStream
	Messages  jetstream.Stream
	Keys      jetstream.KeyValue
	Tenants   jetstream.KeyValue
	Instances jetstream.KeyValue
	Registry  jetstream.KeyValue
	Hosts     jetstream.KeyValue
	Results   jetstream.KeyValue
	Topics    jetstream.KeyValue
	Files     jetstream.ObjectStore
	Claims    jetstream.ObjectStore
	// DeadLetters keeps requests that failed every attempt.
	DeadLetters jetstream.Stream
	// Timers hold the agents' timers (message schedules) and what they fired, a stream for each
	// shard of the tenants (subject.TimerShard), indexed by shard; Schedules holds those a release
	// before the shards set (subject.LegacyTimers), nil in a deployment that has none.
	Timers    []jetstream.Stream
	Schedules jetstream.Stream
	// Subscriptions holds the tenants' event subscriptions; Undelivered the events their
	// receivers did not accept in time.
	Subscriptions jetstream.KeyValue
	Undelivered   jetstream.Stream
	// Tenures counts the takeovers of each partition from a host taken for dead.
	Tenures jetstream.KeyValue
	// RemoteAgents holds the registrations of agents served over HTTP; RemoteAgentOwners
	// indexes those of each tenant.
	RemoteAgents, RemoteAgentOwners jetstream.KeyValue
	// Runs indexes the runs started, by tenant and agent (package instance's Index).
	Runs jetstream.Stream
	// Steps is the journal of the durable steps of the requests being handled (agent.Step).
	Steps jetstream.Stream
	// Waits keeps the requests waiting for an event and those held behind them (agent.Wait).
	Waits jetstream.Stream
	// Usage and UsageTotals count what each tenant stores (package usage): bytes by kind and
	// day, and instances.
	Usage, UsageTotals jetstream.Stream
	// MovedRequests is how many requests this Ensure moved from LegacyInboxStream to their
	// agents' inboxes (see migrateLegacyInbox): a process that moved some says so in its log.
	MovedRequests int
	// TenantLimits holds the limits set per tenant at runtime (package tenantlimits); SlotGrants
	// divides each tenant's cap on its requests running at once among the workflow hosts.
	TenantLimits, SlotGrants jetstream.KeyValue
	Config                   Config
}

// StartWait bounds how long a starting service keeps retrying while JetStream is not ready:
// Ensure and the other steps of a start run by WhileStarting, and a workflow host's first
// consumption of each partition it owns.
const StartWait = 2 * time.Minute

// ensurePolicy paces the tries of what may meet a cluster electing its leaders (Ensure,
// WhileStarting, AwaitResult's watch): 100 ms doubling up to 2 s.
var ensurePolicy = retry.Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}

// Ensure creates or updates every stream, bucket and object store agentbus uses, so that any
// service can start first. It is idempotent, and cheap when nothing changed: a resource that
// an earlier Ensure declared with the same configuration (DeclaredKey) is only read. While
// JetStream is not ready yet (a cluster still electing its leaders, services started at the
// same moment as NATS) it retries for up to two minutes or until ctx ends. It retries too
// while a cluster cannot place a replica because a peer is offline, so a service starting while
// a NATS node restarts waits for it.
//
// Each JetStream request waits for js's own timeout (jetstream.WithDefaultTimeout, 5 s unless
// set), not for ctx's deadline: an answer lost while a cluster elects its leaders is asked for
// again by the next attempt instead of being awaited until ctx ends. Ending ctx still ends a
// request at once.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (*Resources, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return Starting(ctx, func(reqCtx context.Context) (*Resources, error) { return ensureOnce(reqCtx, js, cfg) })
}

// WhileStarting runs attempt until it succeeds, fails for good, ctx ends or StartWait passes,
// pausing by ensurePolicy after each transient failure (Transient: JetStream not ready yet, a
// cluster electing its leaders or missing a peer). attempt's context carries no deadline (see
// Ensure) and ends when WhileStarting returns: what attempt starts to outlive it (a watch) takes
// a context of its own. A service's start runs each step that asks JetStream through it, so that
// an answer lost in an election costs a try rather than the start.
func WhileStarting(ctx context.Context, attempt func(context.Context) error) error {
	_, err := Starting(ctx, func(reqCtx context.Context) (struct{}, error) { return struct{}{}, attempt(reqCtx) })
	return err
}

// Starting is WhileStarting for a step that makes something (a stream, a watch): it returns
// what the successful try made, or T's zero value and the last try's error.
func Starting[T any](ctx context.Context, attempt func(context.Context) (T, error)) (T, error) {
	reqCtx, stop := withoutDeadline(ctx)
	defer stop()
	return whileTransient(ctx, reqCtx, time.Now().Add(StartWait), attempt)
}

// whileTransient calls attempt with reqCtx until it succeeds, fails with an error Transient does
// not name, ctx ends or deadline (unless zero) passes, pausing by ensurePolicy after each
// transient failure. It returns what the successful try made, or T's zero value and the last
// try's error.
func whileTransient[T any](ctx, reqCtx context.Context, deadline time.Time, attempt func(context.Context) (T, error)) (T, error) {
	attempts := ensurePolicy.Start()
	for {
		v, err := attempt(reqCtx)
		if err == nil {
			return v, nil
		}
		if !Transient(err) || (!deadline.IsZero() && time.Now().After(deadline)) || attempts.Wait(ctx) != nil {
			var zero T
			return zero, err
		}
	}
}

// withoutDeadline returns a context that ends when ctx does but carries no deadline, so that
// each JetStream request made with it waits for the JetStream context's default timeout.
func withoutDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return c, func() {
		stop()
		cancel(nil)
	}
}

// errCodeNoPeers is JetStream's error code for "no suitable peers for placement": the meta
// leader has not heard from enough servers lately to place a replicated stream.
const errCodeNoPeers jetstream.ErrorCode = 10005

// Transient reports errors that a JetStream still starting up gives, or a cluster whose meta
// leader briefly counts a peer offline (a node restarting, or missing its heartbeats under load):
// a request lost or refused for now, worth trying again.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		(errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.ErrorCode == errCodeNoPeers))
}

// ensureOnce makes one attempt at creating or updating every resource, in order: the streams,
// then the key-value buckets, then the object stores.
func ensureOnce(ctx context.Context, js jetstream.JetStream, cfg Config) (*Resources, error) {
	r := &Resources{JS: js, Config: cfg}
	var err error
	if r.Messages, err = ensureMessages(ctx, js, cfg); err != nil {
		return nil, err
	}
	if r.DeadLetters, err = ensureKept(ctx, js, cfg, subject.DeadLettersStream,
		"agentbus requests whose handler failed every attempt, until replayed or discarded", subject.DeadLetterSubjects()); err != nil {
		return nil, err
	}
	if r.Schedules, err = openLegacyTimers(ctx, js); err != nil {
		return nil, err
	}
	r.Timers = make([]jetstream.Stream, subject.TimerShards)
	for shard := range r.Timers {
		if r.Timers[shard], err = ensureTimers(ctx, js, cfg, shard); err != nil {
			return nil, err
		}
	}
	if r.Undelivered, err = ensureKept(ctx, js, cfg, subject.UndeliveredStream,
		"agentbus events a subscription's receiver did not accept, until replayed or discarded", subject.UndeliveredSubjects()); err != nil {
		return nil, err
	}
	if r.Runs, err = ensureRuns(ctx, js, cfg); err != nil {
		return nil, err
	}
	if r.Steps, err = ensureSteps(ctx, js, cfg); err != nil {
		return nil, err
	}
	if r.Waits, err = ensureWaits(ctx, js, cfg); err != nil {
		return nil, err
	}
	if r.Usage, r.UsageTotals, err = ensureUsage(ctx, js, cfg); err != nil {
		return nil, err
	}
	if err := ensureBuckets(ctx, js, cfg, r); err != nil {
		return nil, err
	}
	if r.Files, err = ensureFiles(ctx, js, cfg); err != nil {
		return nil, err
	}
	if r.Claims, err = ensureClaims(ctx, js, cfg); err != nil {
		return nil, err
	}
	if err := migrateLegacyInbox(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// ensureMessages creates or updates the conversation history stream.
func ensureMessages(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	return ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        subject.MessagesStream,
		Description: "agentbus conversation history, one subject per thread",
		Subjects:    []string{subject.MessagesSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.HistoryMaxAge,
		// Records carry no de-duplication id (package history keeps a message from being
		// stored twice): the server keeps no id per call.
		AllowDirect: true,
	})
}

// ensureKept creates or updates a stream of a Kept store: the requests that failed every
// attempt (dead letters) or the events a subscription gave up on (undelivered).
func ensureKept(ctx context.Context, js jetstream.JetStream, cfg Config, name, description, subjects string) (jetstream.Stream, error) {
	return ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        name,
		Description: description,
		Subjects:    []string{subjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		// As long as a request may wait in the inbox: a dead letter may refer to a claim-checked
		// request, which is kept that long; undelivered events are kept as long.
		MaxAge:      cfg.InboxMaxAge,
		Duplicates:  cfg.DedupeWindow,
		AllowDirect: true,
	})
}

// ensureStream creates or updates the stream of cfg, unless it was declared so before.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	fp := fingerprint(cfg)
	s, same, err := declared(ctx, js, cfg.Name, fp)
	if err != nil || same {
		return s, err
	}
	cfg.Metadata = withFingerprint(cfg.Metadata, fp)
	if s == nil {
		// Not there (or not looked for): create it, one request where CreateOrUpdateStream
		// asks for an update first. Another process may have created it meanwhile, with an
		// older config: then it is updated.
		s, err = js.CreateStream(ctx, cfg)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("creating stream %s: %w", cfg.Name, err)
		}
	}
	s, err = js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// ensureBuckets creates or updates every key-value bucket and stores its handle in r.
func ensureBuckets(ctx context.Context, js jetstream.JetStream, cfg Config, r *Resources) error {
	kvs := []struct {
		dst *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
		// fromLeader makes every read go to the bucket's stream leader. NATS answers KV reads
		// from any replica by default ("direct get"), and a replica may not have applied the
		// latest write yet: under load, just after a node restarts or the leader changes, or
		// while it is cut off from the others. The buckets whose reads decide whether a
		// request already ran must not read stale, nor those whose records an API call may
		// read right after another wrote them (a key revoked or a tenant used right after it
		// was created). Those read often (hosts, topics) keep direct gets; the hot paths of
		// the others read watches, not gets.
		fromLeader bool
	}{
		{&r.Keys, jetstream.KeyValueConfig{Bucket: subject.KeysBucket, Description: "API keys by SHA-256 hash", History: 5}, true},
		{&r.Tenants, jetstream.KeyValueConfig{Bucket: subject.TenantsBucket, Description: "tenants"}, true},
		{&r.Instances, jetstream.KeyValueConfig{Bucket: subject.InstancesBucket, Description: "workflow instances and agent state"}, true},
		{&r.Registry, jetstream.KeyValueConfig{Bucket: subject.RegistryBucket, Description: "registered agents and methods"}, true},
		{&r.Hosts, hostsBucket, false},
		{&r.Results, jetstream.KeyValueConfig{Bucket: subject.ResultsBucket, Description: "replies by requestId for idempotent retries", TTL: cfg.DedupeWindow}, true},
		{&r.Topics, jetstream.KeyValueConfig{Bucket: subject.TopicsBucket, Description: "topics of each conversation thread", TTL: cfg.HistoryMaxAge}, false},
		{&r.Subscriptions, jetstream.KeyValueConfig{Bucket: subject.SubscriptionsBucket, Description: "event subscriptions (outbound webhooks)"}, true},
		{&r.RemoteAgents, jetstream.KeyValueConfig{Bucket: subject.RemoteAgentsBucket, Description: "remote agents: HTTP endpoints served as agents"}, true},
		{&r.RemoteAgentOwners, jetstream.KeyValueConfig{Bucket: subject.RemoteAgentOwnersBucket, Description: "remote agents by tenant"}, true},
		{&r.Tenures, jetstream.KeyValueConfig{Bucket: subject.TenuresBucket, Description: "takeovers of each inbox partition from hosts taken for dead"}, true},
		{&r.TenantLimits, jetstream.KeyValueConfig{Bucket: subject.TenantLimitsBucket, Description: "limits set per tenant and agent at runtime"}, true},
		{&r.SlotGrants, jetstream.KeyValueConfig{Bucket: subject.SlotGrantsBucket, Description: "each host's part of a tenant's cap on its requests running at once"}, true},
	}
	for _, kv := range kvs {
		c := kv.cfg
		c.Replicas = cfg.Replicas
		if c.Storage == 0 {
			c.Storage = jetstream.FileStorage
		}
		var err error
		if kv.fromLeader {
			*kv.dst, err = leaderReadBucket(ctx, js, c)
		} else {
			*kv.dst, err = directReadBucket(ctx, js, c)
		}
		if err != nil {
			return fmt.Errorf("creating bucket %s: %w", c.Bucket, err)
		}
	}
	return nil
}

// hostsBucket is the hosts bucket's configuration, but for its replicas.
var hostsBucket = jetstream.KeyValueConfig{Bucket: subject.HostsBucket, Description: "live workflow hosts", TTL: HostTTL, Storage: jetstream.MemoryStorage}

// EnsureHosts creates the hosts bucket again, as Ensure does, when it does not exist; it leaves
// an existing one alone. The bucket is in memory storage, so that heartbeats cost no disk
// writes: a NATS server, or a whole cluster, that restarts comes back without it, and the
// processes that kept running would find no bucket to write heartbeats to or watch. A host
// whose heartbeat finds no stream calls it.
func EnsureHosts(ctx context.Context, js jetstream.JetStream, cfg Config) (created bool, err error) {
	_, err = js.KeyValue(ctx, subject.HostsBucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return false, err
	}
	c := hostsBucket
	c.Replicas = cfg.withDefaults().Replicas
	_, err = js.CreateKeyValue(ctx, c)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return false, nil // another process was first
	}
	if err != nil {
		return false, fmt.Errorf("creating bucket %s: %w", c.Bucket, err)
	}
	return true, nil
}

// ensureFiles creates or updates the object store of uploaded files.
func ensureFiles(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.ObjectStore, error) {
	store, err := ensureObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket:      subject.FilesStore,
		Description: "uploaded files",
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		// A file is kept as long as the history that mentions it.
		TTL: cfg.HistoryMaxAge,
	})
	if err != nil {
		return nil, fmt.Errorf("creating object store %s: %w", subject.FilesStore, err)
	}
	return store, nil
}

// ensureClaims creates or updates the object store of claim-checked request bodies and
// replies.
func ensureClaims(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.ObjectStore, error) {
	store, err := ensureObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket:      subject.ClaimsStore,
		Description: "request bodies and replies too large for one message",
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		// A request's claim lives as long as the request may wait in the inbox.
		TTL: cfg.InboxMaxAge,
	})
	if err != nil {
		return nil, fmt.Errorf("creating object store %s: %w", subject.ClaimsStore, err)
	}
	return store, nil
}

// directReadBucket creates or updates a KV bucket as nats.go declares one, unless it was
// declared so before: its reads may be answered by any replica (direct gets).
func directReadBucket(ctx context.Context, js jetstream.JetStream, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	fp := fingerprint(c)
	_, same, err := declared(ctx, js, subject.KVStream(c.Bucket), fp)
	if err != nil {
		return nil, err
	}
	if same {
		return js.KeyValue(ctx, c.Bucket)
	}
	c.Metadata = withFingerprint(c.Metadata, fp)
	return js.CreateOrUpdateKeyValue(ctx, c)
}

// ensureObjectStore creates or updates the object store of cfg, unless it was declared so
// before.
func ensureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	fp := fingerprint(cfg)
	_, same, err := declared(ctx, js, subject.ObjectStream(cfg.Bucket), fp)
	if err != nil {
		return nil, err
	}
	if same {
		return js.ObjectStore(ctx, cfg.Bucket)
	}
	cfg.Metadata = withFingerprint(cfg.Metadata, fp)
	return js.CreateOrUpdateObjectStore(ctx, cfg)
}

// leaderReadBucket creates or updates a KV bucket whose reads all go to its stream's leader: its
// stream is declared as nats.go declares a bucket's, but without direct gets, and the handle
// bound to it then reads with the stream's message-get API, which only the leader answers.
func leaderReadBucket(ctx context.Context, js jetstream.JetStream, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	history := int64(1)
	if c.History > 0 {
		history = int64(c.History)
	}
	dupes := 2 * time.Minute
	if c.TTL > 0 && c.TTL < dupes {
		dupes = c.TTL
	}
	_, err := ensureStream(ctx, js, jetstream.StreamConfig{
		Name:              subject.KVStream(c.Bucket),
		Description:       c.Description,
		Subjects:          []string{subject.KVKeyPrefix(c.Bucket) + ">"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxAge:            c.TTL,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dupes,
		Discard:           jetstream.DiscardNew,
		AllowDirect:       false,
	})
	if err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, c.Bucket)
}
