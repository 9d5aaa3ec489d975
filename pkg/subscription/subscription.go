// Package subscription delivers a tenant's events to the HTTPS endpoints it subscribed
// (outbound webhooks, docs/subscriptions.md): the messages stored in its conversations, incoming
// and outgoing, and its dead letters, each POSTed as JSON and signed by the Standard Webhooks
// specification.
//
// A subscription is a record in the AGENTBUS_SUBSCRIPTIONS bucket and one durable consumer per
// source of its events (the history stream, the dead-letter stream) that lets one event of the
// subscription be in flight at a time: events reach the receiver in the order they were stored,
// so in order per thread. Every workflow host runs Deliver, which pulls from every
// subscription's consumers; a host that dies hands its delivery over when the consumer's ack
// wait ends. A stored message may carry two events (a request and its reply, stored together);
// each is delivered on its own: a failed event is tried again, alone, with a growing wait until
// the retry period, counted from when it was stored, has passed; it is then kept in
// AGENTBUS_UNDELIVERED, from where an operator replays or discards it, and the next event is
// tried. Events carry a stable webhook-id, so a receiver de-duplicates what it got twice.
//
// It does not decide who may manage subscriptions; the ingress checks the caller first.
package subscription

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/capped"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/usage"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// Event types.
const (
	// MessageIncoming is a message sent to an agent (by a user, a webhook, another agent or
	// one of its timers), as stored in history.
	MessageIncoming = "message.incoming"
	// MessageOutgoing is a message an agent sent: a reply or a post.
	MessageOutgoing = "message.outgoing"
	// DeadLetterCreated is a request whose handler failed on every attempt.
	DeadLetterCreated = "deadletter.created"
)

// EventTypes lists every event type, in the order the docs show them.
var EventTypes = []string{MessageIncoming, MessageOutgoing, DeadLetterCreated}

// Defaults and bounds of Config.
const (
	DefaultMaxPerTenant = 10
	DefaultTimeout      = 10 * time.Second
	// MaxTimeout bounds Timeout, below the consumers' ack wait.
	MaxTimeout        = 20 * time.Second
	DefaultRetryFor   = 24 * time.Hour
	DefaultMaxBackoff = 10 * time.Minute
	// FirstBackoff is the wait before the first retry; each further one waits twice as long,
	// up to MaxBackoff.
	FirstBackoff = time.Second
	// ackWait is how long a consumer waits for a delivering host before another gets the event.
	ackWait = 30 * time.Second
	// pullHeartbeat is how often the server tells a delivering host that its request for the next
	// event still waits. A host that hears nothing for two of them asks again (deliver.go).
	pullHeartbeat = 2 * time.Second
	// maxDescription bounds a subscription's description.
	maxDescription = 256
	// maxAgents bounds the agents a subscription filters on.
	maxAgents = 64
	// maxURL bounds a receiver URL.
	maxURL = 2048
)

// Config configures a Store.
type Config struct {
	// Allow is the operator's allow-list of receiver URLs; nil or empty allows none.
	Allow *outbound.AllowList
	// MaxPerTenant caps a tenant's subscriptions. Default DefaultMaxPerTenant.
	MaxPerTenant int
	// Timeout bounds one delivery attempt. Default DefaultTimeout, at most MaxTimeout.
	Timeout time.Duration
	// RetryFor is how long after an event was stored its delivery is still tried. Default
	// DefaultRetryFor.
	RetryFor time.Duration
	// MaxBackoff caps the wait between two attempts. Default DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Logger receives delivery failures; nil discards them. Receiver URLs are logged, secrets
	// never.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxPerTenant <= 0 {
		c.MaxPerTenant = DefaultMaxPerTenant
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Timeout = min(c.Timeout, MaxTimeout)
	if c.RetryFor <= 0 {
		c.RetryFor = DefaultRetryFor
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Subscription is one tenant's subscription.
type Subscription struct {
	ID       string `json:"id"`
	TenantID string `json:"tenantId"`
	// URL is where events are POSTed.
	URL string `json:"url"`
	// Events are the event types delivered.
	Events []string `json:"events"`
	// Agents, when not empty, limits the events to those of these agents.
	Agents      []string     `json:"agents,omitempty"`
	Description string       `json:"description,omitempty"`
	CreatedAt   timefmt.Time `json:"createdAt"`
	// Secret signs the deliveries (whsec_ and a base64 key). Stored, and shown to the API only
	// when the subscription is created.
	Secret string `json:"secret,omitempty"`
}

// Redacted is the subscription without its secret.
func (s Subscription) Redacted() Subscription {
	s.Secret = ""
	return s
}

// wants reports whether the subscription takes events of this type and agent.
func (s *Subscription) wants(eventType, agentName string) bool {
	return slices.Contains(s.Events, eventType) && (len(s.Agents) == 0 || slices.Contains(s.Agents, agentName))
}

// Errors callers test for.
var (
	ErrNotFound = errors.New("no such subscription")
	// ErrLimit refuses a subscription above the tenant's limit.
	ErrLimit = errors.New("the tenant has as many subscriptions as it may have")
	// ErrInvalid wraps what is wrong with a new subscription.
	ErrInvalid = errors.New("invalid subscription")
)

// Store keeps subscriptions and delivers their events.
type Store struct {
	cfg         Config
	js          jetstream.JetStream
	kv          jetstream.KeyValue
	messages    jetstream.Stream
	dead        jetstream.Stream
	undelivered bus.Kept // the events given up on (dead letters are the store's other use)
	// meter counts the undelivered events in their tenants' usage (usage.Kept); ownMeter when
	// NewStore made it, for Deliver to publish.
	meter    *usage.Meter
	ownMeter bool
	// clients deliver: public refuses internal addresses; literal is for allow-list entries
	// that name an address.
	public, literal *http.Client
}

// NewStore returns a Store over the bus's resources.
func NewStore(res *bus.Resources, cfg Config) *Store {
	cfg = cfg.withDefaults()
	s := &Store{
		cfg: cfg, js: res.JS, kv: res.Subscriptions,
		messages: res.Messages, dead: res.DeadLetters,
		public: outbound.NewClient(cfg.Timeout, false), literal: outbound.NewClient(cfg.Timeout, true),
	}
	s.undelivered = bus.Kept{Stream: res.Undelivered, JS: res.JS, Noun: "undelivered event", NotFound: ErrEventNotFound,
		Count: func(tenant string, bytes int64, kept time.Time) { s.meter.AddAt(tenant, usage.Kept, bytes, kept) }}
	m, err := usage.NewMeter(res.JS.Conn(), cfg.Logger)
	if err != nil {
		cfg.Logger.Error("undelivered events will not count in their tenants' usage", "err", err)
	}
	s.meter, s.ownMeter = m, m != nil
	return s
}

// Meter makes the store count the undelivered events it keeps and removes with m, which its
// owner publishes, in place of the meter of its own that Deliver publishes; call it before the
// store is used.
func (s *Store) Meter(m *usage.Meter) { s.meter, s.ownMeter = m, false }

// New is what a tenant admin asks for.
type New struct {
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Agents      []string `json:"agents"`
	Description string   `json:"description"`
	// Secret, when given, is the signing secret (whsec_ and a base64 key of 24 to 64 bytes);
	// otherwise one is made.
	Secret string `json:"secret"`
}

// validate checks n and returns the subscription it describes.
func (s *Store) validate(tenant string, n New) (Subscription, error) {
	bad := func(format string, args ...any) (Subscription, error) {
		return Subscription{}, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if n.URL == "" {
		return bad("url is required")
	}
	if err := subject.CheckText("url", n.URL, maxURL); err != nil {
		return bad("%v", err)
	}
	if _, _, err := s.cfg.Allow.Check(n.URL); err != nil {
		if errors.Is(err, outbound.ErrURLNotAllowed) {
			return Subscription{}, err
		}
		return bad("url: %v", err)
	}
	sub := Subscription{TenantID: tenant, URL: n.URL, Description: n.Description, Secret: n.Secret}
	if len(n.Events) == 0 {
		return bad("events is required: one or more of %s", strings.Join(EventTypes, ", "))
	}
	for _, e := range n.Events {
		if !slices.Contains(EventTypes, e) {
			return bad("unknown event type %s: want %s", subject.Quote(e), strings.Join(EventTypes, ", "))
		}
		if !slices.Contains(sub.Events, e) {
			sub.Events = append(sub.Events, e)
		}
	}
	if len(n.Agents) > maxAgents {
		return bad("at most %d agents", maxAgents)
	}
	for _, a := range n.Agents {
		if err := ident.ValidName(a); err != nil {
			return bad("agent %s: %v", subject.Quote(a), err)
		}
		if !slices.Contains(sub.Agents, a) {
			sub.Agents = append(sub.Agents, a)
		}
	}
	if err := subject.CheckText("description", n.Description, maxDescription); err != nil {
		return bad("%v", err)
	}
	if sub.Secret == "" {
		sub.Secret = webhooksig.NewStandardSecret()
	} else if err := checkSecret(sub.Secret); err != nil {
		return bad("%v", err)
	}
	return sub, nil
}

// checkSecret accepts a Standard Webhooks secret of 24 to 64 key bytes.
func checkSecret(secret string) error {
	b64, ok := strings.CutPrefix(secret, webhooksig.StandardSecretPrefix)
	key, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(key) < 24 || len(key) > 64 {
		return errors.New("secret must be whsec_ followed by a base64 key of 24 to 64 bytes")
	}
	return nil
}

// newID returns a new subscription id: "sub_" and 20 hex digits.
func newID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "sub_" + hex.EncodeToString(b)
}

// validID reports whether id can be a subscription id (and is safe as a subject token).
func validID(id string) bool {
	h, ok := strings.CutPrefix(id, "sub_")
	_, err := hex.DecodeString(h)
	return ok && len(h) == 20 && err == nil
}

// Create stores a new subscription of the tenant and starts its consumers, from now on: the
// events stored after Create returns are delivered. The result carries the secret. A tenant
// that has Config.MaxPerTenant subscriptions gets ErrLimit; of subscriptions created at once
// past it, the later ones give way (more than needed may), and none is kept past it.
func (s *Store) Create(ctx context.Context, tenant string, n New) (Subscription, error) {
	sub, err := s.validate(tenant, n)
	if err != nil {
		return Subscription{}, err
	}
	count := func(ctx context.Context) (int, error) {
		have, err := s.List(ctx, tenant)
		return len(have), err
	}
	if err := capped.Room(ctx, s.cfg.MaxPerTenant, count, ErrLimit); err != nil {
		return Subscription{}, err
	}
	sub.ID, sub.CreatedAt = newID(), timefmt.Now()
	for _, src := range s.sources(&sub) {
		if _, err := src.stream.CreateConsumer(ctx, src.consumer(&sub)); err != nil {
			s.removeConsumers(context.WithoutCancel(ctx), &sub)
			return Subscription{}, fmt.Errorf("creating the subscription's consumer: %w", err)
		}
	}
	b, err := json.Marshal(sub)
	if err != nil {
		return Subscription{}, fmt.Errorf("encoding subscription: %w", err)
	}
	key := subject.SubscriptionKey(tenant, sub.ID)
	if _, err := s.kv.Create(ctx, key, b); err != nil {
		s.removeConsumers(context.WithoutCancel(ctx), &sub)
		return Subscription{}, fmt.Errorf("storing subscription: %w", err)
	}
	undo := func(ctx context.Context) error {
		var err error
		if perr := s.kv.Purge(ctx, key); perr != nil {
			err = fmt.Errorf("removing the subscription past the limit: %w", perr)
		}
		return errors.Join(err, s.removeConsumers(ctx, &sub))
	}
	if err := capped.Keep(ctx, s.cfg.MaxPerTenant, count, undo, ErrLimit); err != nil {
		return Subscription{}, err
	}
	return sub, nil
}

// source is one stream a subscription's events come from.
type source struct {
	name   string
	stream jetstream.Stream
	filter []string
}

// consumer is the configuration of the subscription's consumer of the source: one event in
// flight at a time, never given up by the server (the delivering host decides when to stop).
func (src source) consumer(sub *Subscription) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        subject.SubscriptionConsumer(sub.TenantID, sub.ID, src.name),
		Description:    "agentbus subscription " + sub.TenantID + "/" + sub.ID,
		FilterSubjects: src.filter,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxAckPending:  1,
		MaxDeliver:     -1,
	}
}

// sources lists the streams the subscription's events come from.
func (s *Store) sources(sub *Subscription) []source {
	var out []source
	if slices.Contains(sub.Events, MessageIncoming) || slices.Contains(sub.Events, MessageOutgoing) {
		out = append(out, source{name: "msg", stream: s.messages, filter: []string{subject.TenantThreads(sub.TenantID)}})
	}
	if slices.Contains(sub.Events, DeadLetterCreated) {
		filter := []string{subject.TenantDeadLetters(sub.TenantID)}
		if len(sub.Agents) > 0 {
			filter = filter[:0]
			for _, a := range sub.Agents {
				filter = append(filter, subject.AgentDeadLetters(sub.TenantID, a))
			}
		}
		out = append(out, source{name: "dead", stream: s.dead, filter: filter})
	}
	return out
}

// removeConsumers deletes the subscription's consumers, those that exist.
func (s *Store) removeConsumers(ctx context.Context, sub *Subscription) error {
	var errs []error
	for _, src := range []source{{name: "msg", stream: s.messages}, {name: "dead", stream: s.dead}} {
		err := src.stream.DeleteConsumer(ctx, subject.SubscriptionConsumer(sub.TenantID, sub.ID, src.name))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the subscription's consumers: %w", err)
	}
	return nil
}

// Get returns one of the tenant's subscriptions, with its secret.
func (s *Store) Get(ctx context.Context, tenant, id string) (Subscription, error) {
	if !validID(id) {
		return Subscription{}, ErrNotFound
	}
	e, err := s.kv.Get(ctx, subject.SubscriptionKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Subscription{}, ErrNotFound
	}
	if err != nil {
		return Subscription{}, fmt.Errorf("reading subscription: %w", err)
	}
	return decode(e.Value())
}

func decode(b []byte) (Subscription, error) {
	var sub Subscription
	if err := json.Unmarshal(b, &sub); err != nil {
		return Subscription{}, fmt.Errorf("decoding subscription: %w", err)
	}
	return sub, nil
}

// List returns the tenant's subscriptions, oldest first, with their secrets.
func (s *Store) List(ctx context.Context, tenant string) ([]Subscription, error) {
	entries, err := bus.Entries(ctx, s.js, s.kv, subject.TenantSubscriptionKeys(tenant))
	if err != nil {
		return nil, fmt.Errorf("listing subscriptions: %w", err)
	}
	out := make([]Subscription, 0, len(entries))
	for _, e := range entries {
		sub, err := decode(e.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, sub)
	}
	slices.SortFunc(out, func(a, b Subscription) int {
		if c := a.CreatedAt.Compare(b.CreatedAt.Time); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Delete removes a subscription: its record, its consumers (an event being delivered may still
// arrive) and its undelivered events.
func (s *Store) Delete(ctx context.Context, tenant, id string) error {
	sub, err := s.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	if err := s.kv.Purge(ctx, subject.SubscriptionKey(tenant, id)); err != nil {
		return fmt.Errorf("removing subscription: %w", err)
	}
	if err := s.removeConsumers(ctx, &sub); err != nil {
		return err
	}
	if err := s.removeProgress(ctx, &sub); err != nil {
		return err
	}
	if err := s.undelivered.Purge(ctx, subject.Undelivered(tenant, id), tenant); err != nil {
		return fmt.Errorf("removing the subscription's undelivered events: %w", err)
	}
	return nil
}

// DeleteTenant removes every subscription of a tenant (the tenant is being deleted).
func (s *Store) DeleteTenant(ctx context.Context, tenant string) error {
	subs, err := s.List(ctx, tenant)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		if err := s.Delete(ctx, tenant, sub.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return s.undelivered.Purge(ctx, subject.TenantUndelivered(tenant), tenant)
}

// List is the answer of the subscription list: the tenant's subscriptions, secrets left out.
type List struct {
	Subscriptions []Subscription `json:"subscriptions"`
}

// UndeliveredPage is the answer of the undelivered-events list: a page, oldest first, and the
// id to continue after (0: no more).
type UndeliveredPage struct {
	Events []Undelivered `json:"events"`
	Next   uint64        `json:"next"`
}

// Replayed is the answer of a replay of an undelivered event the receiver accepted.
type Replayed struct {
	Delivered bool        `json:"delivered"`
	Event     Undelivered `json:"event"`
}
