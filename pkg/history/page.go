package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Page sizes.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// readTimeout bounds a Page whose ctx has no deadline.
const readTimeout = 10 * time.Second

// PageOptions select a page of a thread.
type PageOptions struct {
	// Size is the most messages to return. Zero or less means DefaultPageSize; more than
	// MaxPageSize means MaxPageSize.
	Size int
	// Before returns messages older than this position, the next cursor of an earlier page (or
	// the Pos of any message of the thread). Zero starts at the newest message.
	Before uint64
	// Scope, when not empty, keeps only messages of this scope.
	Scope string
}

// Page returns a page of the thread's messages, newest first, and the cursor of the next (older)
// page: the Pos of the oldest message returned, or 0 when there is nothing older. A cursor may
// still lead to an empty page, when the older messages have expired or none of them has the
// scope asked for.
//
// The newest page costs one last-by-subject get and direct gets by sequence, sent at once, of the
// records its newest record lists; a page continuing from a cursor costs one more get. Pages
// larger than PrevDepth records take one more round trip per PrevDepth records. With a Scope, Page walks
// the thread until the page is full or the thread ends, so its cost grows with the number of
// messages of other scopes it passes.
//
// Messages removed by the stream's MaxAge end the thread: the stream drops oldest first, so
// nothing older remains. A Before that is a message of another thread gives ErrBadCursor.
func (s *Store) Page(ctx context.Context, tenant, workflowID, participant string, opt PageOptions) ([]Message, uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		// One deadline for the page spares nats.go a timer per get.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readTimeout)
		defer cancel()
	}
	subj := subject.Thread(tenant, workflowID, participant)
	head, err := s.pageHead(ctx, subj, opt.Before)
	if err != nil {
		return nil, 0, err
	}
	if head == nil {
		return []Message{}, 0, nil
	}
	p := newPager(opt)
	full, err := p.collect(ctx, s, subj, head, opt.Before)
	if err != nil {
		return nil, 0, err
	}
	if !full {
		return p.out, 0, nil
	}
	next, err := p.cursor()
	if err != nil {
		return nil, 0, err
	}
	return p.out, next, nil
}

// pageHead reads the record a page starts in: the thread's newest record when before is 0, and
// otherwise the record that holds the message at position before. It returns nil when there is
// no such record, and ErrBadCursor when before is no position of the thread subj.
func (s *Store) pageHead(ctx context.Context, subj string, before uint64) (*jetstream.RawStreamMsg, error) {
	var (
		head *jetstream.RawStreamMsg
		err  error
	)
	switch {
	case before == 0:
		head, err = s.stream.GetLastMsgForSubject(ctx, subj)
	case recordSeq(before) == 0:
		return nil, ErrBadCursor
	default:
		head, err = s.stream.GetMsg(ctx, recordSeq(before))
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading thread: %w", err)
	}
	if head.Subject != subj {
		return nil, ErrBadCursor
	}
	return head, nil
}

// A pager fills one page of a thread, newest message first.
type pager struct {
	scope string // when not empty, only messages of this scope are taken
	size  int    // the most messages the page holds
	out   []Message
	// rest is set when the page filled up before the oldest message of the record it ended in.
	rest bool
	// last is the oldest record examined: its header continues the chain.
	last *jetstream.RawStreamMsg
}

// newPager returns a pager for the page opt selects, its size bounded by DefaultPageSize and
// MaxPageSize.
func newPager(opt PageOptions) *pager {
	size := opt.Size
	if size <= 0 {
		size = DefaultPageSize
	}
	size = min(size, MaxPageSize)
	return &pager{scope: opt.Scope, size: size, out: make([]Message, 0, size)}
}

// collect fills the page from head, taking only the messages of head before the position before
// (0: all), then from the records head's chain lists, oldest last, until the page is full or
// the thread ends. It reports whether older messages may remain: a full page whose chain did not
// reach an expired record.
func (p *pager) collect(ctx context.Context, s *Store, subj string, head *jetstream.RawStreamMsg, before uint64) (bool, error) {
	p.last = head
	full, err := p.take(head, before)
	if err != nil {
		return false, err
	}
	chain, err := bus.ParsePrev(head.Header)
	if err != nil {
		return false, fmt.Errorf("reading thread: message %d: %w", head.Sequence, err)
	}
	for !full && len(chain) > 0 {
		n := len(chain)
		if p.scope == "" {
			// A record holds at least one message.
			n = min(n, p.size-len(p.out))
		}
		raws, err := s.getMany(ctx, subj, chain[:n])
		if err != nil {
			return false, err
		}
		if full, err = p.takeAll(raws); err != nil {
			return false, err
		}
		if len(raws) < n {
			// Expired: so is everything older.
			return false, nil
		}
		if full {
			break
		}
		if chain = chain[n:]; len(chain) == 0 {
			if chain, err = bus.ParsePrev(p.last.Header); err != nil {
				return false, fmt.Errorf("reading thread: message %d: %w", p.last.Sequence, err)
			}
		}
	}
	return full, nil
}

// takeAll takes the messages of raws, in order, until the page is full; it reports a full page.
func (p *pager) takeAll(raws []*jetstream.RawStreamMsg) (bool, error) {
	for _, raw := range raws {
		p.last = raw
		full, err := p.take(raw, 0)
		if err != nil || full {
			return full, err
		}
	}
	return false, nil
}

// take adds the messages of raw, newest first, that come before bound (0: all) and match to the
// page; it reports a full page.
func (p *pager) take(raw *jetstream.RawStreamMsg, bound uint64) (bool, error) {
	msgs, err := decodeRecord(raw.Sequence, raw.Data)
	if err != nil {
		return false, fmt.Errorf("reading thread: decoding message %d: %w", raw.Sequence, err)
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if bound != 0 && m.Pos >= bound {
			continue
		}
		if p.scope == "" || m.Scope == p.scope {
			p.out = append(p.out, m)
		}
		if len(p.out) == p.size {
			p.rest = i > 0
			return true, nil
		}
	}
	return false, nil
}

// cursor returns the cursor of the page after a full one: the Pos of its oldest message when the
// record it ended in, or that record's predecessors, hold older messages, and 0 otherwise.
func (p *pager) cursor() (uint64, error) {
	next := p.out[len(p.out)-1].Pos
	if p.rest {
		return next, nil
	}
	older, err := bus.ParsePrev(p.last.Header)
	if err != nil {
		return 0, fmt.Errorf("reading thread: message %d: %w", p.last.Sequence, err)
	}
	if len(older) == 0 {
		return 0, nil
	}
	return next, nil
}

// getMany direct-gets the messages at seqs (at most PrevDepth) at once. The result keeps the
// order of seqs and stops before the first one not found.
func (s *Store) getMany(ctx context.Context, subj string, seqs []uint64) ([]*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	raws := make([]*jetstream.RawStreamMsg, len(seqs))
	found := make([]bool, len(seqs))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i, seq := range seqs {
		wg.Go(func() {
			raw, err := s.stream.GetMsg(ctx, seq)
			switch {
			case err == nil:
				raws[i], found[i] = raw, true
			case !errors.Is(err, jetstream.ErrMsgNotFound):
				mu.Lock()
				if firstErr == nil {
					// Later errors may only be this cancel's.
					firstErr = fmt.Errorf("reading thread: message %d: %w", seq, err)
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for i, raw := range raws {
		if !found[i] {
			return raws[:i], nil
		}
		if raw.Subject != subj {
			return nil, fmt.Errorf("reading thread: message %d belongs to another thread", seqs[i])
		}
	}
	return raws, nil
}
