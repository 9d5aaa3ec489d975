package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"

	"github.com/agentbus/agentbus/pkg/history"
)

// errFeedEnded is a new stream's answer when its thread's follow failed as it joined.
var errFeedEnded = errors.New("the thread's follow ended")

// threadKey names a thread on this ingress: its tenant, workflow and participant.
type threadKey struct{ tenant, workflowID, participant string }

func (t thread) key() threadKey { return threadKey{t.Tenant, t.WorkflowID, t.Participant} }

// threadFeeds shares one follow of each thread among the listen streams of it on this ingress:
// the thread's records are read from the server, decoded and encoded as events once, whatever
// the number of streams, and each stream gets them in its own queue. A feed lives while a stream
// of its thread is open. Feeds of different threads share nothing but the map.
type threadFeeds struct {
	store func() *history.Store
	log   *slog.Logger

	mu    sync.Mutex
	feeds map[threadKey]*threadFeed
}

// threadFeed is the shared follow of one thread. It starts from now on; a stream that resumes
// after an earlier message reads the messages it missed with a follow of its own (catchUp), and
// moves to the feed once the feed has passed on nothing after what the stream has had (join).
type threadFeed struct {
	feeds   *threadFeeds
	key     threadKey
	streams int // open streams of the thread, joined or not (under feeds.mu)
	cancel  context.CancelFunc
	done    chan struct{} // closed once the follow has ended and its consumer is deleted

	mu sync.Mutex
	// queues are the joined streams' queues, each with the position it has had messages up to.
	queues map[*eventQueue]uint64
	// last is the position of the last message the feed passed on, 0 before the first (no
	// message has position 0). The feed passes on every message of the thread stored after it.
	last  uint64
	ended bool
}

// open counts a stream of th and returns its feed, started if none runs. The follow is started
// outside the lock, so that a slow start holds up no other thread's streams; of two started at
// once for one thread, the second is stopped again.
func (f *threadFeeds) open(th thread) (*threadFeed, error) {
	k := th.key()
	if fd := f.counted(k); fd != nil {
		return fd, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	live, err := f.store().Follow(ctx, th.Tenant, th.WorkflowID, th.Participant, 0)
	if err != nil {
		cancel()
		return nil, err
	}
	f.mu.Lock()
	if fd := f.feeds[k]; fd != nil {
		fd.streams++
		f.mu.Unlock()
		cancel()
		for range live { // until the follow has deleted its consumer
		}
		return fd, nil
	}
	fd := &threadFeed{feeds: f, key: k, streams: 1, cancel: cancel, done: make(chan struct{}), queues: make(map[*eventQueue]uint64)}
	f.feeds[k] = fd
	f.mu.Unlock()
	go fd.run(live)
	return fd, nil
}

// counted counts a stream of the feed of k and returns it, or nil if none runs.
func (f *threadFeeds) counted(k threadKey) *threadFeed {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd := f.feeds[k]
	if fd != nil {
		fd.streams++
	}
	return fd
}

// close counts a stream of fd fewer: its queue leaves the feed, and the last stream stops the
// follow and waits until its consumer is deleted.
func (fd *threadFeed) close(q *eventQueue) {
	fd.mu.Lock()
	delete(fd.queues, q)
	fd.mu.Unlock()
	f := fd.feeds
	f.mu.Lock()
	fd.streams--
	last := fd.streams == 0
	if last && f.feeds[fd.key] == fd {
		delete(f.feeds, fd.key)
	}
	f.mu.Unlock()
	if last {
		fd.cancel()
		<-fd.done
	}
}

// run passes the follow's messages to the joined queues until the follow ends. A queue that is
// full leaves the feed overflowed. A follow that fails ends the joined streams (their clients
// resume with Last-Event-ID) and leaves the thread to a new feed.
func (fd *threadFeed) run(live <-chan history.Message) {
	defer close(fd.done)
	for m := range live {
		ev, ok := encodeEvent(m, fd.feeds.log)
		fd.mu.Lock()
		if ok {
			for q, had := range fd.queues {
				if m.Pos <= had {
					continue
				}
				if !q.push(ev) {
					delete(fd.queues, q)
					continue
				}
				fd.queues[q] = m.Pos
			}
		}
		fd.last = m.Pos
		fd.mu.Unlock()
	}
	fd.mu.Lock()
	fd.ended = true
	for q := range fd.queues {
		close(q.ch)
		delete(fd.queues, q)
	}
	fd.mu.Unlock()
	f := fd.feeds
	f.mu.Lock()
	if f.feeds[fd.key] == fd {
		delete(f.feeds, fd.key)
	}
	f.mu.Unlock()
}

// join moves q to the feed if the feed passes on every message after position had (0: q has
// had none and takes what comes from now on): it has passed on none after had yet. The feed
// then owns q: it fills q and closes it.
func (fd *threadFeed) join(q *eventQueue, had uint64) bool {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.ended || had != 0 && (fd.last == 0 || fd.last > had) {
		return false
	}
	fd.queues[q] = had
	return true
}

// encodeEvent is m as a "message" event.
func encodeEvent(m history.Message, log *slog.Logger) (listenEvent, bool) {
	b, err := json.Marshal(m)
	if err != nil {
		log.Error("encoding history message", "err", err)
		return listenEvent{}, false
	}
	return listenEvent{id: m.ID, data: sseEvent(m.ID, b)}, true
}
