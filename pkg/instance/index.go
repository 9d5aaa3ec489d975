package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// turns holds, by subject, the runs waiting to be appended while a flush goroutine appends
	// them: a subject is in turns exactly while its flush runs.
	turns map[string]*turn
}

// indexHead is a subject's newest entry: its sequence and the sequences before it, newest first.
type indexHead struct {
	last uint64
	prev []uint64
}

// maxHeads bounds Index.heads; past it the cache starts over, which costs one read per subject
// appended to again.
const maxHeads = 10000

// turn queues the runs an Index appends to one subject: one append at a time, each carrying every
// run queued while the one before it was under way (at most maxBatch). Each append expects the
// subject's last sequence, so concurrent appends of one Index (a host's partitions starting runs
// of one agent) would only meet each other's entries: one lands, and each other pays a conflict,
// a pause and a read of the newest entry before it tries again. The chain takes one append per
// round trip to the stream's leader; an entry holding several runs lets more runs through.
type turn struct {
	queue []*pendingRun
}

// pendingRun is one Add waiting in its subject's turn.
type pendingRun struct {
	ctx  context.Context
	e    Entry
	done chan error // the append's outcome; buffered
}

// maxBatch bounds the runs of one entry: about 150 bytes each.
const maxBatch = 256

// NewIndex returns an Index over the run index stream.
func NewIndex(js jetstream.JetStream, stream jetstream.Stream) *Index {
	return &Index{js: js, stream: stream, heads: make(map[string]indexHead), turns: make(map[string]*turn)}
}

// Add appends e, a run of the tenant's agent, to the index, and returns once the entry holding it
// is stored. The runs an Index is given for one subject go in turn: an entry holds every run
// queued while the append before it was under way. Each append expects the subject's last
// sequence to be the one it knows, so that concurrent writers (the hosts of the agent's
// partitions) keep one chain; one that meets another's entry pauses a little
// (bus.ConflictBackoff), reads the newest from the stream's leader and appends again, for as long
// as bus.ConflictPatience and the context of one of its runs' Adds allow. An append whose
// acknowledgement was lost and that landed is recognised and not stored twice.
func (x *Index) Add(ctx context.Context, tenant, agent string, e Entry) error {
	subj := subject.Runs(tenant, agent)
	e.StartedAt = e.StartedAt.UTC()
	p := &pendingRun{ctx: ctx, e: e, done: make(chan error, 1)}
	x.mu.Lock()
	t := x.turns[subj]
	start := t == nil
	if start {
		t = &turn{}
		x.turns[subj] = t
	}
	t.queue = append(t.queue, p)
	x.mu.Unlock()
	if start {
		go x.flush(subj, t)
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		// The run may still be appended; an entry of a run never started is skipped by listings.
		return fmt.Errorf("appending to the run index: %w", ctx.Err())
	}
}

// flush appends subj's queued runs, as many as maxBatch an entry, until none are left. An
// append's runs are answered once the next batch is taken, or the turn is gone: when the last
// Add returns, nothing of the subject's is left in turns.
func (x *Index) flush(subj string, t *turn) {
	var answer []*pendingRun // the runs of the last append
	var err error            // its outcome
	for {
		x.mu.Lock()
		n := min(len(t.queue), maxBatch)
		batch := slices.Clone(t.queue[:n])
		t.queue = slices.Delete(t.queue, 0, n)
		if n == 0 {
			delete(x.turns, subj) // the next Add makes a new turn and starts its flush
		}
		x.mu.Unlock()
		for _, p := range answer {
			p.done <- err
		}
		if n == 0 {
			return
		}

		answer = slices.DeleteFunc(batch, func(p *pendingRun) bool {
			if err := p.ctx.Err(); err != nil {
				p.done <- fmt.Errorf("appending to the run index: %w", err)
				return true
			}
			return false
		})
		if len(answer) == 0 {
			continue
		}
		ctx, cancel := batchContext(answer)
		runs := make([]Entry, len(answer))
		for i, p := range answer {
			runs[i] = p.e
		}
		err = x.append(ctx, subj, runs)
		cancel()
	}
}

// batchContext is the context of an append that carries the runs of batch: it ends once every
// one of their Adds' contexts has ended.
func batchContext(batch []*pendingRun) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, p := range batch {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// append stores runs, oldest first, as one entry of subj.
func (x *Index) append(ctx context.Context, subj string, runs []Entry) error {
	body, err := encodeRuns(runs)
	if err != nil {
		return fmt.Errorf("encoding run index entry: %w", err)
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
		var newest []Entry
		if h, newest, err = x.readHead(ctx, subj); err != nil {
			return err
		}
		if slices.ContainsFunc(newest, func(e Entry) bool { return e.RunID == runs[0].RunID && e.WorkflowID == runs[0].WorkflowID }) {
			x.remember(subj, h) // an earlier publish of this entry landed
			return nil
		}
	}
}

// encodeRuns is an entry's body: one run as a JSON object, several as a JSON array of them,
// oldest first.
func encodeRuns(runs []Entry) ([]byte, error) {
	if len(runs) == 1 {
		return json.Marshal(runs[0])
	}
	return json.Marshal(runs)
}

// decodeRuns reads an entry's runs, oldest first.
func decodeRuns(data []byte) ([]Entry, error) {
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '[' {
		var runs []Entry
		if err := json.Unmarshal(trimmed, &runs); err != nil {
			return nil, err
		}
		if len(runs) == 0 {
			return nil, errors.New("an entry with no runs")
		}
		return runs, nil
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, err
	}
	return []Entry{e}, nil
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

// readHead reads a subject's newest entry from the stream's leader, and its runs.
func (x *Index) readHead(ctx context.Context, subj string) (indexHead, []Entry, error) {
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
	runs, err := decodeRuns(raw.Data)
	if err != nil {
		return indexHead{}, nil, fmt.Errorf("reading the run index: entry %d: %w", raw.Sequence, err)
	}
	return indexHead{last: raw.Sequence, prev: prev}, runs, nil
}

// Cursor is where a listing goes on: after the first Runs runs (newest first) of the entry at
// stream sequence Seq, or after the whole entry when Runs is 0. The zero Cursor is the newest.
type Cursor struct {
	Seq  uint64
	Runs int
}

// String is the cursor as the API gives it: "{seq}", or "{seq}.{runs}" inside an entry.
func (c Cursor) String() string {
	if c.Runs == 0 {
		return strconv.FormatUint(c.Seq, 10)
	}
	return strconv.FormatUint(c.Seq, 10) + "." + strconv.Itoa(c.Runs)
}

// ParseCursor reverses Cursor.String.
func ParseCursor(s string) (Cursor, error) {
	seqText, runsText, inside := strings.Cut(s, ".")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || seq == 0 {
		return Cursor{}, ErrBadCursor
	}
	c := Cursor{Seq: seq}
	if inside {
		if c.Runs, err = strconv.Atoi(runsText); err != nil || c.Runs <= 0 || c.Runs >= maxBatch || runsText[0] == '+' {
			return Cursor{}, ErrBadCursor
		}
	}
	return c, nil
}

// ListOptions select a page of an agent's instances.
type ListOptions struct {
	// Limit is the page size: default DefaultListLimit, at most MaxListLimit.
	Limit int
	// Before continues with the runs older than this cursor (the next cursor of the previous
	// page); the zero Cursor starts at the newest.
	Before Cursor
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
// and the cursor of the next page (the zero Cursor when there are no older runs). It examines at
// most ScanFactor times the page size of runs: a sparse filter may return a short page, or an
// empty one, with a cursor to go on.
func (x *Index) List(ctx context.Context, store *Store, tenant, agent string, opt ListOptions) ([]Listed, Cursor, error) {
	limit := opt.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	w := &runWalk{x: x, subj: subject.Runs(tenant, agent)}
	empty, err := w.start(ctx, opt.Before)
	if err != nil {
		return nil, Cursor{}, err
	}
	if empty {
		return []Listed{}, Cursor{}, nil
	}
	p := listPage{out: make([]Listed, 0, limit), seen: make(map[string]struct{}, limit), limit: limit, budget: ScanFactor * limit}
	for p.budget > 0 {
		// An entry may hold hundreds of runs: examine about as many as the page still needs.
		want := min(p.budget, max(limit-len(p.out), 8))
		runs, err := w.next(ctx, want)
		if err != nil {
			return nil, Cursor{}, err
		}
		if len(runs) == 0 {
			return p.out, Cursor{}, nil
		}
		items, err := x.examine(ctx, store, runs, opt)
		if err != nil {
			return nil, Cursor{}, err
		}
		if p.take(runs, items) {
			return p.out, p.last.after(), nil
		}
	}
	return p.out, p.last.after(), nil
}

// runWalk walks an agent's run index from an entry to older ones, run by run, newest first.
type runWalk struct {
	x    *Index
	subj string
	// chain holds the sequences of older entries still to read, pending the runs read and not
	// handed out yet.
	chain   []uint64
	pending []indexedRun
}

// start reads the entry the listing starts at: the newest, or the one of before. empty reports
// an index without entries (and no before).
func (w *runWalk) start(ctx context.Context, before Cursor) (empty bool, err error) {
	var head *jetstream.RawStreamMsg
	if before.Seq == 0 {
		head, err = w.x.stream.GetLastMsgForSubject(ctx, w.subj)
	} else {
		head, err = w.x.stream.GetMsg(ctx, before.Seq)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) && before.Seq == 0:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, ErrBadCursor
	case err != nil:
		return false, fmt.Errorf("reading the run index: %w", err)
	case head.Subject != w.subj:
		return false, ErrBadCursor
	}
	if w.chain, err = bus.ParsePrev(head.Header); err != nil {
		return false, fmt.Errorf("reading the run index: entry %d: %w", head.Sequence, err)
	}
	if before.Seq != 0 && before.Runs == 0 {
		return false, nil // the cursor points past this entry's runs: on with the older ones
	}
	if w.pending, err = entryRuns(head); err != nil {
		return false, err
	}
	if before.Runs >= len(w.pending) {
		return false, ErrBadCursor
	}
	w.pending = w.pending[before.Runs:]
	return false, nil
}

// next hands out up to n runs, reading older entries when none is pending; none at the end.
func (w *runWalk) next(ctx context.Context, n int) ([]indexedRun, error) {
	if len(w.pending) == 0 && len(w.chain) > 0 {
		batch, err := w.x.getMany(ctx, w.subj, w.chain[:min(len(w.chain), n)])
		if err != nil {
			return nil, err
		}
		if len(batch) == 0 {
			return nil, nil
		}
		if w.chain = w.chain[len(batch):]; len(w.chain) == 0 {
			oldest := batch[len(batch)-1]
			if w.chain, err = bus.ParsePrev(oldest.Header); err != nil {
				return nil, fmt.Errorf("reading the run index: entry %d: %w", oldest.Sequence, err)
			}
		}
		for _, raw := range batch {
			runs, err := entryRuns(raw)
			if err != nil {
				return nil, err
			}
			w.pending = append(w.pending, runs...)
		}
	}
	runs := w.pending[:min(len(w.pending), n)]
	w.pending = w.pending[len(runs):]
	return runs, nil
}

// listPage collects a page of instances from the runs examined.
type listPage struct {
	out   []Listed
	seen  map[string]struct{}
	limit int
	// budget is the runs the listing may still examine; last the oldest examined.
	budget int
	last   indexedRun
}

// take adds the instances of runs that matched (items, nil where a run did not), each
// instance once, and reports whether the page is full.
func (p *listPage) take(runs []indexedRun, items []*Listed) (full bool) {
	for i, it := range items {
		p.last = runs[i]
		p.budget--
		if it == nil {
			continue
		}
		if _, dup := p.seen[it.Entry.WorkflowID]; dup {
			continue
		}
		p.seen[it.Entry.WorkflowID] = struct{}{}
		p.out = append(p.out, *it)
		if len(p.out) == p.limit {
			return true
		}
	}
	return false
}

// indexedRun is one run of an index entry.
type indexedRun struct {
	raw   *jetstream.RawStreamMsg
	entry Entry
	k, n  int // its place among the entry's n runs, newest first
}

// entryRuns returns the runs of an entry, newest first.
func entryRuns(raw *jetstream.RawStreamMsg) ([]indexedRun, error) {
	runs, err := decodeRuns(raw.Data)
	if err != nil {
		return nil, fmt.Errorf("reading the run index: entry %d: %w", raw.Sequence, err)
	}
	out := make([]indexedRun, len(runs))
	for i, e := range runs {
		k := len(runs) - 1 - i
		out[k] = indexedRun{raw: raw, entry: e, k: k, n: len(runs)}
	}
	return out, nil
}

// after is the cursor of the page after one that ended at r: inside r's entry while it holds
// older runs, else r's entry when older entries exist, else the zero Cursor.
func (r indexedRun) after() Cursor {
	switch {
	case r.k+1 < r.n:
		return Cursor{Seq: r.raw.Sequence, Runs: r.k + 1}
	case r.raw.Header.Get(subject.HeaderPrev) == "":
		return Cursor{}
	default:
		return Cursor{Seq: r.raw.Sequence}
	}
}

// examine reads the instance records of a batch of runs at once and returns, in the batch's
// order, the instances the options keep (nil for the others).
func (x *Index) examine(ctx context.Context, store *Store, batch []indexedRun, opt ListOptions) ([]*Listed, error) {
	items := make([]*Listed, len(batch))
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i, r := range batch {
		e := r.entry
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
