// Package remote makes HTTP services agents (docs/remote-agents.md): a registration names an
// endpoint, its signing secret and its methods, and every workflow host process serves every
// registered agent by POSTing each request to the endpoint, signed by the Standard Webhooks
// specification, and carrying out its answer: the reply, the new state (written with
// compare-and-set), and what else the answer asks for (posts, timers, tells, steps, waits,
// calls; docs/remote-agent-protocol.schema.json). A remote agent is an agent of package agent
// whose handlers make those calls, so it has every guarantee a Go agent has: order per
// conversation, retries, dead letters, state written once per request.
//
// Registrations live in the AGENTBUS_REMOTE_AGENTS bucket, by agent name, and a tenant's are
// indexed in AGENTBUS_REMOTE_AGENT_OWNERS. Serve watches the first and runs one host per
// registration in the process, started, replaced and stopped as registrations come, change and
// go.
package remote

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/capped"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// Bounds and defaults of a registration.
const (
	DefaultTimeoutSeconds = 30
	MaxTimeoutSeconds     = 300
	DefaultMaxConcurrent  = 32
	MaxMaxConcurrent      = 1024
	// DefaultPartitions is the partition count of a tenant's remote agent's inbox: each
	// workflow host process runs a host of it, and each partition is a consumer the NATS servers
	// keep for it, busy or idle. MaxPartitions bounds what a tenant's registration may ask of
	// them.
	DefaultPartitions = 4
	MaxPartitions     = 16
	// DefaultSharedPartitions is that of a global remote agent, which several tenants may call:
	// a partition's requests beyond what its host holds wait in arrival order, so its partitions
	// bound the backlog behind which one tenant's requests wait for another's (docs/limits.md).
	// A system admin may give one up to MaxSharedPartitions.
	DefaultSharedPartitions = 16
	MaxSharedPartitions     = 1024
	maxNames                = 256
	maxURL                  = 2048
	maxDescription          = 4096
	maxSchema               = 64 << 10
	// maxCompiledSchemas bounds what the methods' schemas of one registration hold once
	// compiled (jsonschema.Validator.Size): every process that checks their calls compiles
	// them, and a schema of a few kilobytes of repeated patterns compiles to megabytes.
	maxCompiledSchemas = 8 << 20
)

// Registration is a remote agent.
type Registration struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	Chat bool   `json:"chat"`
	File bool   `json:"file"`
	// Webhooks are its webhook methods; Methods its Data methods.
	Webhooks      []string `json:"webhooks"`
	Methods       []Method `json:"methods"`
	WorkflowTypes []string `json:"workflowTypes"`
	// Tenants that may call it; empty: every tenant. A tenant's own agent has its tenant.
	Tenants []string `json:"tenants"`
	// Owner is the tenant whose admin registered it; empty for a system admin's.
	Owner          string `json:"owner,omitempty"`
	TimeoutSeconds int    `json:"timeoutSeconds"`
	MaxConcurrent  int    `json:"maxConcurrent"`
	// Partitions is the partition count of the agent's inbox: at most this many hosts share
	// its work. An inbox keeps the count it was made with (agent.Partitions).
	Partitions int `json:"partitions"`
	// Secret signs the requests; shown only in the answer that registers the agent.
	Secret    string       `json:"secret,omitempty"`
	CreatedAt timefmt.Time `json:"createdAt"`
	UpdatedAt timefmt.Time `json:"updatedAt"`
}

// Method is a Data method of a remote agent.
type Method struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
}

// List is the answer of a remote-agent list: registrations without their secrets.
type List struct {
	Agents []Registration `json:"agents"`
}

// defaultPartitions is the partition count of the registration's inbox when it names none:
// DefaultPartitions for an agent that one tenant calls (its own, or a global one restricted to
// it), DefaultSharedPartitions for one that several may.
func (r Registration) defaultPartitions() int {
	if r.Owner != "" || len(r.Tenants) == 1 {
		return DefaultPartitions
	}
	return DefaultSharedPartitions
}

// Redacted is the registration without its secret.
func (r Registration) Redacted() Registration {
	r.Secret = ""
	return r
}

// Errors callers test for.
var (
	ErrNotFound = errors.New("no such remote agent")
	// ErrExists refuses a name another agent (remote or Go) has.
	ErrExists = errors.New("an agent of this name exists")
	// ErrInvalid wraps what is wrong with a registration.
	ErrInvalid = errors.New("invalid registration")
	// ErrLimit is Put's answer to a tenant that has as many remote agents as it may have.
	ErrLimit = errors.New("the tenant has as many remote agents as it may have")
)

// Store keeps registrations.
type Store struct {
	res      *bus.Resources
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	registry jetstream.KeyValue
	// owners indexes the tenants' registrations (subject.RemoteAgentOwnerKey): an entry is
	// made before its registration and removed after it, so the index holds every tenant's
	// registration and perhaps one whose storing failed, which List leaves out.
	owners       jetstream.KeyValue
	allow        *outbound.AllowList
	maxPerTenant int
	// indexDone is set once the index is known to hold every registration.
	indexDone atomic.Bool
}

// DefaultMaxPerTenant is how many remote agents a tenant may register unless NewStore is told
// otherwise. Each agent adds an inbox stream with a consumer per partition, which the NATS
// servers keep, and the pull loops of the hosts serving remote agents.
const DefaultMaxPerTenant = 10

// NewStore returns a Store over the bus's buckets; allow is the allow-list a tenant's
// registration must match, maxPerTenant how many registrations a tenant may have (0 means
// DefaultMaxPerTenant; a system admin's registrations are not counted).
func NewStore(res *bus.Resources, allow *outbound.AllowList, maxPerTenant int) *Store {
	if maxPerTenant <= 0 {
		maxPerTenant = DefaultMaxPerTenant
	}
	return &Store{res: res, js: res.JS, kv: res.RemoteAgents, registry: res.Registry, owners: res.RemoteAgentOwners,
		allow: allow, maxPerTenant: maxPerTenant}
}

// validate checks a registration of owner ("" for a system admin) and fills in its defaults.
func (s *Store) validate(owner string, r *Registration) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if err := ident.ValidName(r.Name); err != nil {
		return bad("name: %v", err)
	}
	if err := s.checkURL(owner, r.URL); err != nil {
		return err
	}
	if !r.Chat && !r.File && len(r.Webhooks) == 0 && len(r.Methods) == 0 {
		return bad("the agent takes nothing: give chat, file, webhooks or methods")
	}
	for _, list := range [][]string{r.Webhooks, r.WorkflowTypes, r.Tenants} {
		if len(list) > maxNames {
			return bad("at most %d webhooks, workflow types or tenants", maxNames)
		}
	}
	for _, w := range r.Webhooks {
		if err := ident.ValidName(w); err != nil || strings.Contains(w, "/") {
			return bad("webhook %s: a name without '/' or ':'", subject.Quote(w))
		}
	}
	for _, t := range r.WorkflowTypes {
		if err := ident.ValidName(t); err != nil {
			return bad("workflow type %s: %v", subject.Quote(t), err)
		}
	}
	if err := validMethods(r.Methods); err != nil {
		return bad("%v", err)
	}
	r.Owner = owner
	if owner != "" {
		r.Tenants = []string{owner}
	}
	for _, t := range r.Tenants {
		if !ident.ValidTenant(t) {
			return bad("tenant %s is not a valid tenant id", subject.Quote(t))
		}
	}
	switch {
	case r.TimeoutSeconds == 0:
		r.TimeoutSeconds = DefaultTimeoutSeconds
	case r.TimeoutSeconds < 1 || r.TimeoutSeconds > MaxTimeoutSeconds:
		return bad("timeoutSeconds must be from 1 to %d", MaxTimeoutSeconds)
	}
	switch {
	case r.MaxConcurrent == 0:
		r.MaxConcurrent = DefaultMaxConcurrent
	case r.MaxConcurrent < 1 || r.MaxConcurrent > MaxMaxConcurrent:
		return bad("maxConcurrent must be from 1 to %d", MaxMaxConcurrent)
	}
	switch {
	case r.Partitions == 0:
		r.Partitions = r.defaultPartitions()
	case owner != "" && (r.Partitions < 1 || r.Partitions > MaxPartitions):
		return bad("partitions must be from 1 to %d", MaxPartitions)
	case r.Partitions < 1 || r.Partitions > MaxSharedPartitions:
		return bad("partitions must be from 1 to %d", MaxSharedPartitions)
	}
	if r.Secret != "" {
		if err := checkSecret(r.Secret); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

func validMethods(methods []Method) error {
	if len(methods) > maxNames {
		return fmt.Errorf("at most %d methods", maxNames)
	}
	seen := map[string]bool{}
	compiled := 0
	for _, m := range methods {
		v, err := validMethod(m)
		if err != nil {
			return err
		}
		if compiled += v.Size(); compiled > maxCompiledSchemas {
			return fmt.Errorf("the methods' schemas are too large together: compiled, they would hold more than %d MiB of memory in every process that checks their calls (about 48 bytes for each byte of a schema and each step of its patterns; a repetition such as {1,1000} multiplies what it repeats)", maxCompiledSchemas>>20)
		}
		if seen[strings.ToLower(m.Name)] {
			return fmt.Errorf("method %s given twice", subject.Quote(m.Name))
		}
		seen[strings.ToLower(m.Name)] = true
	}
	return nil
}

// validMethod checks one Data method as a registration gives it (its name, description, schema
// and the schema's examples) and returns the validator of its parameters: nil when the method
// takes every object.
func validMethod(m Method) (*jsonschema.Validator, error) {
	name := subject.Quote(m.Name)
	if err := ident.ValidName(m.Name); err != nil {
		return nil, fmt.Errorf("method %s: %v", name, err)
	}
	if err := subject.CheckText("description", m.Description, maxDescription); err != nil {
		return nil, fmt.Errorf("method %s: %v", name, err)
	}
	if len(m.Schema) > maxSchema {
		return nil, fmt.Errorf("method %s: the schema is larger than %d bytes", name, maxSchema)
	}
	if len(m.Schema) == 0 {
		return nil, nil
	}
	var obj map[string]any
	if err := json.Unmarshal(m.Schema, &obj); err != nil {
		return nil, fmt.Errorf("method %s: the schema is not a JSON object", name)
	}
	// Calls are checked against it: one that cannot check them is refused now.
	v, err := jsonschema.Compile(m.Schema)
	if err != nil {
		return nil, fmt.Errorf("method %s: %v", name, err)
	}
	if err := checkExamples(m.Schema, v); err != nil {
		return nil, fmt.Errorf("method %s: %v", name, err)
	}
	return v, nil
}

// checkURL accepts a system admin's absolute http(s) URL, and a tenant's on the allow-list.
func (s *Store) checkURL(owner, raw string) error {
	if raw == "" {
		return fmt.Errorf("%w: url is required", ErrInvalid)
	}
	if err := subject.CheckText("url", raw, maxURL); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if owner != "" {
		if _, _, err := s.allow.Check(raw); err != nil {
			if errors.Is(err, outbound.ErrURLNotAllowed) {
				return err
			}
			return fmt.Errorf("%w: url: %v", ErrInvalid, err)
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("%w: url must be an absolute http or https URL without user information", ErrInvalid)
	}
	return nil
}

func checkSecret(secret string) error {
	b64, ok := strings.CutPrefix(secret, webhooksig.StandardSecretPrefix)
	key, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(key) < 24 || len(key) > 64 {
		return errors.New("secret must be whsec_ followed by a base64 key of 24 to 64 bytes")
	}
	return nil
}

// Put registers an agent, or replaces owner's registration of that name (replace). The
// registration it returns carries the secret: the one given, the one kept, or a new one; only a
// new registration's answer shows it to the caller (Redacted).
//
// A replace is of the whole registration, and the last one wins: one that meets another writer's
// change (a compare-and-set conflict) pauses a little (bus.ConflictBackoff), reads the
// registration again and replaces it, for as long as ctx and bus.ConflictPatience allow. One
// that finds it removed meanwhile answers ErrNotFound.
func (s *Store) Put(ctx context.Context, owner string, r Registration, replace bool) (Registration, error) {
	if err := s.validate(owner, &r); err != nil {
		return Registration{}, err
	}
	key := subject.AgentKey(r.Name)
	now := timefmt.Now()
	r.CreatedAt, r.UpdatedAt = now, now
	var reg Registration
	err := bus.RetryConflicts(ctx, func() (err error) {
		reg, err = s.put(ctx, owner, key, r, replace)
		return err
	})
	if err != nil {
		return Registration{}, err
	}
	if !replace && owner != "" {
		undo := func(ctx context.Context) error {
			if err := s.Delete(ctx, owner, r.Name); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			return nil
		}
		if err := capped.Keep(ctx, s.maxPerTenant, s.counter(owner), undo, ErrLimit); err != nil {
			return Registration{}, err
		}
	}
	// The agent's calls need its inbox: made here, the first call seldom waits for the host
	// serving it to make it (which it does anyway: an error here changes nothing).
	_, _ = s.res.InboxWith(ctx, r.Name, reg.Partitions)
	return reg, nil
}

// counter counts owner's registrations, for capped.
func (s *Store) counter(owner string) capped.Count {
	return func(ctx context.Context) (int, error) {
		have, err := s.List(ctx, owner)
		return len(have), err
	}
}

// put makes one attempt of Put, with r validated. It answers an error that bus.IsConflict
// recognises when the registration changed between its read and its update.
func (s *Store) put(ctx context.Context, owner, key string, r Registration, replace bool) (Registration, error) {
	old, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if replace {
			return Registration{}, ErrNotFound
		}
		if _, err := s.registry.Get(ctx, key); err == nil {
			return Registration{}, ErrExists // a Go agent's name
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return Registration{}, fmt.Errorf("reading the agent registry: %w", err)
		}
		if owner != "" {
			if err := capped.Room(ctx, s.maxPerTenant, s.counter(owner), ErrLimit); err != nil {
				return Registration{}, err
			}
		}
		if r.Secret == "" {
			r.Secret = webhooksig.NewStandardSecret()
		}
		b, err := json.Marshal(r)
		if err != nil {
			return Registration{}, fmt.Errorf("encoding registration: %w", err)
		}
		madeEntry, err := s.index(ctx, owner, r.Name)
		if err != nil {
			return Registration{}, err
		}
		if _, err := s.kv.Create(ctx, key, b); err != nil {
			if madeEntry {
				s.unindex(context.WithoutCancel(ctx), owner, r.Name)
			}
			if bus.IsConflict(err) {
				return Registration{}, ErrExists
			}
			return Registration{}, fmt.Errorf("storing registration: %w", err)
		}
		return r, nil
	case err != nil:
		return Registration{}, fmt.Errorf("reading registration: %w", err)
	}
	prev, err := decode(old.Value())
	if err != nil {
		return Registration{}, err
	}
	if prev.Owner != owner && owner != "" {
		// Another tenant's, or a system admin's: for this tenant it is a name taken.
		if replace {
			return Registration{}, ErrNotFound
		}
		return Registration{}, ErrExists
	}
	if !replace {
		return Registration{}, ErrExists
	}
	r.CreatedAt = prev.CreatedAt
	if r.Secret == "" {
		r.Secret = prev.Secret
	}
	if owner == "" {
		r.Owner = prev.Owner
		if prev.Owner != "" {
			r.Tenants = []string{prev.Owner}
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return Registration{}, fmt.Errorf("encoding registration: %w", err)
	}
	if _, err := s.kv.Update(ctx, key, b, old.Revision()); err != nil {
		return Registration{}, fmt.Errorf("storing registration: %w", err)
	}
	return r, nil
}

func decode(b []byte) (Registration, error) {
	var r Registration
	if err := json.Unmarshal(b, &r); err != nil {
		return Registration{}, fmt.Errorf("decoding registration: %w", err)
	}
	switch {
	case r.Partitions == 0: // stored before registrations had a count
		r.Partitions = r.defaultPartitions()
	case r.Partitions < 0 || r.Partitions > MaxSharedPartitions:
		// Not written by Put: agent.Partitions would panic on it.
		return Registration{}, fmt.Errorf("decoding registration: partitions %d: not from 1 to %d", r.Partitions, MaxSharedPartitions)
	}
	return r, nil
}

// Get returns a registration, with its secret. A tenant (owner not "") sees only its own.
func (s *Store) Get(ctx context.Context, owner, name string) (Registration, error) {
	e, err := s.kv.Get(ctx, subject.AgentKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Registration{}, ErrNotFound
	}
	if err != nil {
		return Registration{}, fmt.Errorf("reading registration: %w", err)
	}
	r, err := decode(e.Value())
	if err != nil {
		return Registration{}, err
	}
	if owner != "" && r.Owner != owner {
		return Registration{}, ErrNotFound
	}
	return r, nil
}

// List returns the registrations a caller sees, by name: a tenant's own (owner), or every one
// (owner ""). A tenant's are read through the index, so that listing them costs the same
// whatever the other tenants registered; until the index holds the registrations stored before
// it existed (Index), every registration is read.
func (s *Store) List(ctx context.Context, owner string) ([]Registration, error) {
	var out []Registration
	var err error
	if owner == "" || !s.indexed(ctx) {
		out, err = s.listAll(ctx, owner)
	} else {
		out, err = s.listOwned(ctx, owner)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Registration) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listAll reads every registration and keeps owner's (every one when owner is "").
func (s *Store) listAll(ctx context.Context, owner string) ([]Registration, error) {
	entries, err := bus.Entries(ctx, s.js, s.kv)
	if err != nil {
		return nil, fmt.Errorf("listing remote agents: %w", err)
	}
	out := []Registration{}
	for _, e := range entries {
		r, err := decode(e.Value())
		if err != nil {
			return nil, err
		}
		if owner == "" || r.Owner == owner {
			out = append(out, r)
		}
	}
	return out, nil
}

// listOwned reads owner's registrations through the index. An entry whose registration is not
// stored (its storing failed, or is under way) or is another's (the name removed and registered
// again by another tenant) is left out.
func (s *Store) listOwned(ctx context.Context, owner string) ([]Registration, error) {
	entries, err := bus.Entries(ctx, s.js, s.owners, subject.TenantRemoteAgentOwnerKeys(owner))
	if err != nil {
		return nil, fmt.Errorf("listing remote agents: %w", err)
	}
	out := []Registration{}
	for _, e := range entries {
		name, err := subject.ParseRemoteAgentOwnerKey(e.Key())
		if err != nil {
			continue
		}
		r, err := s.Get(ctx, owner, name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// index makes owner's index entry of the agent name, unless owner is "" (a system admin's
// registration, which no tenant lists); made reports whether this call made it.
func (s *Store) index(ctx context.Context, owner, name string) (made bool, err error) {
	if owner == "" {
		return false, nil
	}
	_, err = s.owners.Create(ctx, subject.RemoteAgentOwnerKey(owner, name), nil)
	switch {
	case err == nil:
		return true, nil
	case bus.IsConflict(err):
		return false, nil // there already: a registration of the name, or one whose storing failed
	default:
		return false, fmt.Errorf("indexing remote agent: %w", err)
	}
}

// unindex removes owner's index entry of the agent name; an entry it could not remove only
// costs listings a read.
func (s *Store) unindex(ctx context.Context, owner, name string) {
	if owner != "" {
		_ = s.owners.Purge(ctx, subject.RemoteAgentOwnerKey(owner, name))
	}
}

// indexed reports whether the index holds every tenant's registrations (Index ran once).
func (s *Store) indexed(ctx context.Context) bool {
	if s.indexDone.Load() {
		return true
	}
	if _, err := s.owners.Get(ctx, subject.RemoteAgentsIndexed); err != nil {
		return false
	}
	s.indexDone.Store(true)
	return true
}

// Index adds every tenant's registration to the index, and says so in it: registrations stored
// by a build that did not index them are listed through the index once it ran. An ingress runs
// it as it starts; it costs a reading of every registration, once, and what it finds indexed
// already is left alone.
func (s *Store) Index(ctx context.Context) error {
	all, err := s.listAll(ctx, "")
	if err != nil {
		return err
	}
	for _, r := range all {
		if _, err := s.index(ctx, r.Owner, r.Name); err != nil {
			return err
		}
	}
	if _, err := s.owners.Put(ctx, subject.RemoteAgentsIndexed, nil); err != nil {
		return fmt.Errorf("indexing remote agents: %w", err)
	}
	s.indexDone.Store(true)
	return nil
}

// DeleteTenant removes every remote agent of a tenant being deleted, and its index entries: a
// deleted tenant's agents would otherwise go on being served by every workflow host process, and
// a tenant created later with the same id would find them as its own.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) error {
	regs, err := s.List(ctx, tenant)
	if err != nil {
		return err
	}
	for _, r := range regs {
		if err := s.Delete(ctx, tenant, r.Name); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	entries, err := bus.Entries(ctx, s.js, s.owners, subject.TenantRemoteAgentOwnerKeys(tenant))
	if err != nil {
		return fmt.Errorf("listing remote agents: %w", err)
	}
	for _, e := range entries {
		if err := s.owners.Purge(ctx, e.Key()); err != nil {
			return fmt.Errorf("removing remote agent index entry: %w", err)
		}
	}
	return nil
}

// Delete removes a registration (a tenant's own only) and the agent's entry in the registry:
// the hosts stop serving it within seconds, and its name is free again.
func (s *Store) Delete(ctx context.Context, owner, name string) error {
	r, err := s.Get(ctx, owner, name)
	if err != nil {
		return err
	}
	key := subject.AgentKey(name)
	if err := s.kv.Purge(ctx, key); err != nil {
		return fmt.Errorf("removing registration: %w", err)
	}
	s.unindex(ctx, r.Owner, name)
	if err := s.registry.Purge(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("removing the agent from the registry: %w", err)
	}
	return nil
}
