package subject_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// ids are the awkward ids every encoding test runs over.
var ids = []struct {
	name string
	id   string
}{
	{name: "empty", id: ""},
	{name: "plain", id: "alice"},
	{name: "spaces", id: "acme:Echo:Supervisor Workflow:default"},
	{name: "dots", id: "a.b.c"},
	{name: "only dot", id: "."},
	{name: "colons", id: "::"},
	{name: "star", id: "*"},
	{name: "gt", id: ">"},
	{name: "wildcards mixed", id: "a.*.>"},
	{name: "underscore", id: "_"},
	{name: "dash", id: "-"},
	{name: "unicode", id: "日本語 🙂 é"},
	{name: "control characters", id: "a\x00b\nc\td"},
	{name: "invalid utf-8", id: "\xff\xfe"},
	{name: "one byte", id: "a"},
	{name: "two bytes", id: "ab"},
	{name: "three bytes", id: "abc"},
	{name: "long", id: strings.Repeat("x", 256)},
}

var tokenChars = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func TestTokenRoundTrip(t *testing.T) {
	for _, tt := range ids {
		t.Run(tt.name, func(t *testing.T) {
			tok := subject.Token(tt.id)
			assert.Regexp(t, tokenChars, tok, "Token(%q), want only [A-Za-z0-9_-]", tt.id)
			got, err := subject.ParseToken(tok)
			require.NoError(t, err, "ParseToken(%q)", tok)
			assert.Equal(t, tt.id, got, "ParseToken(Token(%q))", tt.id)
		})
	}
}

func TestTokenDistinct(t *testing.T) {
	seen := make(map[string]string)
	for _, tt := range ids {
		tok := subject.Token(tt.id)
		assert.NotContains(t, seen, tok, "Token(%q) = Token(%q) = %q", tt.id, seen[tok], tok)
		seen[tok] = tt.id
	}
}

func TestParseTokenInvalid(t *testing.T) {
	tests := []struct {
		name string
		tok  string
	}{
		{name: "one char", tok: "a"},
		{name: "dot", tok: "a.b"},
		{name: "std base64 plus", tok: "a+b/"},
		{name: "padding", tok: "YQ=="},
		{name: "space", tok: "YW Jj"},
		{name: "star", tok: "*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subject.ParseToken(tt.tok)
			assert.Error(t, err, "ParseToken(%q) = %q, want an error", tt.tok, got)
		})
	}
}

func TestSubjectsCarryNoRawIDs(t *testing.T) {
	const tenant = "acme_1-x"
	for _, wf := range ids {
		for _, p := range ids {
			inbox := subject.Inbox(wf.id, tenant, wf.id, p.id)
			thread := subject.Thread(tenant, wf.id, p.id)
			for _, s := range []string{inbox, thread} {
				require.False(t, strings.ContainsAny(s, " *>\t\n\x00"), "subject %q for wf %q participant %q has a space or wildcard", s, wf.id, p.id)
				toks := strings.Split(s, ".")
				if s == inbox {
					toks = append(toks[:2], toks[3:]...) // the agent token
				}
				require.Len(t, toks, 5, "subject %q for wf %q participant %q: tokens", s, wf.id, p.id)
				for _, tok := range toks {
					require.NotEmpty(t, tok, "subject %q has an empty token", s)
				}
				assert.Equal(t, tenant, toks[2], "subject %q: tenant token", s)
			}
			assert.True(t, strings.HasPrefix(inbox, "agentbus.in."), "Inbox = %q, want prefix agentbus.in.", inbox)
			assert.True(t, strings.HasPrefix(thread, "agentbus.msg."), "Thread = %q, want prefix agentbus.msg.", thread)
		}
	}
}

func TestKeysCarryNoRawIDs(t *testing.T) {
	// KV keys allow [-/_=.a-zA-Z0-9]; ids must not bring anything else in.
	kvKey := regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)
	for _, tt := range ids {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{
				subject.InstanceKey("acme", tt.id),
				subject.ResultKey("acme", tt.id),
				subject.AgentKey(tt.id),
				subject.HostKey(tt.id),
			} {
				assert.Regexp(t, kvKey, k, "key %q for id %q is not a valid KV key", k, tt.id)
				assert.False(t, strings.HasPrefix(k, "."), "key %q for id %q is not a valid KV key", k, tt.id)
				assert.False(t, strings.HasSuffix(k, "."), "key %q for id %q is not a valid KV key", k, tt.id)
			}
		})
	}
}

func TestParseStoredInboxRoundTrip(t *testing.T) {
	for _, wf := range ids {
		for _, p := range ids {
			// The inbox transform inserts the partition after the agent token.
			published := subject.Inbox("Echo", "acme", wf.id, p.id)
			agentTok := subject.Token("Echo")
			stored := "agentbus.in." + agentTok + ".7." + strings.TrimPrefix(published, "agentbus.in."+agentTok+".")
			got, err := subject.ParseStoredInbox(stored)
			require.NoError(t, err, "ParseStoredInbox(%q)", stored)
			want := subject.StoredInbox{Agent: "Echo", Partition: "7", Tenant: "acme", WorkflowID: wf.id, Participant: p.id}
			assert.Equal(t, want, got, "ParseStoredInbox(%q)", stored)
		}
	}
}

func TestParseRemoteAgentOwnerKeyRoundTrip(t *testing.T) {
	for _, name := range []string{"Echo", "Billing.v2", "a b/c"} {
		key := subject.RemoteAgentOwnerKey("acme", name)
		assert.Regexp(t, `^acme\.[^.]+$`, key, "one tenant token, one name token")
		got, err := subject.ParseRemoteAgentOwnerKey(key)
		require.NoError(t, err, "ParseRemoteAgentOwnerKey(%q)", key)
		assert.Equal(t, name, got)
	}
	_, err := subject.ParseRemoteAgentOwnerKey(subject.RemoteAgentsIndexed)
	assert.Error(t, err, "the index's mark names no agent")
}

func TestParseStoredInboxInvalid(t *testing.T) {
	tests := []struct {
		name string
		subj string
	}{
		{name: "empty", subj: ""},
		{name: "history subject", subj: "agentbus.msg.0.acme.YQ.Yg"},
		{name: "no partition (as published)", subj: subject.Inbox("Echo", "acme", "wf", "p")},
		{name: "too many tokens", subj: "agentbus.in.RWNobw.0.acme.YQ.Yg.extra"},
		{name: "prefix only", subj: "agentbus.in."},
		{name: "bad agent token", subj: "agentbus.in.a.0.acme.YQ.Yg"},
		{name: "bad workflow token", subj: "agentbus.in.RWNobw.0.acme.a.Yg"},
		{name: "bad participant token", subj: "agentbus.in.RWNobw.0.acme.YQ.a"},
		{name: "similar prefix", subj: "agentbus.inbox.RWNobw.0.acme.YQ.Yg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subject.ParseStoredInbox(tt.subj)
			assert.Error(t, err, "ParseStoredInbox(%q) = %+v, want an error", tt.subj, got)
		})
	}
}

func TestReplySubjects(t *testing.T) {
	tests := []struct {
		name     string
		instance string
		waiter   string
	}{
		{name: "simple", instance: "ing1", waiter: "w1"},
		{name: "nuid-like", instance: "Zx3kP0aQ", waiter: "9fLm2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := subject.Reply(tt.instance, tt.waiter)
			prefix := strings.TrimSuffix(subject.ReplyPrefix(tt.instance), ">")
			assert.True(t, strings.HasPrefix(r, prefix), "Reply = %q does not match ReplyPrefix %q", r, subject.ReplyPrefix(tt.instance))
			got, ack, ok := subject.ReplyWaiter(tt.instance, r)
			assert.True(t, ok, "ReplyWaiter(%q) = %q, %v; want %q, true", r, got, ok, tt.waiter)
			assert.Equal(t, tt.waiter, got, "ReplyWaiter(%q)", r)
			assert.False(t, ack, "ReplyWaiter(%q) read a reply as an acknowledgement", r)
			_, _, ok = subject.ReplyWaiter("other", r)
			assert.False(t, ok, "ReplyWaiter of another instance accepted %q", r)

			a := subject.ReplyAck(tt.instance, tt.waiter)
			assert.True(t, strings.HasPrefix(a, prefix), "ReplyAck = %q does not match ReplyPrefix %q", a, subject.ReplyPrefix(tt.instance))
			got, ack, ok = subject.ReplyWaiter(tt.instance, a)
			assert.True(t, ok && ack, "ReplyWaiter(%q) = %v, %v; want an acknowledgement", a, ack, ok)
			assert.Equal(t, tt.waiter, got, "ReplyWaiter(%q)", a)
		})
	}
}

// TestStatsSubjects: a stats request's reply subject is nobody's handler reply subject, and no
// inbox, history or dead-letter subscription takes the stats subject.
func TestStatsSubjects(t *testing.T) {
	for _, instance := range []string{"ing1", "stats", "agentbus"} {
		r := subject.StatsReply(instance, "abc")
		for _, other := range []string{instance, "stats", "agentbus-stats"} {
			assert.False(t, subject.MatchesFilter(r, subject.ReplyPrefix(other)), "%q under ReplyPrefix(%q)", r, other)
		}
		assert.Len(t, strings.Split(r, "."), 4, r)
	}
	for _, filter := range []string{subject.AllInboxSubjects, subject.MessagesSubjects(), subject.DeadLetterSubjects(), subject.TimerSubjects(subject.LegacyTimers), subject.TimerSubjects(0)} {
		assert.False(t, subject.MatchesFilter(subject.StatsWindow, filter), filter)
	}
}

// TestConfirmSubjects: a confirmation's reply subject is nobody's handler or stats reply subject,
// and no inbox, history or dead-letter subscription takes the presence, confirmation and rate
// demand subjects.
func TestConfirmSubjects(t *testing.T) {
	for _, instance := range []string{"ing1", "confirm", "agentbus"} {
		r := subject.ConfirmReply(instance, "abc")
		for _, other := range []string{instance, "confirm", "agentbus-confirm"} {
			assert.False(t, subject.MatchesFilter(r, subject.ReplyPrefix(other)), "%q under ReplyPrefix(%q)", r, other)
		}
		assert.NotEqual(t, subject.StatsReply(instance, "abc"), r)
		assert.Len(t, strings.Split(r, "."), 4, r)
	}
	for _, filter := range []string{subject.AllInboxSubjects, subject.MessagesSubjects(), subject.DeadLetterSubjects(), subject.TimerSubjects(subject.LegacyTimers), subject.TimerSubjects(0)} {
		assert.False(t, subject.MatchesFilter(subject.IngressPresence, filter), filter)
		assert.False(t, subject.MatchesFilter(subject.IngressConfirm, filter), filter)
		assert.False(t, subject.MatchesFilter(subject.IngressDemand, filter), filter)
	}
}

// TestInboxPartitioning publishes several conversations several times each through a real inbox
// stream and checks what JetStream stored: each conversation under exactly one partition, and
// every stored subject parsing back to what was published.
func TestInboxPartitioning(t *testing.T) {
	const partitions = 8
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: partitions})
	require.NoError(t, err, "bus.Ensure")
	inbox, err := res.InboxOf(ctx, "Echo")
	require.NoError(t, err)

	type conv struct{ tenant, wf, participant string }
	var convs []conv
	for _, tenant := range []string{"acme", "Other_T-2"} {
		for _, wf := range []string{"acme:Echo:Supervisor Workflow:default", "x:a.b:*:>", "t:日本:w w:🙂"} {
			for _, p := range []string{"alice", "bob smith", "", "a.b@c"} {
				convs = append(convs, conv{tenant, wf, p})
			}
		}
	}
	const perConv = 4
	bySeq := make(map[uint64]conv)
	for round := range perConv {
		for i, c := range convs {
			ack, err := js.Publish(ctx, subject.Inbox("Echo", c.tenant, c.wf, c.participant), fmt.Appendf(nil, "%d/%d", i, round))
			require.NoError(t, err, "publishing to %q", subject.Inbox("Echo", c.tenant, c.wf, c.participant))
			bySeq[ack.Sequence] = c
		}
	}

	partOf := make(map[conv]string)
	perPartition := make(map[string]uint64)
	for seq, c := range bySeq {
		m, err := inbox.GetMsg(ctx, seq)
		require.NoError(t, err, "GetMsg(%d)", seq)
		got, err := subject.ParseStoredInbox(m.Subject)
		require.NoError(t, err, "stored subject %q", m.Subject)
		assert.Equal(t, "Echo", got.Agent, "stored subject %q parses to %+v, published as %+v", m.Subject, got, c)
		assert.Equal(t, c.tenant, got.Tenant, "stored subject %q parses to %+v, published as %+v", m.Subject, got, c)
		assert.Equal(t, c.wf, got.WorkflowID, "stored subject %q parses to %+v, published as %+v", m.Subject, got, c)
		assert.Equal(t, c.participant, got.Participant, "stored subject %q parses to %+v, published as %+v", m.Subject, got, c)
		var p int
		_, err = fmt.Sscanf(got.Partition, "%d", &p)
		if assert.NoError(t, err, "stored subject %q: partition %q, want 0..%d", m.Subject, got.Partition, partitions-1) {
			assert.GreaterOrEqual(t, p, 0, "stored subject %q: partition %q, want 0..%d", m.Subject, got.Partition, partitions-1)
			assert.Less(t, p, partitions, "stored subject %q: partition %q, want 0..%d", m.Subject, got.Partition, partitions-1)
			assert.Equal(t, fmt.Sprint(p), got.Partition, "stored subject %q: partition %q, want 0..%d", m.Subject, got.Partition, partitions-1)
		}
		if prev, ok := partOf[c]; ok {
			assert.Equal(t, prev, got.Partition, "conversation %+v stored under two partitions", c)
		}
		partOf[c] = got.Partition
		perPartition[got.Partition]++
	}
	require.Len(t, bySeq, len(convs)*perConv, "distinct stored sequences")
	assert.GreaterOrEqual(t, len(perPartition), 2, "%d conversations all landed in %d partition(s); the transform does not spread them", len(convs), len(perPartition))

	// Each partition's consumer filter must see exactly the messages stored under it.
	var total uint64
	for p := range partitions {
		cons, err := inbox.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       subject.PartitionConsumer("Echo", p),
			FilterSubject: subject.Partition("Echo", p),
			AckPolicy:     jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err, "creating consumer for partition %d", p)
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		assert.Equal(t, perPartition[fmt.Sprint(p)], info.NumPending, "partition %d consumer: pending", p)
		total += info.NumPending
	}
	assert.Equal(t, uint64(len(bySeq)), total, "partition consumers' messages in all")
}

func TestTransformPartitions(t *testing.T) {
	for _, n := range []int{1, 16, 1024} {
		_, dst := subject.InboxTransform("Echo", n)
		got, ok := subject.TransformPartitions(dst)
		assert.True(t, ok, "%s", dst)
		assert.Equal(t, n, got, "%s", dst)
	}
	for _, dst := range []string{"", "agentbus.in.>", "{{partition(x,2,3)}}", "{{partition(0,2,3)}}", "{{partition(4"} {
		_, ok := subject.TransformPartitions(dst)
		assert.False(t, ok, "%q", dst)
	}
}

func TestAgentInboxNames(t *testing.T) {
	for _, agent := range []string{"Echo", "a.b c", "日本", strings.Repeat("x", 200)} {
		name := subject.InboxStream(agent)
		assert.True(t, strings.HasPrefix(name, subject.InboxStreamPrefix), name)
		assert.NotContains(t, name, ".", "a stream name has no dots")
		assert.LessOrEqual(t, len(name), 32, name)
		assert.True(t, subject.MatchesFilter(subject.InboxMarker(agent), subject.InboxSubjects(agent)), "the marker is in the agent's inbox")
		assert.True(t, subject.IsInboxMarker(subject.InboxMarker(agent)))
		published := subject.Inbox(agent, "acme", "wf.1", "p")
		assert.True(t, subject.MatchesFilter(published, subject.InboxSubjects(agent)), "a request is in its agent's inbox")
		assert.False(t, subject.IsInboxMarker(published))
		for _, other := range []string{"Echo2", "Ech", agent + "x"} {
			assert.False(t, subject.MatchesFilter(published, subject.InboxSubjects(other)), "%q's request in %q's inbox", agent, other)
			assert.NotEqual(t, name, subject.InboxStream(other))
		}
	}
	assert.NotEqual(t, subject.InboxStream("Echo"), subject.LegacyInboxStream)
	assert.False(t, subject.IsInboxMarker("agentbus.in.marker"), "the legacy inbox's marker names no agent")
	stored := "agentbus.in." + subject.Token("Echo") + ".3.acme." + subject.Token("wf") + "." + subject.Token("p")
	got, err := subject.ParseStoredInbox(stored)
	require.NoError(t, err)
	assert.Equal(t, subject.Inbox("Echo", "acme", "wf", "p"), got.Published())
}
