// Package subject is the one place that names things on the bus: stream, bucket and object store
// names, NATS subjects, header names and the encoding of ids into subject tokens.
//
// Nothing else in agentbus builds a subject string by hand. It is not for validating ids (see
// package ident) nor for talking to NATS (see package bus).
package subject

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Streams, key-value buckets and object stores.
const (
	// LegacyInboxStream is the one inbox stream that held every agent's requests before each
	// agent had its own (InboxStream); bus.Ensure moves what it holds and deletes it.
	LegacyInboxStream = "AGENTBUS_INBOX"
	// MessagesStream holds conversation history, one subject per thread.
	MessagesStream = "AGENTBUS_MESSAGES"
	// KeysBucket maps SHA-256 hashes of API keys to their records, and key ids (id.{keyId}) to
	// those hashes.
	KeysBucket = "AGENTBUS_KEYS"
	// TenantsBucket holds tenant records by tenant id.
	TenantsBucket = "AGENTBUS_TENANTS"
	// InstancesBucket holds workflow instance records and agent state.
	InstancesBucket = "AGENTBUS_INSTANCES"
	// RegistryBucket holds what each agent registered: workflow types and methods.
	RegistryBucket = "AGENTBUS_REGISTRY"
	// HostsBucket holds live workflow hosts' heartbeats.
	HostsBucket = "AGENTBUS_HOSTS"
	// TopicsBucket lists the topics (message scopes) seen in each conversation thread.
	TopicsBucket = "AGENTBUS_TOPICS"
	// ResultsBucket caches replies by tenant and requestId for idempotent retries.
	ResultsBucket = "AGENTBUS_RESULTS"
	// FilesStore is the object store for uploaded files.
	FilesStore = "AGENTBUS_FILES"
	// ClaimsStore is the object store for request bodies and replies too large for one NATS
	// message (claim checks); entries expire on their own.
	ClaimsStore = "AGENTBUS_CLAIMS"
	// DeadLettersStream keeps requests whose handler failed on every attempt, with the last
	// error, until an operator replays or discards them.
	DeadLettersStream = "AGENTBUS_DEADLETTERS"
	// SchedulesStream holds the agents' timers set before they were kept in shards
	// (TimerShards): JetStream message schedules (Nats-Schedule), one subject per schedule, and
	// the messages the schedules fire until a host relays them to the inbox. The shards'
	// streams (TimerStream) hold the same under subjects of their own.
	SchedulesStream = "AGENTBUS_SCHEDULES"
	// SubscriptionsBucket holds the tenants' event subscriptions (outbound webhooks) by tenant
	// and subscription id.
	SubscriptionsBucket = "AGENTBUS_SUBSCRIPTIONS"
	// UndeliveredStream keeps the events a subscription's receiver did not accept within the
	// retry period, one subject per subscription, until an operator replays or discards them.
	UndeliveredStream = "AGENTBUS_UNDELIVERED"
	// RemoteAgentsBucket holds the registrations of remote agents (HTTP endpoints) by agent name
	// (AgentKey).
	RemoteAgentsBucket = "AGENTBUS_REMOTE_AGENTS"
	// RemoteAgentOwnersBucket indexes the remote agents of each tenant (RemoteAgentOwnerKey), so
	// that listing a tenant's reads its own registrations, not every tenant's.
	RemoteAgentOwnersBucket = "AGENTBUS_REMOTE_AGENT_OWNERS"
	// TenuresBucket counts, per partition of an agent, how often a host took the partition over
	// from a host taken for dead (TenureKey): a host whose lease lapsed compares it with the
	// count it saw when it gained the partition, to tell whether it was taken from it.
	TenuresBucket = "AGENTBUS_TENURES"
)

// TenureKey is the TenuresBucket key of an agent's partition p.
func TenureKey(agent string, p int) string { return Token(agent) + "." + strconv.Itoa(p) }

// Header names carried on bus messages.
const (
	// HeaderReplyTo names the core NATS subject where a waiting ingress wants the reply.
	HeaderReplyTo = "Agentbus-Reply-To"
	// HeaderMsgID is JetStream's de-duplication header; its value is DedupeID(tenant, requestId).
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderPrev lists, on a stored history message, the stream sequences of the thread's
	// previous messages, newest first, comma-separated: the newest page of a thread is read
	// from the last message and these, without scanning the stream.
	HeaderPrev = "Agentbus-Prev"
	// HeaderOrigin names, on a stored history record, the inbox request whose handling stored
	// it: its inbox sequence and the time the inbox stored it (Unix nanoseconds), separated by
	// a space. A copy of a request delivered again after a later request of its conversation
	// stored a record was handled before.
	HeaderOrigin = "Agentbus-Origin"
	// HeaderPinID is set by the server on every message a pinned-client consumer delivers: the
	// id of the pin the message was delivered under. A new id means the partition changed hands.
	HeaderPinID = "Nats-Pin-Id"
	// HeaderError carries, on a dead letter, the last error of the request's handler.
	HeaderError = "Agentbus-Error"
	// HeaderAttempts carries, on a dead letter, how many times the request was tried.
	HeaderAttempts = "Agentbus-Attempts"
	// HeaderReplay marks a request sent again from the dead letters; its value is the dead
	// letter's id. Its handler may have stored messages before it was given up.
	HeaderReplay = "Agentbus-Replay"
	// HeaderResume marks a parked request sent to the inbox again to resume (agent.Wait); its
	// value is the wait's id (WaitID).
	HeaderResume = "Agentbus-Resume"
	// HeaderReleased marks a request that was held behind a waiting request and is sent to the
	// inbox again; its value is the wait's id.
	HeaderReleased = "Agentbus-Released"
	// HeaderResent marks a request sent to its inbox again, with its de-duplication id, because
	// no acknowledgement came for an earlier send (bus.Publish, bus.Waiter.Await). A NATS
	// cluster may store such a copy twice: it checks Nats-Msg-Id on the stream's leader only,
	// and a new leader may not have applied the first copy yet. A host that finds no other sign
	// of an earlier copy looks in the request's thread for its messages.
	HeaderResent = "Agentbus-Resent"
	// HeaderEventID carries, on an undelivered event, its webhook-id.
	HeaderEventID = "Agentbus-Event-Id"
	// HeaderEventType carries, on an undelivered event, its type.
	HeaderEventType = "Agentbus-Event-Type"
	// HeaderStoredBytes carries, on a timer's schedule, what the schedule takes in its stream
	// (this header included), for its tenant's usage; the copy the schedule fires keeps it, so
	// that the relay counts off a schedule that fired once and is gone.
	HeaderStoredBytes = "Agentbus-Stored-Bytes"
)

const (
	inboxPrefix = "agentbus.in"
	msgPrefix   = "agentbus.msg"
	deadPrefix  = "agentbus.dead"
	replyPrefix = "_INBOX.agentbus"
	schedPrefix = "agentbus.sched"
	// timersPrefix begins the subjects of the timer shards' streams (timerPrefix).
	timersPrefix = "agentbus.timers"
	undelPrefix  = "agentbus.undelivered"
)

// Token encodes an arbitrary id as one subject token: unpadded base64url, so that spaces, dots,
// colons and wildcards in ids are safe. The empty id becomes "_" (never a base64 output).
func Token(id string) string {
	if id == "" {
		return "_"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(id))
}

// tokens builds the subjects and keys made on every call in one buffer: a first plain part,
// then dot-separated plain (token-safe) parts as they are and ids as their Tokens.
type tokens []byte

func startTokens(first string) tokens { return append(make(tokens, 0, 128), first...) }

func (t tokens) plain(s string) tokens { return append(append(t, '.'), s...) }

func (t tokens) id(id string) tokens {
	t = append(t, '.')
	if id == "" {
		return append(t, '_')
	}
	return base64.RawURLEncoding.AppendEncode(t, []byte(id))
}

// ParseToken reverses Token.
func ParseToken(tok string) (string, error) {
	if tok == "_" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", fmt.Errorf("decoding subject token %q: %w", tok, err)
	}
	return string(b), nil
}

// Inbox is the subject a request for an agent's conversation (tenant, workflow, participant) is
// published on. The tenant token is the tenant id itself: tenant ids are validated to be token
// safe. The agent comes first so that each agent has its own partitions, pulled only by hosts
// that run it.
func Inbox(agent, tenant, workflowID, participant string) string {
	return string(startTokens(inboxPrefix).id(agent).plain(tenant).id(workflowID).id(participant))
}

// IsInbox reports whether subj is a request's inbox subject (Inbox).
func IsInbox(subj string) bool { return strings.HasPrefix(subj, inboxPrefix+".") }

// InboxStreamPrefix begins the name of every agent's inbox stream (InboxStream).
const InboxStreamPrefix = "AGENTBUS_INBOX_"

// InboxStream is the name of the stream that holds an agent's request envelopes until a host
// has handled them (a work queue). Each agent has its own, so that the consumers of one agent
// cost nothing to the calls of another. Agent names may be long, so the name carries a hash of
// it, as PartitionConsumer's does.
func InboxStream(agent string) string { return InboxStreamPrefix + agentHash(agent) }

// agentHash is the hex of the first 8 bytes of SHA-256 of an agent name: what the names of the
// agent's inbox stream and partition consumers carry of it.
func agentHash(agent string) string {
	sum := sha256.Sum256([]byte(agent))
	return hex.EncodeToString(sum[:8])
}

// InboxSubjects is the subject filter of an agent's inbox stream.
func InboxSubjects(agent string) string { return inboxPrefix + "." + Token(agent) + ".>" }

// RetiredInbox is the subject an agent's inbox stream takes while it is being deleted
// (bus.Resources.DeleteInbox): one nothing publishes on, so that no request lands in it meanwhile.
func RetiredInbox(agent string) string { return "agentbus.retired-inbox." + Token(agent) }

// LegacyInboxParked is the subject LegacyInboxStream takes while bus.Ensure moves its requests
// (one nothing publishes on), and LegacyInboxMarker the subject of the markers it held.
const (
	LegacyInboxParked = "agentbus.legacy-inbox"
	LegacyInboxMarker = inboxPrefix + ".marker"
)

// AllInboxSubjects is the subject filter of every agent's inbox together (LegacyInboxStream's).
const AllInboxSubjects = inboxPrefix + ".>"

// InboxMarker is the subject of the marker messages of an agent's inbox (see bus.InboxKeeper). It
// is in the inbox stream but has fewer tokens than a request subject, so that no partition
// transform rewrites it and no partition consumer delivers it.
func InboxMarker(agent string) string { return inboxPrefix + "." + Token(agent) + ".marker" }

// IsInboxMarker reports whether subj is an inbox marker's subject (InboxMarker) of any agent.
func IsInboxMarker(subj string) bool {
	rest, ok := strings.CutPrefix(subj, inboxPrefix+".")
	if !ok {
		return false
	}
	tok, last, ok := strings.Cut(rest, ".")
	return ok && tok != "" && last == "marker"
}

// InboxTransform returns the subject transform of an agent's inbox stream, which spreads the
// agent's requests over n partitions by hashing (tenant, workflow):
// agentbus.in.{agent}.{tenant}.{wf}.{participant} is stored as
// agentbus.in.{agent}.{partition}.{tenant}.{wf}.{participant}. Every conversation of one
// workflow instance lands in one partition, so the one host that pulls it is the only one that
// handles the instance and may keep it in memory while it is busy; conversations still run
// concurrently within the host.
func InboxTransform(agent string, partitions int) (source, destination string) {
	prefix := inboxPrefix + "." + Token(agent)
	return prefix + ".*.*.*",
		fmt.Sprintf("%s.{{partition(%d,1,2)}}.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}", prefix, partitions)
}

// TransformPartitions reads the partition count back from an inbox transform's destination, as
// InboxTransform writes it; ok is false for any other destination.
func TransformPartitions(destination string) (n int, ok bool) {
	_, rest, found := strings.Cut(destination, "{{partition(")
	if !found {
		return 0, false
	}
	count, _, found := strings.Cut(rest, ",")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// Partition is the filter subject of the consumer of an agent's partition p.
func Partition(agent string, p int) string {
	return fmt.Sprintf("%s.%s.%d.>", inboxPrefix, Token(agent), p)
}

// PartitionConsumer is the durable name of the consumer of an agent's partition p. Agent names
// may be long, so the name carries a hash of it.
func PartitionConsumer(agent string, p int) string {
	return "p" + strconv.Itoa(p) + "-" + agentHash(agent)
}

// StoredInbox is a request subject as the inbox stream stores it, after the partition transform.
type StoredInbox struct {
	Agent       string
	Partition   string
	Tenant      string
	WorkflowID  string
	Participant string
}

// Published is the subject the request was published on (Inbox): the stored one without its
// partition.
func (in StoredInbox) Published() string {
	return Inbox(in.Agent, in.Tenant, in.WorkflowID, in.Participant)
}

// ParseStoredInbox reads a stored inbox subject back into its parts.
func ParseStoredInbox(subj string) (StoredInbox, error) {
	rest, ok := strings.CutPrefix(subj, inboxPrefix+".")
	if !ok {
		return StoredInbox{}, fmt.Errorf("subject %q is not an inbox subject", subj)
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 5 {
		return StoredInbox{}, fmt.Errorf("inbox subject %q has %d tokens, want 5", subj, len(parts))
	}
	var out StoredInbox
	for _, f := range []struct {
		dst *string
		tok string
	}{{&out.Agent, parts[0]}, {&out.WorkflowID, parts[3]}, {&out.Participant, parts[4]}} {
		v, err := ParseToken(f.tok)
		if err != nil {
			return StoredInbox{}, err
		}
		*f.dst = v
	}
	out.Partition, out.Tenant = parts[1], parts[2]
	return out, nil
}

// Thread is the history subject of one conversation thread.
func Thread(tenant, workflowID, participant string) string {
	return string(startTokens(msgPrefix).plain(tenant).id(workflowID).id(participant))
}

// ThreadID is the opaque, URL-safe id of a conversation thread (a workflow and a participant).
func ThreadID(workflowID, participant string) string {
	return Token(workflowID) + "." + Token(participant)
}

// ParseThreadID reverses ThreadID.
func ParseThreadID(id string) (workflowID, participant string, err error) {
	wf, p, ok := strings.Cut(id, ".")
	if !ok {
		return "", "", fmt.Errorf("thread id %q has no '.'", id)
	}
	if workflowID, err = ParseToken(wf); err != nil {
		return "", "", err
	}
	if participant, err = ParseToken(p); err != nil {
		return "", "", err
	}
	return workflowID, participant, nil
}

// TopicsKey is the KV key of a thread's topic list.
func TopicsKey(tenant, workflowID, participant string) string {
	return string(startTokens(tenant).id(workflowID).id(participant))
}

// TenantThreads is the filter of every conversation thread of a tenant in the history stream.
func TenantThreads(tenant string) string { return msgPrefix + "." + tenant + ".>" }

// MessagesSubjects is the subject filter of the history stream.
func MessagesSubjects() string { return msgPrefix + ".>" }

// ReplyPrefix is the wildcard an ingress instance subscribes to for its replies.
func ReplyPrefix(instance string) string { return replyPrefix + "." + instance + ".>" }

// Reply is the subject one waiting request of an ingress instance is answered on.
func Reply(instance, waiter string) string { return replyPrefix + "." + instance + "." + waiter }

// ReplyAck is the subject where the inbox acknowledges the request of one waiter of an ingress
// instance: the waiter's reply subject with one more token.
func ReplyAck(instance, waiter string) string { return Reply(instance, waiter) + replyAckSuffix }

// replyAckSuffix ends a waiter's acknowledgement subject; waiter tokens hold no dot.
const replyAckSuffix = ".ack"

// ReplyWaiter returns the waiter token of a reply or acknowledgement subject of the given
// instance, and whether it is the acknowledgement subject.
func ReplyWaiter(instance, subj string) (waiter string, ack, ok bool) {
	waiter, ok = strings.CutPrefix(subj, replyPrefix+"."+instance+".")
	if !ok {
		return "", false, false
	}
	waiter, ack = strings.CutSuffix(waiter, replyAckSuffix)
	return waiter, ack, true
}

// StatsWindow is the core NATS subject (no stream) on which every ingress instance answers
// with its rolling window of request counts and latencies (package window): a request names a
// tenant, or none for all, and each instance answers on the request's reply subject.
const StatsWindow = "agentbus.stats.window"

// StatsReply is the reply subject of one stats request (StatsWindow) of an ingress instance;
// id is a token of the request.
func StatsReply(instance, id string) string { return statsReplyPrefix + "." + instance + "." + id }

// statsReplyPrefix starts stats reply subjects; it is not under an instance's ReplyPrefix, so
// the answers do not reach the subscription that waits for handlers' replies.
const statsReplyPrefix = "_INBOX.agentbus-stats"

// IngressPresence is the core NATS subject on which every ingress instance announces, every
// second, that it runs (and, when it stops, that it leaves): an admin write waits for the
// instances heard lately (IngressConfirm).
const IngressPresence = "agentbus.ingress.presence"

// IngressConfirm is the core NATS subject on which the ingress instance that made an admin write
// asks every instance whether its caches hold it; each answers on the request's reply subject
// once they do, and at once that it waits when they do not yet.
const IngressConfirm = "agentbus.ingress.confirm"

// IngressDemand is the core NATS subject on which every ingress instance tells the others, every
// 100 ms while any is busy, the demand it sees of its busy keys and tenants, so that each sets
// its share of their rate limits.
const IngressDemand = "agentbus.ingress.demand"

// ConfirmReply is the reply subject of one confirmation request (IngressConfirm) of an ingress
// instance; id is a token of the request.
func ConfirmReply(instance, id string) string { return confirmReplyPrefix + "." + instance + "." + id }

// confirmReplyPrefix starts confirmation reply subjects, outside an instance's ReplyPrefix as
// statsReplyPrefix is.
const confirmReplyPrefix = "_INBOX.agentbus-confirm"

// DedupeID is the JetStream message id that makes a requestId idempotent within a tenant.
func DedupeID(tenant, requestID string) string { return tenant + ":" + requestID }

// InstanceKey is the KV key of a workflow instance record.
func InstanceKey(tenant, workflowID string) string {
	return string(startTokens(tenant).id(workflowID))
}

// ResultKey is the KV key of a cached reply.
func ResultKey(tenant, requestID string) string { return tenant + "." + Token(requestID) }

// AgentKey is the registry KV key of an agent.
func AgentKey(agentName string) string { return Token(agentName) }

// RemoteAgentOwnerKey is the RemoteAgentOwnersBucket key of tenant's remote agent.
func RemoteAgentOwnerKey(tenant, agentName string) string { return tenant + "." + AgentKey(agentName) }

// ParseRemoteAgentOwnerKey returns the agent name of a RemoteAgentOwnerKey.
func ParseRemoteAgentOwnerKey(key string) (agentName string, err error) {
	_, tok, ok := strings.Cut(key, ".")
	if !ok {
		return "", fmt.Errorf("remote agent owner key %s: no tenant", Quote(key))
	}
	return ParseToken(tok)
}

// TenantRemoteAgentOwnerKeys is the RemoteAgentOwnersBucket key filter of a tenant's remote
// agents.
func TenantRemoteAgentOwnerKeys(tenant string) string { return tenant + ".*" }

// RemoteAgentsIndexed is the RemoteAgentOwnersBucket key that says every registration stored
// before it is in the index; unlike every other key of the bucket, it holds no dot.
const RemoteAgentsIndexed = "indexed"

// HostKey is the hosts KV key of a workflow host.
func HostKey(hostID string) string { return Token(hostID) }

// DeadLetter is the subject a dead request of an agent's conversation is kept on.
func DeadLetter(tenant, agent, workflowID, participant string) string {
	return deadPrefix + "." + tenant + "." + Token(agent) + "." + Token(workflowID) + "." + Token(participant)
}

// DeadLetterSubjects is the subject filter of the dead-letter stream.
func DeadLetterSubjects() string { return deadPrefix + ".>" }

// TenantDeadLetters is the filter of one tenant's dead letters.
func TenantDeadLetters(tenant string) string { return deadPrefix + "." + tenant + ".>" }

// AgentDeadLetters is the filter of one tenant's dead letters of one agent.
func AgentDeadLetters(tenant, agent string) string {
	return deadPrefix + "." + tenant + "." + Token(agent) + ".>"
}

// MatchesFilter reports whether a literal subject matches a subject filter, which may hold the
// wildcards * (one token) and > (the rest, at the end).
func MatchesFilter(subj, filter string) bool {
	st, ft := strings.Split(subj, "."), strings.Split(filter, ".")
	for i, f := range ft {
		switch {
		case f == ">" && i == len(ft)-1:
			return len(st) > i
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(st) == len(ft)
}

// DeadLetterMsgID de-duplicates the dead letter of one delivery of an inbox message, so that a host
// that dies between storing a dead letter and acknowledging the request stores it only once.
func DeadLetterMsgID(tenant, agent string, inboxSeq uint64) string {
	return "dead:" + tenant + ":" + Token(agent) + ":" + strconv.FormatUint(inboxSeq, 10)
}

// ReplayMsgID is the inbox de-duplication id of a dead letter sent again: the request keeps its
// requestId, whose own id may still be inside the dedupe window.
func ReplayMsgID(tenant, requestID string, deadLetterID uint64) string {
	return DedupeID(tenant, requestID) + ":replay:" + strconv.FormatUint(deadLetterID, 10)
}

// AckReply is the acknowledgement subject of the delivery of the stream message seq by the
// durable consumer, in JetStream's first format ($JS.ACK.{stream}.{consumer}.{delivered}.
// {stream seq}.{consumer seq}.{time}.{pending}), which servers still accept. A client that did not
// receive the delivery can acknowledge or give it back through it: the server identifies the
// message by its stream sequence and accepts any consumer sequence up to its last delivery.
func AckReply(stream, consumer string, seq, consumerSeq uint64) string {
	return "$JS.ACK." + stream + "." + consumer + ".1." + strconv.FormatUint(seq, 10) + "." + strconv.FormatUint(consumerSeq, 10) + ".0.0"
}

// KVStream is the name of the stream that holds a key-value bucket, as NATS names it.
func KVStream(bucket string) string { return "KV_" + bucket }

// ObjectStream is the name of the stream that holds an object store, as NATS names it.
func ObjectStream(bucket string) string { return "OBJ_" + bucket }

// KVKeyPrefix is the prefix of the subjects of a key-value bucket's keys ($KV.{bucket}.{key}),
// as NATS builds them.
func KVKeyPrefix(bucket string) string { return "$KV." + bucket + "." }

// StreamMsgGetAPI is the JetStream API subject that reads a stream's message from its leader.
// Direct gets may be answered by a follower that lags behind; a workflow host taking over a
// partition must see every request still in the stream.
func StreamMsgGetAPI(stream string) string { return "$JS.API.STREAM.MSG.GET." + stream }

// StreamStepdownAPI is the JetStream API subject that asks a stream's leader to step down, so
// that another replica leads.
func StreamStepdownAPI(stream string) string { return "$JS.API.STREAM.LEADER.STEPDOWN." + stream }

// ClaimName is the object name of a claim-checked payload ("request" or "reply") of a request.
func ClaimName(tenant, requestID, part string) string {
	return tenant + "/" + Token(requestID) + "/" + part
}

// Schedule is the subject of a named schedule of a workflow instance in the timer stream shard
// (TimerShard, or LegacyTimers): it holds the schedule's one message (publishing again replaces
// it; purging the subject cancels it).
func Schedule(shard int, tenant, workflowID, name string) string {
	return string(startTokens(timerPrefix(shard)).plain("set").plain(tenant).id(workflowID).id(name))
}

// InstanceSchedules is the filter of every schedule of a workflow instance in timer stream shard.
func InstanceSchedules(shard int, tenant, workflowID string) string {
	return string(startTokens(timerPrefix(shard)).plain("set").plain(tenant).id(workflowID)) + ".*"
}

// TenantSchedules is the filter of every schedule of a tenant's instances in timer stream shard.
func TenantSchedules(shard int, tenant string) string {
	return string(startTokens(timerPrefix(shard)).plain("set").plain(tenant)) + ".>"
}

// ScheduleFired is the subject a schedule's message is published on when it is due, the
// schedule's target in its timer stream shard: a host relays it from there to the inbox.
func ScheduleFired(shard int, tenant, workflowID, name string) string {
	return string(startTokens(timerPrefix(shard)).plain("fired").plain(tenant).id(workflowID).id(name))
}

// TenantSchedulesFired is the filter of what a tenant's schedules fired in timer stream shard.
func TenantSchedulesFired(shard int, tenant string) string {
	return string(startTokens(timerPrefix(shard)).plain("fired").plain(tenant)) + ".>"
}

// SchedulesFired is the filter of every fired schedule message of timer stream shard.
func SchedulesFired(shard int) string { return timerPrefix(shard) + ".fired.>" }

// TimerSubjects is the subject filter of timer stream shard.
func TimerSubjects(shard int) string { return timerPrefix(shard) + ".>" }

// ScheduleName returns the schedule name a schedule subject (Schedule) ends with.
func ScheduleName(subj string) (string, error) {
	return ParseToken(subj[strings.LastIndexByte(subj, '.')+1:])
}

// SubscriptionKey is the subscriptions KV key of a tenant's subscription. Subscription ids are
// token safe (package subscription makes them).
func SubscriptionKey(tenant, id string) string { return tenant + "." + id }

// TenantSubscriptionKeys is the KV key filter of every subscription of a tenant.
func TenantSubscriptionKeys(tenant string) string { return tenant + ".*" }

// SubscriptionKeys is the KV key filter of every subscription, without their delivery progress.
func SubscriptionKeys() string { return "*.*" }

// SubscriptionProgressKey is the subscriptions KV key that keeps which events of a stored message
// of one source ("msg", "dead") a subscription's receiver has had, while a later event of the
// message is retried.
func SubscriptionProgressKey(tenant, id, source string) string {
	return tenant + "." + id + "." + source
}

// SubscriptionConsumer is the durable name of the consumer that delivers one source of events
// ("msg": the history stream; "dead": the dead-letter stream) to a tenant's subscription.
func SubscriptionConsumer(tenant, id, source string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + id))
	return "sub-" + source + "-" + hex.EncodeToString(sum[:12])
}

// Undelivered is the subject of the events a tenant's subscription gave up on.
func Undelivered(tenant, id string) string { return undelPrefix + "." + tenant + "." + id }

// TenantUndelivered is the filter of every undelivered event of a tenant.
func TenantUndelivered(tenant string) string { return undelPrefix + "." + tenant + ".>" }

// UndeliveredSubjects is the subject filter of the undelivered-events stream.
func UndeliveredSubjects() string { return undelPrefix + ".>" }

// UndeliveredMsgID de-duplicates the keeping of one event of a subscription, so that a host that
// dies between keeping it and acknowledging its source keeps it once.
func UndeliveredMsgID(tenant, id, eventID string) string {
	return "undelivered:" + tenant + ":" + id + ":" + eventID
}
