// Package history is the conversation history store: it appends the messages of a conversation
// thread (a workflow instance and one participant) to the history stream, reads them back newest
// first a page at a time, lists a thread's topics and follows a thread live.
//
// Each thread has one subject and one writer, the workflow host handling the conversation. A
// stream message (a record) holds one message, or the two of an exchange, a request and its
// reply, stored at once. The writer puts on every record a header listing the stream sequences
// of the thread's previous records (docs/bus.md#headers), so that the newest page is one last-by-subject
// get plus direct gets by sequence, whatever the size of the stream: reading never scans other
// threads' messages.
//
// A message is stored once even when its writer stores it again (a publish retried after its
// acknowledgement was lost, a handler run again, a request redelivered): the writer's Cursor
// knows the messages it stored last, and a redelivered request's writer reads back the thread's
// newest records that are the request's (Recover). Records carry no JetStream de-duplication
// id, which would cost the server memory for every call over its whole window.
//
// It is not a search index: filtering by scope walks the thread, and there is no query by time or
// text. Nor does it decide who may read a thread; callers check the tenant first.
package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/fairshare"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
)

// PrevDepth is how many previous sequences a subject.HeaderPrev header lists.
const PrevDepth = bus.PrevDepth

// Errors callers test for.
var (
	// ErrConflict means the thread has records the Cursor does not know of: another writer
	// appended, or an append whose acknowledgement was lost was stored after all. Reload the
	// Cursor and append again: messages of the thread's newest record are not stored twice.
	ErrConflict = errors.New("history thread changed concurrently")
	// ErrBadCursor means a page cursor does not belong to the thread.
	ErrBadCursor = errors.New("history cursor does not belong to the thread")
)

// maxKnownTopicThreads bounds the topic cache; past it the tenant with the most threads in it
// starts over, which costs one KV read per thread and scope of that tenant seen again.
const maxKnownTopicThreads = 10000

// Store reads and writes conversation history. It is safe for concurrent use.
type Store struct {
	stream jetstream.Stream
	topics jetstream.KeyValue
	js     jetstream.JetStream

	mu sync.Mutex
	// known holds, per tenant and topics key, the scopes known to be in the thread's topic list,
	// so that appending a message of a known scope costs no KV operation; knownThreads counts its
	// keys. By tenant, so that one tenant writing to many threads empties its own part of the
	// cache, not the others'.
	known        map[string]map[string]map[string]struct{}
	knownThreads int

	// meter, when set, counts the bytes of the records appended (Meter).
	meter *usage.Meter
}

// Meter makes s count the bytes of every record it appends in m, as the store counts them
// (bus.RecordBytes), by the thread's tenant.
func (s *Store) Meter(m *usage.Meter) { s.meter = m }

// NewStore returns a Store over the history stream, the topics bucket and the JetStream context
// used for live follows.
func NewStore(stream jetstream.Stream, topics jetstream.KeyValue, js jetstream.JetStream) *Store {
	return &Store{stream: stream, topics: topics, js: js, known: make(map[string]map[string]map[string]struct{})}
}

// Cursor is the append state of one thread, held by the thread's single writer between appends.
// The zero Cursor is that of an empty thread.
type Cursor struct {
	// LastSeq is the stream sequence of the thread's newest record; 0 when there is none.
	LastSeq uint64
	// Prev are the sequences before LastSeq, newest first, at most PrevDepth.
	Prev []uint64

	// stored are messages known to be in the thread, all of the request storedFor: those stored
	// last with this Cursor, or those of the thread's newest record when it was read. Appending
	// one of them again stores nothing (a publish retried after its acknowledgement was lost, a
	// handler run again after a failure). Keeping one request's spares a Cursor cached for a busy
	// conversation from growing with it.
	stored    []stored
	storedFor string
	// found holds the positions, by ID, of the messages Recover found stored for its request.
	found map[string]uint64

	// Origin, when set, is written on every record appended with the Cursor: the inbox request
	// whose handling stores them.
	Origin Origin
	// Newest is the Origin of the thread's newest record, as read or appended with the Cursor;
	// zero when the record names none.
	Newest Origin
}

// Origin names the inbox request whose handling stored a record: its inbox sequence, and the
// time the inbox stored it (Unix nanoseconds), which tells a request of an inbox deleted and
// made again apart from an older one with the same sequence.
type Origin struct {
	Seq    uint64
	Stored int64
}

// Before reports whether the inbox stored o before p; false when either is unknown (zero).
func (o Origin) Before(p Origin) bool {
	return o.Seq != 0 && p.Seq != 0 && o.Seq < p.Seq && o.Stored <= p.Stored
}

// format is o as the subject.HeaderOrigin header's value.
func (o Origin) format() string {
	return strconv.FormatUint(o.Seq, 10) + " " + strconv.FormatInt(o.Stored, 10)
}

// parseOrigin reads a subject.HeaderOrigin header's value; a missing or malformed one is the zero
// Origin, which is before nothing.
func parseOrigin(v string) Origin {
	seq, stored, ok := strings.Cut(v, " ")
	if !ok {
		return Origin{}
	}
	s, err1 := strconv.ParseUint(seq, 10, 64)
	t, err2 := strconv.ParseInt(stored, 10, 64)
	if err1 != nil || err2 != nil {
		return Origin{}
	}
	return Origin{Seq: s, Stored: t}
}

// maxStored bounds Cursor.stored: a request's messages, with its tool calls (2 per round, 8
// rounds by default); past it the oldest are forgotten.
const maxStored = 24

// stored is a message known to be in the thread.
type stored struct {
	id  string
	pos uint64
}

// noteRecord remembers that the messages of a record are stored, at their positions. A record of
// another request than the one remembered starts the list over.
func (c *Cursor) noteRecord(msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	if r := msgs[0].RequestID; r != c.storedFor || r == "" {
		c.stored, c.storedFor = c.stored[:0], r
	}
	for _, m := range msgs {
		if len(c.stored) == maxStored {
			c.stored = append(c.stored[:0], c.stored[1:]...)
		}
		c.stored = append(c.stored, stored{m.ID, m.Pos})
	}
}

// position returns where the message id is stored, if the Cursor knows.
func (c *Cursor) position(id string) (uint64, bool) {
	for _, m := range c.stored {
		if m.id == id {
			return m.pos, true
		}
	}
	pos, ok := c.found[id]
	return pos, ok
}

// Carry makes c, a Cursor read anew after old met ErrConflict, know what old knew to be stored:
// the messages Recover found and those stored with old. They are in the thread whatever else
// was appended since, and a request that goes on with c must not store them again (the newest
// record, which c knows, may now be another writer's).
func (c *Cursor) Carry(old *Cursor) {
	if len(old.found) == 0 && len(old.stored) == 0 {
		return
	}
	if c.found == nil {
		c.found = make(map[string]uint64, len(old.found)+len(old.stored))
	}
	for id, pos := range old.found {
		c.found[id] = pos
	}
	for _, m := range old.stored {
		c.found[m.id] = m.pos
	}
}

// Cursor reads the append state of a thread from its newest record, whose messages it knows as
// stored (a writer that reloads its Cursor after a lost acknowledgement finds them there).
func (s *Store) Cursor(ctx context.Context, tenant, workflowID, participant string) (Cursor, error) {
	return s.read(ctx, tenant, workflowID, participant, nil)
}

// Recover reads the append state of a thread like Cursor, and the messages stored in it for the
// request requestID: appending any of them with the Cursor stores nothing. A request delivered
// again after its host died runs before any later request of its conversation, so what its
// earlier deliveries stored are the thread's newest records, those that carry its id: Recover
// reads back while they do, which costs nothing more than Cursor when they stored nothing. A
// request replayed from the dead letters may have later requests' records after its own: deep
// looks through the thread's last PrevDepth records.
func (s *Store) Recover(ctx context.Context, tenant, workflowID, participant, requestID string, deep bool) (Cursor, error) {
	return s.read(ctx, tenant, workflowID, participant, &recovery{requestID: requestID, deep: deep})
}

// recovery is what Recover looks for.
type recovery struct {
	requestID string
	deep      bool
}

// mine notes in cur the messages of msgs that are the request's, and reports whether any is.
func (r *recovery) mine(cur *Cursor, msgs []Message) bool {
	found := false
	for _, m := range msgs {
		if m.RequestID == r.requestID {
			if cur.found == nil {
				cur.found = make(map[string]uint64)
			}
			cur.found[m.ID] = m.Pos
			found = true
		}
	}
	return found
}

// read reads a thread's Cursor, and with rec the messages a request stored in it.
func (s *Store) read(ctx context.Context, tenant, workflowID, participant string, rec *recovery) (Cursor, error) {
	var cur Cursor
	first := true
	err := walk(ctx, s.stream, subject.Thread(tenant, workflowID, participant), func(r record) bool {
		if first {
			first = false
			cur = Cursor{LastSeq: r.seq, Prev: r.prev, Newest: r.origin()}
			newest := make([]*Message, len(r.msgs))
			for i := range r.msgs {
				newest[i] = &r.msgs[i]
			}
			cur.noteRecord(newest)
			if rec == nil {
				return false
			}
		}
		return rec.mine(&cur, r.msgs) || rec.deep
	})
	if err != nil {
		return Cursor{}, err
	}
	return cur, nil
}

// record is one stored record of a thread, as walk reads it.
type record struct {
	seq    uint64
	header nats.Header
	msgs   []Message
	// prev is the sequences the record's header lists before it (newest record only).
	prev []uint64
}

// origin is the request whose handling stored r (subject.HeaderOrigin); zero when r names none.
func (r *record) origin() Origin { return parseOrigin(r.header.Get(subject.HeaderOrigin)) }

// msgReader reads a stream's messages: the stream itself (direct gets, which any replica
// answers) or its leader (leaderReader).
type msgReader interface {
	GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error)
	GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error)
}

// leaderReader reads the history stream's messages from its leader (bus.LeaderGet, LeaderLast). A
// replica answers direct gets once it is nearly caught up, so right after a NATS node rejoins its
// cluster a direct get may miss a record the stream holds: the checks that decide whether a
// request ran before (NewestOrigin, HeldEarlier) read from the leader, as the buckets that decide
// it do (docs/bus.md).
type leaderReader struct{ nc *nats.Conn }

func (l leaderReader) GetLastMsgForSubject(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	return bus.LeaderLast(ctx, l.nc, subject.MessagesStream, subj)
}

func (l leaderReader) GetMsg(ctx context.Context, seq uint64, _ ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	return bus.LeaderGet(ctx, l.nc, subject.MessagesStream, seq, "")
}

// NewestOrigin reads, from the history stream's leader, which request stored the newest record
// of a thread (Cursor.Newest); zero when the thread has none, or its newest names none.
func (s *Store) NewestOrigin(ctx context.Context, tenant, workflowID, participant string) (Origin, error) {
	raw, err := leaderReader{s.js.Conn()}.GetLastMsgForSubject(ctx, subject.Thread(tenant, workflowID, participant))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Origin{}, nil
	}
	if err != nil {
		return Origin{}, fmt.Errorf("reading thread: %w", err)
	}
	return parseOrigin(raw.Header.Get(subject.HeaderOrigin)), nil
}

// walk reads a thread's records newest first, through r: its newest record, then those its
// header lists before it (at most PrevDepth), handing each to visit until visit returns false or
// they end (the older ones aged out). A thread without records visits nothing.
func walk(ctx context.Context, r msgReader, subj string, visit func(r record) bool) error {
	raw, err := r.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading thread: %w", err)
	}
	prev, err := bus.ParsePrev(raw.Header)
	if err != nil {
		return fmt.Errorf("reading thread: message %d: %w", raw.Sequence, err)
	}
	msgs, err := decodeRecord(raw.Sequence, raw.Data)
	if err != nil {
		return fmt.Errorf("reading thread: message %d: %w", raw.Sequence, err)
	}
	if !visit(record{seq: raw.Sequence, header: raw.Header, msgs: msgs, prev: prev}) {
		return nil
	}
	for _, seq := range prev {
		raw, err := r.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // aged out
		}
		if err != nil {
			return fmt.Errorf("reading thread: message %d: %w", seq, err)
		}
		msgs, err := decodeRecord(seq, raw.Data)
		if err != nil {
			return fmt.Errorf("reading thread: message %d: %w", seq, err)
		}
		if !visit(record{seq: seq, header: raw.Header, msgs: msgs}) {
			return nil
		}
	}
	return nil
}

// HeldEarlier reports whether the thread's newest records (its newest and the PrevDepth before
// it) hold a message of the request requestID stored by the handling of an earlier copy of the
// request o names: an inbox request stored before o, and no longer than window before it (after
// the inbox's de-duplication window a request id names a new request). It tells a request the
// inbox stored twice, through a NATS failover, whose first copy ran. Records stored by later
// requests are walked past, and the walk ends at a record stored longer than window before o;
// records that name no origin count as no copy's. It reads from the stream's leader
// (leaderReader).
func (s *Store) HeldEarlier(ctx context.Context, tenant, workflowID, participant, requestID string, o Origin, window time.Duration) (bool, error) {
	held := false
	err := walk(ctx, leaderReader{s.js.Conn()}, subject.Thread(tenant, workflowID, participant), func(r record) bool {
		from := r.origin()
		if from.Stored != 0 && from.Stored < o.Stored-window.Nanoseconds() {
			return false
		}
		if !from.Before(o) {
			return true
		}
		held = slices.ContainsFunc(r.msgs, func(m Message) bool { return m.RequestID == requestID })
		return !held
	})
	return held, err
}

// Append stores msgs, one message or the two of an exchange (a request and its reply), at the end
// of the thread as one record, and advances cur past it: an exchange costs one store. Two
// messages too large to share a record are stored one after the other. Append sets each
// message's Pos (its position in the thread), rounds CreatedAt to the millisecond in UTC, and
// fills an empty ID (a new UUID, which a redelivery cannot recognise: writers should name
// their messages), CreatedAt (now), WorkflowID or ParticipantID (the thread's).
//
// Each publish expects the thread's last sequence to be cur.LastSeq; when it is not, Append
// returns ErrConflict and cur stays at the last record it stored.
//
// A message cur knows as stored (see Cursor and Recover) is not stored again: it gets the
// position it has, and the others of msgs are stored alone. So a request stored with its reply
// by an earlier delivery, then alone by a redelivery, keeps one copy of each.
//
// Scopes of the messages are added to the thread's topic list once all are stored.
func (s *Store) Append(ctx context.Context, tenant, workflowID, participant string, cur *Cursor, msgs ...*Message) error {
	if len(msgs) == 0 || len(msgs) > 2 {
		return fmt.Errorf("appending to thread: %d messages, want one or two", len(msgs))
	}
	todo := unstored(cur, workflowID, participant, msgs)
	buf := recordBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledRecord {
			recordBufs.Put(buf)
		}
	}()
	subj := subject.Thread(tenant, workflowID, participant)
	for len(todo) > 0 {
		n, err := s.appendRecord(ctx, tenant, subj, cur, todo, buf)
		if err != nil {
			return err
		}
		todo = todo[n:]
	}
	for _, m := range msgs {
		if m.Scope == "" {
			continue
		}
		if err := s.addTopic(ctx, tenant, subject.TopicsKey(tenant, workflowID, participant), m.Scope); err != nil {
			return err
		}
	}
	return nil
}

// unstored fills in what msgs leave out (id, time, thread) and returns those that cur does not
// know as stored; those it knows get their position.
func unstored(cur *Cursor, workflowID, participant string, msgs []*Message) []*Message {
	todo := make([]*Message, 0, len(msgs))
	for _, m := range msgs {
		if m.ID == "" {
			m.ID = uuid.NewString()
		}
		if m.CreatedAt.IsZero() || !Storable(m.CreatedAt) {
			m.CreatedAt = time.Now()
		}
		m.CreatedAt = m.CreatedAt.UTC().Truncate(time.Millisecond)
		if m.WorkflowID == "" {
			m.WorkflowID = workflowID
		}
		if m.ParticipantID == "" {
			m.ParticipantID = participant
		}
		if pos, ok := cur.position(m.ID); ok {
			m.Pos = pos
			continue
		}
		todo = append(todo, m)
	}
	return todo
}

// appendRecord stores the first of todo, both when they fit in one record, as the record after
// cur's, encoded in buf; it moves cur to it and returns how many it stored.
func (s *Store) appendRecord(ctx context.Context, tenant, subj string, cur *Cursor, todo []*Message, buf *[]byte) (int, error) {
	rec := todo
	body, err := encodeRecord((*buf)[:0], rec)
	if err == nil && len(rec) > 1 && len(body) > maxExchangeBytes {
		rec = todo[:1]
		body, err = encodeRecord(body[:0], rec)
	}
	if err != nil {
		return 0, fmt.Errorf("encoding message: %w", err)
	}
	*buf = body[:0]
	nm := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}
	if cur.LastSeq != 0 {
		nm.Header.Set(subject.HeaderPrev, bus.FormatPrev(cur.LastSeq, cur.Prev))
	}
	nm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(cur.LastSeq, 10))
	if cur.Origin.Seq != 0 {
		nm.Header.Set(subject.HeaderOrigin, cur.Origin.format())
	}
	ack, err := bus.Publish(ctx, s.js, nm)
	if err != nil {
		if bus.IsConflict(err) {
			return 0, ErrConflict
		}
		return 0, fmt.Errorf("appending to thread: %w", err)
	}
	if s.meter != nil {
		s.meter.Add(tenant, usage.History, bus.RecordBytes(subj, bus.HeaderBytes(nm.Header), len(body)))
	}
	for i, m := range rec {
		m.Pos = position(ack.Sequence, i)
	}
	cur.noteRecord(rec)
	prev := make([]uint64, 0, PrevDepth)
	if cur.LastSeq != 0 {
		prev = append(prev, cur.LastSeq)
		prev = append(prev, cur.Prev[:min(len(cur.Prev), PrevDepth-1)]...)
	}
	cur.LastSeq, cur.Prev, cur.Newest = ack.Sequence, prev, cur.Origin
	return len(rec), nil
}

// Topics returns the scopes seen in the thread, sorted.
func (s *Store) Topics(ctx context.Context, tenant, workflowID, participant string) ([]string, error) {
	list, _, err := s.readTopics(ctx, subject.TopicsKey(tenant, workflowID, participant))
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []string{}
	}
	return list, nil
}

// readTopics reads a topic list and its revision (0 when there is none).
func (s *Store) readTopics(ctx context.Context, key string) ([]string, uint64, error) {
	e, err := s.topics.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading topics: %w", err)
	}
	var list []string
	if err := json.Unmarshal(e.Value(), &list); err != nil {
		return nil, 0, fmt.Errorf("decoding topics: %w", err)
	}
	slices.Sort(list)
	return slices.Compact(list), e.Revision(), nil
}

// topicPatience is how long adding a topic goes on meeting other writers before it gives up.
// Longer than bus.ConflictPatience: the list is a set that only grows, so the add is the same
// whenever it lands, and the message it belongs to is stored already. Many writers adding
// scopes to one thread at once, on a busy machine, can otherwise keep one of them out for
// seconds, since a writer that has just written tends to win again.
const topicPatience = 10 * time.Second

// addTopic adds scope to a thread's topic list unless it is known to be there. The list is
// written with compare-and-set; a write that meets another writer's pauses a little
// (bus.ConflictBackoff), reads the list again and retries, for as long as ctx and
// topicPatience allow.
func (s *Store) addTopic(ctx context.Context, tenant, key, scope string) error {
	if s.isKnown(tenant, key, scope) {
		return nil
	}
	return bus.RetryConflictsFor(ctx, topicPatience, func() error {
		list, rev, err := s.readTopics(ctx, key)
		if err != nil {
			return err
		}
		i, found := slices.BinarySearch(list, scope)
		if found {
			s.remember(tenant, key, list)
			return nil
		}
		list = slices.Insert(list, i, scope)
		b, err := json.Marshal(list)
		if err != nil {
			return fmt.Errorf("encoding topics: %w", err)
		}
		if rev == 0 {
			_, err = s.topics.Create(ctx, key, b)
		} else {
			_, err = s.topics.Update(ctx, key, b, rev)
		}
		if err != nil {
			return fmt.Errorf("writing topics: %w", err)
		}
		s.remember(tenant, key, list)
		return nil
	})
}

func (s *Store) isKnown(tenant, key, scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.known[tenant][key][scope]
	return ok
}

// forgetMostKnown empties the topic cache of the tenant with the most threads in it; s.mu is
// held.
func (s *Store) forgetMostKnown() {
	s.knownThreads -= fairshare.DropMost(s.known)
}

func (s *Store) remember(tenant, key string, list []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.known[tenant][key]
	if set == nil {
		if s.knownThreads >= maxKnownTopicThreads {
			s.forgetMostKnown()
		}
		if s.known[tenant] == nil {
			s.known[tenant] = make(map[string]map[string]struct{})
		}
		set = make(map[string]struct{}, len(list))
		s.known[tenant][key] = set
		s.knownThreads++
	}
	for _, t := range list {
		set[t] = struct{}{}
	}
}
