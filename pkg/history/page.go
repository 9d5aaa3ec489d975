package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	size := opt.Size
	if size <= 0 {
		size = DefaultPageSize
	}
	size = min(size, MaxPageSize)
	subj := subject.Thread(tenant, workflowID, participant)

	var (
		head *jetstream.RawStreamMsg
		err  error
	)
	switch {
	case opt.Before == 0:
		head, err = s.stream.GetLastMsgForSubject(ctx, subj)
	case recordSeq(opt.Before) == 0:
		return nil, 0, ErrBadCursor
	default:
		head, err = s.stream.GetMsg(ctx, recordSeq(opt.Before))
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return []Message{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading thread: %w", err)
	}
	if head.Subject != subj {
		return nil, 0, ErrBadCursor
	}

	out := make([]Message, 0, size)
	// rest is set when the page filled up before the oldest message of the record it ended in.
	rest := false
	// take adds the messages of raw, newest first, that come before bound (0: all) and match
	// to the page; it reports a full page.
	take := func(raw *jetstream.RawStreamMsg, bound uint64) (bool, error) {
		msgs, err := decodeRecord(raw.Sequence, raw.Data)
		if err != nil {
			return false, fmt.Errorf("reading thread: decoding message %d: %w", raw.Sequence, err)
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			if bound != 0 && m.Pos >= bound {
				continue
			}
			if opt.Scope == "" || m.Scope == opt.Scope {
				out = append(out, m)
			}
			if len(out) == size {
				rest = i > 0
				return true, nil
			}
		}
		return false, nil
	}

	// last is the oldest record examined: its header continues the chain.
	last := head
	full, err := take(head, opt.Before)
	if err != nil {
		return nil, 0, err
	}
	chain, err := parsePrev(head.Header)
	if err != nil {
		return nil, 0, fmt.Errorf("reading thread: message %d: %w", head.Sequence, err)
	}
	for !full && len(chain) > 0 {
		n := len(chain)
		if opt.Scope == "" {
			// A record holds at least one message.
			n = min(n, size-len(out))
		}
		raws, err := s.getMany(ctx, subj, chain[:n])
		if err != nil {
			return nil, 0, err
		}
		for _, raw := range raws {
			last = raw
			if full, err = take(raw, 0); err != nil {
				return nil, 0, err
			}
			if full {
				break
			}
		}
		if len(raws) < n {
			// Expired: so is everything older.
			return out, 0, nil
		}
		if full {
			break
		}
		if chain = chain[n:]; len(chain) == 0 {
			if chain, err = parsePrev(last.Header); err != nil {
				return nil, 0, fmt.Errorf("reading thread: message %d: %w", last.Sequence, err)
			}
		}
	}
	if !full {
		return out, 0, nil
	}
	// The page is full; there is more if the record it ended in, or that record's
	// predecessors, hold older messages.
	next := out[len(out)-1].Pos
	if rest {
		return out, next, nil
	}
	older, err := parsePrev(last.Header)
	if err != nil {
		return nil, 0, fmt.Errorf("reading thread: message %d: %w", last.Sequence, err)
	}
	if len(older) == 0 {
		return out, 0, nil
	}
	return out, next, nil
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
