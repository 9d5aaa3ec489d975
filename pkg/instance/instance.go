// Package instance stores workflow instance records: run id, status, times, the event count of
// the current run, and the agent's state. Records live in a KV bucket and change only by
// compare-and-set, so concurrent writers never lose each other's updates.
//
// It holds no instance in memory: an idle instance costs a host nothing.
package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
)

// Status of an instance.
type Status string

// Statuses.
const (
	Running   Status = "running"
	Completed Status = "completed"
)

// Errors callers test for.
var (
	ErrNotFound = errors.New("instance not found")
	// ErrConflict means the record changed since it was read.
	ErrConflict = errors.New("instance changed concurrently")
)

// Record is a workflow instance.
type Record struct {
	Tenant       string          `json:"tenant"`
	WorkflowID   string          `json:"workflowId"`
	RunID        string          `json:"runId"`
	Status       Status          `json:"status"`
	StartedAt    time.Time       `json:"startedAt"`
	LastActiveAt time.Time       `json:"lastActiveAt"`
	CompletedAt  *time.Time      `json:"completedAt,omitempty"`
	Events       int64           `json:"events"`
	State        json.RawMessage `json:"state,omitempty"`
	// Applying names the request that last changed State and keeps the state it started from,
	// so that a request that is run again (its host crashed after the change, or its handler
	// failed and is retried) starts from the same state and its change counts once.
	Applying *Applying `json:"applying,omitempty"`
	// WriteID names the write that stored this version, so that a writer whose write timed out
	// can tell whether it landed.
	WriteID string `json:"writeId,omitempty"`
	// Runs are the instance's earlier runs, newest first, at most MaxEarlierRuns (see Next).
	Runs []RunSummary `json:"runs,omitempty"`
	// Indexed says that the current run has its record in the run index (Index).
	Indexed bool `json:"indexed,omitempty"`
	// Waits are the requests of the instance parked until an event (agent.Wait), by the
	// participant whose conversation waits behind each: at most MaxWaits.
	Waits map[string]*Wait `json:"waits,omitempty"`
	// Revision is the KV revision the record was read at; not stored.
	Revision uint64 `json:"-"`
	// Size is what the record takes in the bucket at Revision (bus.KVRecordBytes; within a few
	// bytes when read), for its tenant's usage; not stored.
	Size int64 `json:"-"`
}

// Applying is the request that last changed an instance's state, and the state before it.
type Applying struct {
	RequestID string          `json:"requestId"`
	Before    json.RawMessage `json:"before,omitempty"`
}

// MaxWaits bounds the conversations of one instance that wait at once (Record.Waits).
const MaxWaits = 256

// Wait is a request parked until an event resolves it: a Chat message or a Data call of one of
// Methods from the participant, a signal of one of Signals, or its deadline. Later requests of the conversation are held
// behind it until it resumes.
type Wait struct {
	// ID names the wait: the request's token and its step (subject.WaitID).
	ID        string `json:"id"`
	RequestID string `json:"requestId"`
	// Kind is the parked request's kind (msgkind name: Chat, Data, File, Webhook).
	Kind string `json:"kind"`
	// Step is the number of the request's step that waits, and Name its name.
	Step int    `json:"step"`
	Name string `json:"name"`
	// Chat, Methods and Signals say what resolves the wait besides its deadline.
	Chat     bool       `json:"chat,omitempty"`
	Methods  []string   `json:"methods,omitempty"`
	Signals  []string   `json:"signals,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
	Since    time.Time  `json:"since"`
}

// IdleFor reports whether a running instance has had no activity for longer than timeout (a
// positive one) and has no request waiting, and so counts as completed: an idle instance is not rewritten when its time
// runs out, which would cost a timer or a scan per instance; the next message to it starts a
// new run instead, and readers of the record apply the same rule.
func (r Record) IdleFor(timeout time.Duration, now time.Time) bool {
	return timeout > 0 && r.Status == Running && !r.LastActiveAt.IsZero() && now.Sub(r.LastActiveAt) > timeout && len(r.Waits) == 0
}

// Store reads and writes instance records.
type Store struct {
	kv jetstream.KeyValue
	// meter, when set, counts the instances created and the bytes of their records (Meter).
	meter *usage.Meter
}

// Meter makes s count every instance it creates (a record written where there was none) in m,
// and what each record it writes takes more or less than the revision it replaces
// (usage.Meter.AddState), and returns s.
func (s *Store) Meter(m *usage.Meter) *Store {
	s.meter = m
	return s
}

// NewStore returns a Store over the instances bucket.
func NewStore(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

// Get reads an instance; ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, tenant, workflowID string) (Record, error) {
	e, err := s.kv.Get(ctx, subject.InstanceKey(tenant, workflowID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("reading instance: %w", err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, fmt.Errorf("decoding instance: %w", err)
	}
	// The revision the stored value's writer expected is not read back: its own is about as long.
	r.Revision, r.Size = e.Revision(), bus.KVRecordBytes(s.kv.Bucket(), e.Key(), e.Value(), e.Revision())
	return r, nil
}

// Put writes r if the stored record is still at r.Revision (0: if there is none) and returns r
// with its new revision and size; ErrConflict otherwise. What the new revision takes more than
// r.Size, the one it replaces, is counted in the tenant's usage.
func (s *Store) Put(ctx context.Context, r Record) (Record, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return Record{}, fmt.Errorf("encoding instance: %w", err)
	}
	key := subject.InstanceKey(r.Tenant, r.WorkflowID)
	var rev uint64
	if r.Revision == 0 {
		rev, err = s.kv.Create(ctx, key, b)
	} else {
		rev, err = s.kv.Update(ctx, key, b, r.Revision)
	}
	if err != nil {
		if bus.IsConflict(err) {
			return Record{}, ErrConflict
		}
		return Record{}, fmt.Errorf("writing instance: %w", err)
	}
	size := bus.KVRecordBytes(s.kv.Bucket(), key, b, r.Revision)
	s.count(r, size)
	r.Revision, r.Size = rev, size
	return r, nil
}

// Landed counts a write of r whose outcome Put could not tell (it failed, but not by a
// conflict), which a read found stored: now is the record as read.
func (s *Store) Landed(r, now Record) { s.count(r, now.Size) }

// count counts a write of r that stored size bytes: an instance when it made the record, and
// what the record takes more or less than the revision r replaced.
func (s *Store) count(r Record, size int64) {
	if r.Revision == 0 {
		s.meter.AddInstance(r.Tenant)
		r.Size = 0
	}
	s.meter.AddState(r.Tenant, size-r.Size)
}
