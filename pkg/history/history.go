// Package history is the conversation history store: it appends the messages of a conversation
// thread (a workflow instance and one participant) to the history stream, reads them back newest
// first a page at a time, lists a thread's topics and follows a thread live.
//
// Each thread has one subject and one writer, the workflow host handling the conversation. The
// writer puts on every message a header listing the stream sequences of the thread's previous
// messages (DESIGN §4), so that the newest page is one last-by-subject get plus direct gets by
// sequence, whatever the size of the stream: reading never scans other threads' messages.
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
	"github.com/agentbus/agentbus/pkg/subject"
)

// PrevDepth is how many previous sequences a message's subject.HeaderPrev header lists.
const PrevDepth = 32

// Errors callers test for.
var (
	// ErrConflict means the thread has messages the Cursor does not know of: another writer
	// appended. Reload the Cursor and append again; messages already stored are de-duplicated
	// by their ID.
	ErrConflict = errors.New("history thread changed concurrently")
	// ErrBadCursor means a page cursor does not belong to the thread.
	ErrBadCursor = errors.New("history cursor does not belong to the thread")
)

// msgIDPrefix marks history messages' JetStream de-duplication ids.
const msgIDPrefix = "m:"

// maxKnownTopicThreads bounds the topic cache; past it the cache starts over, which costs one
// KV read per thread and scope seen again.
const maxKnownTopicThreads = 10000

// topicAttempts bounds compare-and-set retries of a topic list under concurrent writers.
const topicAttempts = 10

// Store reads and writes conversation history. It is safe for concurrent use.
type Store struct {
	stream jetstream.Stream
	topics jetstream.KeyValue
	js     jetstream.JetStream

	mu sync.Mutex
	// known holds, per topics key, the scopes known to be in the thread's topic list, so that
	// appending a message of a known scope costs no KV operation.
	known map[string]map[string]struct{}
}

// NewStore returns a Store over the history stream, the topics bucket and the JetStream context
// used for live follows.
func NewStore(stream jetstream.Stream, topics jetstream.KeyValue, js jetstream.JetStream) *Store {
	return &Store{stream: stream, topics: topics, js: js, known: make(map[string]map[string]struct{})}
}

// Cursor is the append state of one thread, held by the thread's single writer between appends.
// The zero Cursor is that of an empty thread.
type Cursor struct {
	// LastSeq is the stream sequence of the thread's newest message; 0 when there is none.
	LastSeq uint64
	// Prev are the sequences before LastSeq, newest first, at most PrevDepth.
	Prev []uint64
}

// Cursor reads the append state of a thread from its newest message.
func (s *Store) Cursor(ctx context.Context, tenant, workflowID, participant string) (Cursor, error) {
	raw, err := s.stream.GetLastMsgForSubject(ctx, subject.Thread(tenant, workflowID, participant))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Cursor{}, nil
	}
	if err != nil {
		return Cursor{}, fmt.Errorf("reading thread: %w", err)
	}
	prev, err := parsePrev(raw.Header)
	if err != nil {
		return Cursor{}, fmt.Errorf("reading thread: message %d: %w", raw.Sequence, err)
	}
	return Cursor{LastSeq: raw.Sequence, Prev: prev}, nil
}

// Append stores msgs at the end of the thread, in order, and advances cur past them. It sets each
// message's Seq, rounds CreatedAt to the millisecond in UTC, and fills an empty ID (a new UUID,
// which a redelivery cannot de-duplicate: writers should name their messages), CreatedAt (now),
// WorkflowID or ParticipantID (the thread's).
//
// Each publish expects the thread's last sequence to be cur.LastSeq; when it is not, Append
// returns ErrConflict and cur stays at the last message it stored. A message whose ID was stored
// within the stream's dedupe window is not stored again: it gets the stored message's Seq, and
// cur does not move.
//
// Scopes of the messages are added to the thread's topic list once all are stored.
func (s *Store) Append(ctx context.Context, tenant, workflowID, participant string, cur *Cursor, msgs ...*Message) error {
	subj := subject.Thread(tenant, workflowID, participant)
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
		body, err := m.MarshalJSON() // directly: json.Marshal would validate the output once more
		if err != nil {
			return fmt.Errorf("encoding message: %w", err)
		}
		nm := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}
		if cur.LastSeq != 0 {
			nm.Header.Set(subject.HeaderPrev, formatPrev(cur.LastSeq, cur.Prev))
		}
		nm.Header.Set(jetstream.MsgIDHeader, msgIDPrefix+m.ID)
		nm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(cur.LastSeq, 10))
		ack, err := bus.Publish(ctx, s.js, nm)
		if err != nil {
			if isWrongLastSeq(err) {
				return ErrConflict
			}
			return fmt.Errorf("appending to thread: %w", err)
		}
		if ack.Duplicate {
			// A single server checks the expected sequence before duplicates, a cluster after:
			// a duplicate newer than the cursor means the cursor is stale either way.
			if ack.Sequence > cur.LastSeq {
				return ErrConflict
			}
			m.Seq = ack.Sequence
			continue
		}
		m.Seq = ack.Sequence
		prev := make([]uint64, 0, PrevDepth)
		if cur.LastSeq != 0 {
			prev = append(prev, cur.LastSeq)
			prev = append(prev, cur.Prev[:min(len(cur.Prev), PrevDepth-1)]...)
		}
		cur.LastSeq, cur.Prev = ack.Sequence, prev
	}
	for _, m := range msgs {
		if m.Scope == "" {
			continue
		}
		if err := s.addTopic(ctx, subject.TopicsKey(tenant, workflowID, participant), m.Scope); err != nil {
			return err
		}
	}
	return nil
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

// addTopic adds scope to a thread's topic list unless it is known to be there.
func (s *Store) addTopic(ctx context.Context, key, scope string) error {
	if s.isKnown(key, scope) {
		return nil
	}
	for range topicAttempts {
		list, rev, err := s.readTopics(ctx, key)
		if err != nil {
			return err
		}
		i, found := slices.BinarySearch(list, scope)
		if found {
			s.remember(key, list)
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
		if err == nil {
			s.remember(key, list)
			return nil
		}
		if !isKVConflict(err) {
			return fmt.Errorf("writing topics: %w", err)
		}
	}
	return fmt.Errorf("writing topics: still changing after %d attempts", topicAttempts)
}

func (s *Store) isKnown(key, scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.known[key][scope]
	return ok
}

func (s *Store) remember(key string, list []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.known[key]
	if set == nil {
		if len(s.known) >= maxKnownTopicThreads {
			clear(s.known)
		}
		set = make(map[string]struct{}, len(list))
		s.known[key] = set
	}
	for _, t := range list {
		set[t] = struct{}{}
	}
}

// formatPrev is the subject.HeaderPrev value of the message after last: last, then prev, at most
// PrevDepth sequences.
func formatPrev(last uint64, prev []uint64) string {
	b := make([]byte, 0, 8*PrevDepth)
	b = strconv.AppendUint(b, last, 10)
	for _, p := range prev[:min(len(prev), PrevDepth-1)] {
		b = append(b, ',')
		b = strconv.AppendUint(b, p, 10)
	}
	return string(b)
}

// parsePrev reads a message's subject.HeaderPrev header: nil when absent, at most PrevDepth
// sequences.
func parsePrev(h nats.Header) ([]uint64, error) {
	v := h.Get(subject.HeaderPrev)
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	out := make([]uint64, 0, min(len(parts), PrevDepth))
	for _, p := range parts[:min(len(parts), PrevDepth)] {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("bad %s header %q", subject.HeaderPrev, v)
		}
		out = append(out, n)
	}
	return out, nil
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

func isKVConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err)
}
