package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// The run index lists the instances of an agent in a tenant, newest run first. The instances
// bucket cannot be read by range, so every run started appends one small record (an Entry) to
// the subject of its tenant and agent in the AGENTBUS_RUNS stream, before the instance record of
// the run is written. Like a history record (package history), each entry carries in the
// subject.HeaderPrev header the stream sequences of the subject's previous entries (up to
// PrevDepth): the newest page is one last-by-subject get plus direct gets of those sequences,
// whatever the number of instances or the size of the stream, and the next page continues from
// the oldest entry read.
//
// An entry is a run, not an instance: an instance that ran several times has several entries.
// A listing reads each entry's instance record and keeps only the entries of the instance's
// current run; the others are of a run since replaced (whose successor has a newer entry of its
// own) or of a run that never started (its host failed or lost the race between the two writes).

// PrevDepth is how many previous sequences a subject.HeaderPrev header lists.
const PrevDepth = bus.PrevDepth

// Page sizes of Index.List.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
	// ScanFactor bounds the entries one page examines: at most this many times its limit. A page
	// whose filter matches few instances ends early, and its cursor continues from there.
	ScanFactor = 10
)

// ErrBadCursor means a listing cursor is not an entry of the tenant's agent.
var ErrBadCursor = errors.New("the cursor is not a run of this agent")

// Entry is one record of the run index: a run started.
type Entry struct {
	WorkflowID string    `json:"workflowId"`
	RunID      string    `json:"runId"`
	StartedAt  time.Time `json:"startedAt"`
}

// Index appends to and lists the run index. It is safe for concurrent use.
type Index struct {
	js     jetstream.JetStream
	stream jetstream.Stream

	mu sync.Mutex
	// heads caches, by subject, the newest entry this Index appended or read there, so that an
	// append by the subject's usual writer needs no read first.
	heads map[string]indexHead
	// turns holds, by subject, the appends under way or waiting: one at a time per subject.
	turns map[string]*turn
}

// turn lets one append at a time go to a subject. Each append expects the subject's last
// sequence, so concurrent appends of one Index (a host's partitions starting runs of one agent)
// would only meet each other's entries: one lands, and each other pays a conflict, a pause and
// a read of the newest entry before it tries again. In turn, each append finds its head cached.
type turn struct {
	slot  chan struct{} // holds a token while an append runs
	users int           // appends holding or waiting for the slot; guarded by Index.mu
}

// indexHead is a subject's newest entry: its sequence and the sequences before it, newest first.
type indexHead struct {
	last uint64
	prev []uint64
}

// maxHeads bounds Index.heads; past it the cache starts over, which costs one read per subject
// appended to again.
const maxHeads = 10000

// NewIndex returns an Index over the run index stream.
func NewIndex(js jetstream.JetStream, stream jetstream.Stream) *Index {
	return &Index{js: js, stream: stream, heads: make(map[string]indexHead), turns: make(map[string]*turn)}
}

// await waits for subj's turn, or for ctx to end. The caller calls done once it has appended,
// whether or not await returned an error.
func (x *Index) await(ctx context.Context, subj string) (done func(), err error) {
	x.mu.Lock()
	t := x.turns[subj]
	if t == nil {
		t = &turn{slot: make(chan struct{}, 1)}
		x.turns[subj] = t
	}
	t.users++
	x.mu.Unlock()
	leave := func() {
		x.mu.Lock()
		if t.users--; t.users == 0 {
			delete(x.turns, subj)
		}
		x.mu.Unlock()
	}
	select {
	case t.slot <- struct{}{}:
		return func() { <-t.slot; leave() }, nil
	case <-ctx.Done():
		return leave, ctx.Err()
	}
}

// Add appends e, a run of the tenant's agent, to the index. Each append expects the subject's
// last sequence to be the one it knows, so that concurrent writers (the hosts of the agent's
// partitions) keep one chain. The appends of one Index to a subject go one at a time, so only
// other writers' entries are met; one that meets another's entry pauses a little (bus.ConflictBackoff),
// reads the newest from the stream's leader and appends again, for as long as ctx and
// bus.ConflictPatience allow. An append whose acknowledgement was lost and that landed is
// recognised and not stored twice.
func (x *Index) Add(ctx context.Context, tenant, agent string, e Entry) error {
	subj := subject.Runs(tenant, agent)
	e.StartedAt = e.StartedAt.UTC()
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encoding run index entry: %w", err)
	}
	done, err := x.await(ctx, subj)
	defer done()
	if err != nil {
		return fmt.Errorf("appending to the run index: %w", err)
	}
	x.mu.Lock()
	h, known := x.heads[subj]
	x.mu.Unlock()
	if !known {
		if h, _, err = x.readHead(ctx, subj); err != nil {
			return err
		}
	}
	var backoff bus.ConflictBackoff
	for {
		m := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}
		if h.last != 0 {
			m.Header.Set(subject.HeaderPrev, bus.FormatPrev(h.last, h.prev))
		}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(h.last, 10))
		ack, err := bus.Publish(ctx, x.js, m)
		if err == nil {
			x.remember(subj, h.next(ack.Sequence))
			return nil
		}
		x.forget(subj)
		if !bus.IsConflict(err) {
			return fmt.Errorf("appending to the run index: %w", err)
		}
		if werr := backoff.Wait(ctx); werr != nil {
			return fmt.Errorf("appending to the run index: %w: %w", err, werr)
		}
		var newest *Entry
		if h, newest, err = x.readHead(ctx, subj); err != nil {
			return err
		}
		if newest != nil && newest.RunID == e.RunID && newest.WorkflowID == e.WorkflowID {
			x.remember(subj, h) // an earlier publish of this entry landed
			return nil
		}
	}
}

// next is the head after appending the entry at seq.
func (h indexHead) next(seq uint64) indexHead {
	prev := make([]uint64, 0, PrevDepth)
	if h.last != 0 {
		prev = append(prev, h.last)
		prev = append(prev, h.prev[:min(len(h.prev), PrevDepth-1)]...)
	}
	return indexHead{last: seq, prev: prev}
}

func (x *Index) remember(subj string, h indexHead) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.heads) >= maxHeads {
		clear(x.heads)
	}
	x.heads[subj] = h
}

func (x *Index) forget(subj string) {
	x.mu.Lock()
	delete(x.heads, subj)
	x.mu.Unlock()
}

// readHead reads a subject's newest entry from the stream's leader.
func (x *Index) readHead(ctx context.Context, subj string) (indexHead, *Entry, error) {
	raw, err := bus.LeaderLast(ctx, x.js.Conn(), subject.RunsStream, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return indexHead{}, nil, nil
	}
	if err != nil {
		return indexHead{}, nil, fmt.Errorf("reading the run index: %w", err)
	}
	prev, err := bus.ParsePrev(raw.Header)
	if err != nil {
		return indexHead{}, nil, fmt.Errorf("reading the run index: entry %d: %w", raw.Sequence, err)
	}
	var e Entry
	if err := json.Unmarshal(raw.Data, &e); err != nil {
		return indexHead{}, nil, fmt.Errorf("reading the run index: entry %d: %w", raw.Sequence, err)
	}
	return indexHead{last: raw.Sequence, prev: prev}, &e, nil
}

// ListOptions select a page of an agent's instances.
type ListOptions struct {
	// Limit is the page size: default DefaultListLimit, at most MaxListLimit.
	Limit int
	// Before continues with the runs older than this cursor (the next cursor of the previous
	// page); 0 starts at the newest.
	Before uint64
	// Status keeps only instances of this status: Running (and not idle), Idle or Completed.
	Status Status
	// Prefix keeps only instances whose activation name starts with it.
	Prefix string
	// ActiveBefore and ActiveAfter, when set, keep only instances last active before or after
	// them.
	ActiveBefore, ActiveAfter time.Time
	// IdleTimeout is the deployment's idle timeout, which makes a running instance Idle (see
	// Record.IdleFor); 0: none.
	IdleTimeout time.Duration
	// Now is the time statuses are computed at; zero means time.Now().
	Now time.Time
}

// Listed is one instance of a listing: its current run's index entry and its record.
type Listed struct {
	Entry  Entry
	Record Record
	// Status is the record's status at the listing's time (Record.StatusAt).
	Status Status
}

// List returns a page of the tenant's agent's instances, newest run first, read through store,
// and the cursor of the next page (0 when there are no older runs). It examines at most
// ScanFactor times the page size of index entries: a sparse filter may return a short page, or
// an empty one, with a cursor to go on.
func (x *Index) List(ctx context.Context, store *Store, tenant, agent string, opt ListOptions) ([]Listed, uint64, error) {
	limit := opt.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	subj := subject.Runs(tenant, agent)
	var (
		head *jetstream.RawStreamMsg
		err  error
	)
	if opt.Before == 0 {
		head, err = x.stream.GetLastMsgForSubject(ctx, subj)
	} else {
		head, err = x.stream.GetMsg(ctx, opt.Before)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) && opt.Before == 0:
		return []Listed{}, 0, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, 0, ErrBadCursor
	case err != nil:
		return nil, 0, fmt.Errorf("reading the run index: %w", err)
	case head.Subject != subj:
		return nil, 0, ErrBadCursor
	}
	chain, err := bus.ParsePrev(head.Header)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the run index: entry %d: %w", head.Sequence, err)
	}
	var batch []*jetstream.RawStreamMsg
	if opt.Before == 0 {
		batch = []*jetstream.RawStreamMsg{head}
	}
	out := make([]Listed, 0, limit)
	seen := make(map[string]struct{}, limit)
	budget := ScanFactor * limit
	last := head // the oldest entry examined
	for {
		if len(batch) == 0 {
			if len(chain) == 0 || budget == 0 {
				break
			}
			n := min(len(chain), budget, max(limit-len(out), 8))
			if batch, err = x.getMany(ctx, subj, chain[:n]); err != nil {
				return nil, 0, err
			}
			if len(batch) == 0 {
				break
			}
			if chain = chain[len(batch):]; len(chain) == 0 {
				if chain, err = bus.ParsePrev(batch[len(batch)-1].Header); err != nil {
					return nil, 0, fmt.Errorf("reading the run index: entry %d: %w", batch[len(batch)-1].Sequence, err)
				}
			}
		}
		n := min(len(batch), budget)
		items, err := x.examine(ctx, store, batch[:n], opt)
		if err != nil {
			return nil, 0, err
		}
		for i, it := range items {
			last = batch[i]
			budget--
			if it == nil {
				continue
			}
			if _, dup := seen[it.Entry.WorkflowID]; dup {
				continue
			}
			seen[it.Entry.WorkflowID] = struct{}{}
			out = append(out, *it)
			if len(out) == limit {
				return out, cursorAfter(last), nil
			}
		}
		batch = batch[n:]
		if budget == 0 {
			return out, cursorAfter(last), nil
		}
	}
	return out, 0, nil
}

// cursorAfter is the cursor of the page after one that ended at raw: its sequence when older
// entries exist, else 0.
func cursorAfter(raw *jetstream.RawStreamMsg) uint64 {
	if raw.Header.Get(subject.HeaderPrev) == "" {
		return 0
	}
	return raw.Sequence
}

// examine reads the instance records of a batch of entries at once and returns, in the batch's
// order, the instances the options keep (nil for the others).
func (x *Index) examine(ctx context.Context, store *Store, batch []*jetstream.RawStreamMsg, opt ListOptions) ([]*Listed, error) {
	items := make([]*Listed, len(batch))
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i, raw := range batch {
		var e Entry
		if err := json.Unmarshal(raw.Data, &e); err != nil {
			return nil, fmt.Errorf("reading the run index: entry %d: %w", raw.Sequence, err)
		}
		if opt.Prefix != "" && !strings.HasPrefix(activationOf(e.WorkflowID), opt.Prefix) {
			continue
		}
		wg.Go(func() {
			rec, err := store.Get(ctx, tenantOf(e.WorkflowID), e.WorkflowID)
			switch {
			case errors.Is(err, ErrNotFound):
				return // a run that never started, of an instance that never ran
			case err != nil:
				errs[i] = err
				return
			}
			if rec.RunID != e.RunID {
				return // replaced by a later run, or never started
			}
			status := rec.StatusAt(opt.IdleTimeout, opt.Now)
			if (opt.Status != "" && status != opt.Status) ||
				(!opt.ActiveBefore.IsZero() && !rec.LastActiveAt.Before(opt.ActiveBefore)) ||
				(!opt.ActiveAfter.IsZero() && !rec.LastActiveAt.After(opt.ActiveAfter)) {
				return
			}
			items[i] = &Listed{Entry: e, Record: rec, Status: status}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return items, nil
}

// getMany direct-gets the entries at seqs (at most PrevDepth), at once. The result keeps the
// order of seqs and stops before the first one not found.
func (x *Index) getMany(ctx context.Context, subj string, seqs []uint64) ([]*jetstream.RawStreamMsg, error) {
	raws := make([]*jetstream.RawStreamMsg, len(seqs))
	errs := make([]error, len(seqs))
	var wg sync.WaitGroup
	for i, seq := range seqs {
		wg.Go(func() {
			raws[i], errs[i] = x.stream.GetMsg(ctx, seq)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return raws[:i], nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the run index: entry %d: %w", seqs[i], err)
		}
		if raws[i].Subject != subj {
			return nil, fmt.Errorf("reading the run index: entry %d belongs to another subject", seqs[i])
		}
	}
	return raws, nil
}

// tenantOf and activationOf read the first and the last segment of a workflow id
// ({tenantId}:{agentName}:{workflowType}:{activationName}); names hold no ':'.
func tenantOf(workflowID string) string {
	t, _, _ := strings.Cut(workflowID, ":")
	return t
}

func activationOf(workflowID string) string {
	return workflowID[strings.LastIndexByte(workflowID, ':')+1:]
}
