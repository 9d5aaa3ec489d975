package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// InboxOf returns the inbox stream of agent (subject.InboxStream), creating it, or updating a
// declaration that differs, when called. Whatever makes an agent callable makes its inbox first:
// a workflow host for its agents before it registers them (and again when it finds the inbox
// gone), the registration of a remote agent, and Ensure for the agents of a LegacyInboxStream it
// moves. A request published for an agent without an inbox finds no stream
// (nats.ErrNoResponders).
//
// The partition count is the inbox's: a new inbox gets the configured one (Config.Partitions),
// and an inbox that exists keeps its own, whatever this process is configured with
// (InboxPartitions reads it; Repartition changes it). Every process that pulls or inspects the
// inbox uses the inbox's count, so processes configured otherwise still agree on it.
//
// While JetStream is not ready it retries as Ensure does, until ctx ends or two minutes pass.
func (r *Resources) InboxOf(ctx context.Context, agent string) (jetstream.Stream, error) {
	return r.InboxWith(ctx, agent, r.Config.PartitionCount())
}

// InboxWith is InboxOf with partitions for the count of a new inbox: a host that finds the
// inbox of an agent it pulls deleted makes it again with the count it pulls.
func (r *Resources) InboxWith(ctx context.Context, agent string, partitions int) (jetstream.Stream, error) {
	return Starting(ctx, func(reqCtx context.Context) (jetstream.Stream, error) {
		return ensureInbox(reqCtx, r.JS, r.Config, agent, partitions)
	})
}

// InboxPartitions returns the partition count of the inbox stream s, as its subject transform
// or, while it is parked (DeleteInbox), its metadata names it; 0 for a stream that names none.
func InboxPartitions(s jetstream.Stream) int {
	cfg := s.CachedInfo().Config
	if cfg.SubjectTransform != nil {
		if n, ok := subject.TransformPartitions(cfg.SubjectTransform.Destination); ok {
			return n
		}
	}
	if n, err := strconv.Atoi(cfg.Metadata[inboxPartitionsKey]); err == nil && n > 0 {
		return n
	}
	return 0
}

// PartitionsOf reads the partition count of agent's inbox: the configured count when the agent
// has no inbox (the count its inbox would get).
func (r *Resources) PartitionsOf(ctx context.Context, agent string) (int, error) {
	s, err := r.JS.Stream(ctx, subject.InboxStream(agent))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return r.Config.PartitionCount(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the inbox of %s: %w", agent, err)
	}
	if n := InboxPartitions(s); n > 0 {
		return n, nil
	}
	return r.Config.PartitionCount(), nil
}

// Repartition gives agent's inbox partitions partitions, unless it holds requests
// (ErrRepartition): those stored keep the partition they were stored in, which the new
// consumers would not pull. Call it only while no host pulls the inbox (a host pulls the count it
// read when it started). So that no request lands in the inbox between its count and its
// change, it is parked as DeleteInbox parks it meanwhile: a request published then is refused
// (nats.ErrNoResponders), not stored.
func (r *Resources) Repartition(ctx context.Context, agent string, partitions int) (jetstream.Stream, error) {
	name := subject.InboxStream(agent)
	s, err := r.JS.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", name, err)
	}
	have := InboxPartitions(s)
	if have == partitions {
		return s, nil
	}
	n, err := r.parkEmpty(ctx, s, agent, partitions)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		return nil, repartitionError(agent, n, have, partitions)
	}
	if s, err = r.JS.CreateOrUpdateStream(ctx, declaredInbox(r.Config, agent, partitions)); err != nil {
		return nil, fmt.Errorf("giving stream %s its subjects back: %w", name, err)
	}
	return s, nil
}

func repartitionError(agent string, requests uint64, have, want int) error {
	return fmt.Errorf("%w: the inbox of %s holds %d requests in %d partitions, not repartitioned to %d: "+
		"let the inbox drain while no host of the agent runs, then start one", ErrRepartition, agent, requests, have, want)
}

// HasInbox reports whether agent has an inbox stream.
func (r *Resources) HasInbox(ctx context.Context, agent string) (bool, error) {
	_, err := r.JS.Stream(ctx, subject.InboxStream(agent))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the inbox of %s: %w", agent, err)
	}
	return true, nil
}

// DeleteInbox deletes the inbox stream of an agent that no host serves any more, unless it
// holds requests: it returns how many it holds and kept (they are handled if the agent is served
// again). So that no request published meanwhile is lost, the inbox is parked on
// subject.RetiredInbox before it is counted (park), and given its subjects back when it holds
// requests. A host of the agent
// that starts meanwhile makes the inbox again (InboxOf), and so does one whose inbox is gone.
func (r *Resources) DeleteInbox(ctx context.Context, agent string) (kept uint64, err error) {
	name := subject.InboxStream(agent)
	s, err := r.JS.Stream(ctx, name)
	if err != nil {
		return 0, gone(fmt.Errorf("reading stream %s: %w", name, err))
	}
	// gone: another process deleted it first.
	if n, err := r.parkEmpty(ctx, s, agent, r.Config.PartitionCount()); err != nil || n > 0 {
		return n, gone(err)
	}
	if err := r.JS.DeleteStream(ctx, name); err != nil {
		return 0, gone(fmt.Errorf("deleting stream %s: %w", name, err))
	}
	return 0, nil
}

// parkEmpty parks agent's inbox s (park) unless it holds requests, and counts them again once it
// is parked, so that one stored between the first count and the park counts too. held is what it
// holds: then it is left, or given back its subjects, with its own partition count (fallback
// when it names none, parked by a build that did not); with none it stays parked.
func (r *Resources) parkEmpty(ctx context.Context, s jetstream.Stream, agent string, fallback int) (held uint64, err error) {
	if held, err = requestsIn(ctx, s, agent); err != nil || held > 0 {
		return held, err
	}
	partitions := InboxPartitions(s)
	if partitions == 0 {
		partitions = fallback
	}
	if s, err = park(ctx, r.JS, s, subject.RetiredInbox(agent)); err != nil {
		return 0, err
	}
	if held, err = requestsIn(ctx, s, agent); err != nil || held > 0 {
		if _, uerr := r.JS.UpdateStream(ctx, declaredInbox(r.Config, agent, partitions)); uerr != nil {
			err = errors.Join(err, fmt.Errorf("giving stream %s its subjects back: %w", subject.InboxStream(agent), uerr))
		}
	}
	return held, err
}

// park gives the inbox stream s the subject parked, which nothing publishes on, so that no
// request lands in it while it is counted or emptied (the stored messages keep their subjects),
// and no declaration's fingerprint: InboxOf, for a registration of the agent made meanwhile or
// after a process died half-way through DeleteInbox, gives an agent's inbox its subjects back.
func park(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, parked string) (jetstream.Stream, error) {
	cfg := s.CachedInfo().Config
	cfg.Subjects, cfg.SubjectTransform = []string{parked}, nil
	cfg.Metadata = maps.Clone(cfg.Metadata)
	delete(cfg.Metadata, DeclaredKey)
	s, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("parking stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// ensureInbox creates or updates the inbox stream of agent: a work queue whose subject
// transform maps each request to one of its partitions, partitions for a new inbox and its own
// count for one that exists. An inbox declared so before is only read.
func ensureInbox(ctx context.Context, js jetstream.JetStream, cfg Config, agent string, partitions int) (jetstream.Stream, error) {
	name := subject.InboxStream(agent)
	for range 3 {
		s, err := js.Stream(ctx, name)
		switch {
		case err == nil:
			if have := InboxPartitions(s); have > 0 {
				partitions = have
			}
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, fmt.Errorf("reading stream %s: %w", name, err)
		}
		sc := declaredInbox(cfg, agent, partitions)
		if s != nil {
			if s.CachedInfo().Config.Metadata[DeclaredKey] == sc.Metadata[DeclaredKey] {
				return s, nil
			}
			if s, err = js.CreateOrUpdateStream(ctx, sc); err != nil {
				return nil, fmt.Errorf("creating stream %s: %w", name, err)
			}
			return s, nil
		}
		s, err = js.CreateStream(ctx, sc)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if err != nil {
				return nil, fmt.Errorf("creating stream %s: %w", name, err)
			}
			return s, nil
		}
		// Another process created it meanwhile, perhaps with another count: read it again.
	}
	return nil, fmt.Errorf("creating stream %s: %w", name, jetstream.ErrStreamNameAlreadyInUse)
}

// declaredInbox is inboxConfig with its fingerprint in its metadata, as Ensure declares it
// (DeclaredKey).
func declaredInbox(cfg Config, agent string, partitions int) jetstream.StreamConfig {
	sc := inboxConfig(cfg, agent, partitions)
	sc.Metadata = withFingerprint(sc.Metadata, fingerprint(sc))
	return sc
}

// inboxConfig is the configuration of agent's inbox stream with the given partitions.
func inboxConfig(cfg Config, agent string, partitions int) jetstream.StreamConfig {
	src, dst := subject.InboxTransform(agent, partitions)
	return jetstream.StreamConfig{
		Name:             subject.InboxStream(agent),
		Description:      "agentbus requests waiting for a workflow host of one agent",
		Subjects:         []string{subject.InboxSubjects(agent)},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: src, Destination: dst},
		Retention:        jetstream.WorkQueuePolicy,
		Storage:          jetstream.FileStorage,
		Replicas:         cfg.Replicas,
		Duplicates:       cfg.DedupeWindow,
		MaxAge:           cfg.InboxMaxAge,
		Discard:          jetstream.DiscardNew,
		AllowDirect:      true,
		Metadata:         map[string]string{inboxAgentKey: agent, inboxPartitionsKey: strconv.Itoa(partitions)},
	}
}

const (
	// inboxAgentKey is the metadata key of an inbox stream that names its agent, for operators
	// (the stream's name carries only a hash of it).
	inboxAgentKey = "agentbus.agent"
	// inboxPartitionsKey is the metadata key of an inbox stream that names its partition count,
	// which its subject transform names too, but not while it is parked.
	inboxPartitionsKey = "agentbus.partitions"
)

// ErrRepartition is returned by Repartition for an inbox that holds requests.
var ErrRepartition = errors.New("inbox holds requests")

// InboxRequests counts the requests agent's inbox holds: accepted and not yet handled (a request
// leaves the inbox once its host has acknowledged it).
func (r *Resources) InboxRequests(ctx context.Context, agent string) (uint64, error) {
	s, err := r.JS.Stream(ctx, subject.InboxStream(agent))
	if err != nil {
		return 0, fmt.Errorf("reading the inbox of %s: %w", agent, err)
	}
	return requestsIn(ctx, s, agent)
}

// requestsIn counts the requests agent's inbox s holds, as of its cached state if that shows
// none: the inbox keepers' markers are not requests.
func requestsIn(ctx context.Context, s jetstream.Stream, agent string) (uint64, error) {
	if s.CachedInfo().State.Msgs == 0 {
		return 0, nil
	}
	marker := subject.InboxMarker(agent)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(marker))
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", subject.InboxStream(agent), err)
	}
	return info.State.Msgs - info.State.Subjects[marker], nil
}

// migrateLegacyInbox moves the requests of a LegacyInboxStream, in their order, to their agents'
// inboxes, gives every agent of the registry an inbox, and deletes the legacy stream. Every
// process runs it in Ensure, before it serves: run the processes of the version with one inbox
// no more (stop them first), since requests they publish meanwhile find no inbox or a moved one.
// Several processes moving at once store each request once: a moved copy carries the
// de-duplication id moved:{legacy sequence}.
func migrateLegacyInbox(ctx context.Context, r *Resources) error {
	legacy, err := r.JS.Stream(ctx, subject.LegacyInboxStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", subject.LegacyInboxStream, err)
	}
	// The legacy stream's subjects overlap every agent's inbox: take them away first (the
	// stored messages keep theirs), and its consumers, which no host of this version pulls.
	names := legacy.ConsumerNames(ctx)
	var consumers []string
	for name := range names.Name() { // read to the end: the lister's goroutine waits for each read
		consumers = append(consumers, name)
	}
	if err := names.Err(); err != nil {
		return gone(fmt.Errorf("listing the consumers of %s: %w", subject.LegacyInboxStream, err))
	}
	for _, name := range consumers {
		if err := legacy.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return gone(fmt.Errorf("deleting consumer %s of %s: %w", name, subject.LegacyInboxStream, err))
		}
	}
	if subjects := legacy.CachedInfo().Config.Subjects; len(subjects) != 1 || subjects[0] != subject.LegacyInboxParked {
		if legacy, err = park(ctx, r.JS, legacy, subject.LegacyInboxParked); err != nil {
			return gone(err)
		}
	}
	if err := inboxesOfRegistry(ctx, r); err != nil {
		return err
	}
	made := make(map[string]bool) // the agents whose inboxes this move made or read
	for {
		info, err := legacy.Info(ctx)
		if err != nil {
			return gone(fmt.Errorf("reading stream %s: %w", subject.LegacyInboxStream, err))
		}
		if info.State.Msgs == 0 {
			break
		}
		raw, err := legacy.GetMsg(ctx, info.State.FirstSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // moved meanwhile by another process
		}
		if err != nil {
			return gone(fmt.Errorf("reading stream %s: %w", subject.LegacyInboxStream, err))
		}
		if err := moveLegacy(ctx, r, raw, made); err != nil {
			return err
		}
		if err := legacy.DeleteMsg(ctx, raw.Sequence); err != nil && !DeletedBefore(ctx, legacy, raw.Sequence) {
			return gone(fmt.Errorf("deleting moved request %d of %s: %w", raw.Sequence, subject.LegacyInboxStream, err))
		}
	}
	if err := r.JS.DeleteStream(ctx, subject.LegacyInboxStream); err != nil {
		return gone(fmt.Errorf("deleting stream %s: %w", subject.LegacyInboxStream, err))
	}
	return nil
}

// gone is nil when err says the stream is gone: another process finished moving or deleting it.
func gone(err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return err
}

// moveLegacy stores the request raw of LegacyInboxStream in its agent's inbox, making the inbox
// unless made says it was, and counts it in r.MovedRequests unless another process stored it
// first.
func moveLegacy(ctx context.Context, r *Resources, raw *jetstream.RawStreamMsg, made map[string]bool) error {
	if raw.Subject == subject.LegacyInboxMarker {
		return nil
	}
	in, err := subject.ParseStoredInbox(raw.Subject)
	if err != nil {
		return nil // not a request: nothing to move
	}
	if !made[in.Agent] {
		if _, err := r.InboxOf(ctx, in.Agent); err != nil {
			return err
		}
		made[in.Agent] = true
	}
	hdr := nats.Header{}
	for k, v := range raw.Header {
		hdr[k] = v
	}
	hdr.Set(subject.HeaderMsgID, fmt.Sprintf("moved:%d", raw.Sequence))
	ack, err := r.JS.PublishMsg(ctx, &nats.Msg{Subject: in.Published(), Header: hdr, Data: raw.Data},
		jetstream.WithExpectStream(subject.InboxStream(in.Agent)))
	if err != nil {
		return fmt.Errorf("moving request %d of %s: %w", raw.Sequence, subject.LegacyInboxStream, err)
	}
	if !ack.Duplicate {
		r.MovedRequests++
	}
	return nil
}

// LogMove logs the requests this Ensure moved from LegacyInboxStream, if it moved any.
func (r *Resources) LogMove(log *slog.Logger) {
	if r.MovedRequests > 0 {
		log.Info("moved the requests of the single inbox to their agents' inboxes",
			"requests", r.MovedRequests, "stream", subject.LegacyInboxStream)
	}
}

// inboxesOfRegistry gives every agent of the registry its inbox, so that a request for an agent
// that registered before the agents had inboxes of their own, and has no host running now,
// is stored as it was before.
func inboxesOfRegistry(ctx context.Context, r *Resources) error {
	keys, err := r.Registry.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("listing the registry: %w", err)
	}
	var agents []string
	for key := range keys.Keys() {
		if agent, err := subject.ParseToken(key); err == nil {
			agents = append(agents, agent)
		}
	}
	_ = keys.Stop() // the channel closed: the watch has stopped
	for _, agent := range agents {
		if _, err := r.InboxOf(ctx, agent); err != nil {
			return err
		}
	}
	return nil
}
