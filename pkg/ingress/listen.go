package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
)

// Defaults of the listener limits (Config).
const (
	DefaultMaxListenersPerKey    = 20
	DefaultMaxListenersPerTenant = 200
	DefaultListenBufferBytes     = 256 << 10
	DefaultListenBufferEvents    = 256
)

const (
	// sseKeepalive is how often an idle event stream gets a comment line, so that proxies and
	// clients do not take it for dead.
	sseKeepalive = 15 * time.Second
	// sseWriteTimeout bounds each write to an event stream: a client that stops reading is
	// dropped after it, however long the stream has lived.
	sseWriteTimeout = 30 * time.Second
	// listenSendBuffer is the kernel's send buffer of a listen stream's connection (SO_SNDBUF;
	// Linux doubles it for its bookkeeping). Without it the kernel grows the buffer up to
	// net.ipv4.tcp_wmem's maximum, 4 MiB by default, for a client that stops reading, and the
	// stream's queue refills while it does. 64 KiB still carries about 2.5 MB/s to a client
	// 50 ms away.
	listenSendBuffer = 64 << 10
)

// historyListen serves GET …/messaging/listen: a Server-Sent Events stream of the messages
// stored in a thread from now on, one "message" event each with the message id as event id.
// With Last-Event-ID (header, or lastEventId query for clients that cannot set it) it first
// delivers the messages stored after that one, so a reconnecting client misses nothing.
//
// A stream holds at most ListenBufferEvents events and ListenBufferBytes bytes for its client,
// and the kernel at most listenSendBuffer (twice that, as Linux counts) in the connection's send
// buffer. A client further behind than that gets an "overflow" event after the ones held, and the
// stream ends; it reconnects with Last-Event-ID and resumes where it was. A slow client thus
// costs the ingress its buffers, not the thread's growth.
//
// A stream ends when its key is revoked, or its tenant deleted, before the revocation is answered
// (listeners.end).
func (s *Server) historyListen(w http.ResponseWriter, r *http.Request) {
	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	r = r.WithContext(ctx)
	keysSeen := s.auth.Revision()
	th, p := s.threadOf(r)
	var id uint64
	if p == nil {
		id, p = s.enterListener(th.Key, th.Tenant, stop)
	}
	if p != nil {
		problem.Write(w, *p)
		return
	}
	defer s.leaveListener(th.Key, th.Tenant, id)
	if s.auth.Revision() != keysSeen {
		// A revocation the key cache took in before the stream was counted ended nothing of it.
		if _, p := s.threadOf(r); p != nil {
			problem.Write(w, *p)
			return
		}
	}
	store := s.store()
	after, found, err := resumePoint(r, store, th)
	if err != nil {
		s.readFailed(w, r, "finding the last event", err)
		return
	}
	feed, err := s.feeds.open(th)
	if err != nil {
		s.readFailed(w, r, "following history", err)
		return
	}
	q := newEventQueue(s.cfg.ListenBufferEvents, s.cfg.ListenBufferBytes)
	defer feed.close(q)
	if !feed.join(q, after) {
		if after == 0 {
			s.readFailed(w, r, "following history", errFeedEnded)
			return
		}
		stop, err := s.catchUp(r.Context(), store, th, after, q, feed)
		if err != nil {
			s.readFailed(w, r, "following history", err)
			return
		}
		defer stop()
	}
	limitSendBuffer(w, r)
	s.relayEvents(r.Context(), startEventStream(w), q, found, th.Tenant)
}

// catchUp fills q for a stream that resumes before what the thread's feed has passed on: it reads
// what the stream missed, after position after, with a follow of its own until q can join feed.
// stop ends that follow and waits until its consumer is deleted, so that nothing of the request
// outlives it.
func (s *Server) catchUp(ctx context.Context, store *history.Store, th thread, after uint64, q *eventQueue, feed *threadFeed) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	live, err := store.Follow(ctx, th.Tenant, th.WorkflowID, th.Participant, after)
	if err != nil {
		cancel()
		return nil, err
	}
	filled := make(chan struct{})
	go func() {
		defer close(filled)
		q.fill(live, cancel, feed, s.log)
	}()
	return func() {
		cancel()
		<-filled
	}, nil
}

// limitSendBuffer caps the kernel's send buffer of r's connection at listenSendBuffer, where it
// can: on an HTTP/1 connection that HTTPServer accepted (connOf). The connection then closes when
// the response ends, so that no later response on it is held to the small buffer.
func limitSendBuffer(w http.ResponseWriter, r *http.Request) {
	c, ok := connOf(r.Context()).(interface{ SetWriteBuffer(bytes int) error })
	if !ok || r.ProtoMajor != 1 {
		return
	}
	if err := c.SetWriteBuffer(listenSendBuffer); err == nil {
		w.Header().Set("Connection", "close")
	}
}

// resumePoint is the position a listen stream starts after: the message Last-Event-ID (or the
// lastEventId query parameter) names, 0 (from now on) without one, and whether it was found.
func resumePoint(r *http.Request, store *history.Store, th thread) (after uint64, found bool, err error) {
	lastID := r.Header.Get("Last-Event-ID")
	if lastID == "" {
		lastID = th.Query.Get("lastEventId")
	}
	if lastID == "" {
		return 0, true, nil
	}
	after, err = findSeq(r.Context(), store, th, lastID)
	return after, after != 0, err
}

// relayEvents writes q's events to the stream until the client goes (ctx, the request's), the
// server closes its streams, or q ends; an overflowed q ends with the overflow event after the
// events it held.
func (s *Server) relayEvents(ctx context.Context, es *eventStream, q *eventQueue, found bool, tenant string) {
	first := ": listening\n\n"
	if !found {
		first = ": last-event-id not found\n\n"
	}
	if !es.write([]byte(first)) {
		return
	}
	keepalive := time.NewTicker(sseKeepalive)
	defer keepalive.Stop()
	lastID := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			return // the server is shutting down; the client reconnects elsewhere
		case <-keepalive.C:
			if !es.write([]byte(": keepalive\n\n")) {
				return
			}
		case ev, ok := <-q.ch:
			switch {
			case ok:
				q.taken(ev)
				if !es.write(ev.data) {
					return
				}
				lastID = ev.id
				keepalive.Reset(sseKeepalive)
				continue
			case q.overflowed.Load():
				s.metrics.overflows.Inc()
				es.write(q.overflowEvent(lastID))
			case ctx.Err() == nil:
				// The follow failed; the client reconnects with Last-Event-ID and misses nothing.
				s.log.Warn("history follow ended", "tenant", tenant)
			}
			return
		}
	}
}

// listenEvent is one encoded event waiting to be written, and the id of the message it carries.
type listenEvent struct {
	id   string
	data []byte
}

// eventQueue holds a listen stream's events between the thread's follow and the client: at most
// cap(ch) events and maxBytes bytes, except that an empty queue takes one event of any size, so
// that a message larger than the buffer still reaches a client that keeps up.
type eventQueue struct {
	ch       chan listenEvent
	maxBytes int64
	bytes    atomic.Int64 // of the events in ch
	// overflowed is set before ch is closed when an event found the queue full.
	overflowed atomic.Bool
	maxEvents  int
}

func newEventQueue(maxEvents, maxBytes int) *eventQueue {
	return &eventQueue{ch: make(chan listenEvent, maxEvents), maxBytes: int64(maxBytes), maxEvents: maxEvents}
}

// fill encodes a stream's own follow's messages into the queue until the queue joins the thread's
// feed, or the follow ends; it then stops the follow (stop) and waits until live is closed. A
// queue found full is overflowed (push): nothing more is read for a client that does not keep
// up. It closes the queue when the follow ends, not when the queue joined the feed, which then
// owns it.
func (q *eventQueue) fill(live <-chan history.Message, stop context.CancelFunc, feed *threadFeed, log *slog.Logger) {
	defer func() {
		stop()
		for range live {
		}
	}()
	for m := range live {
		if ev, ok := encodeEvent(m, log); ok && !q.push(ev) {
			return
		}
		if feed.join(q, m.Pos) {
			return
		}
	}
	close(q.ch)
}

// push adds ev to the queue; when the queue is full it marks the queue overflowed, closes it and
// reports false. Only the queue's filler (fill, or the feed it joined) pushes and closes.
func (q *eventQueue) push(ev listenEvent) bool {
	n := int64(len(ev.data))
	if held := q.bytes.Add(n); held > q.maxBytes && held != n {
		q.bytes.Add(-n)
		q.overflow()
		return false
	}
	select {
	case q.ch <- ev:
		return true
	default:
		q.bytes.Add(-n)
		q.overflow()
		return false
	}
}

// overflow ends a queue that found itself full: relayEvents writes the overflow event after the
// events it holds.
func (q *eventQueue) overflow() {
	q.overflowed.Store(true)
	close(q.ch)
}

// taken accounts for an event the writer took out of the queue.
func (q *eventQueue) taken(ev listenEvent) { q.bytes.Add(-int64(len(ev.data))) }

// listenOverflow is the data of the event that ends a stream whose client fell behind: a
// problem detail, and the id of the last message event written, to resume after.
type listenOverflow struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Status      int    `json:"status"`
	Detail      string `json:"detail"`
	LastEventID string `json:"lastEventId,omitempty"`
}

// overflowEvent is the "overflow" event; lastID is the last message event written.
func (q *eventQueue) overflowEvent(lastID string) []byte {
	b, _ := json.Marshal(listenOverflow{ // cannot fail: strings and an int
		Type: problem.TypePrefix + "listener-overflow", Title: "Listener fell behind", Status: http.StatusServiceUnavailable,
		Detail: fmt.Sprintf("this stream's client fell more than %d events or %d bytes behind; reconnect with Last-Event-ID to resume after the last message event received",
			q.maxEvents, q.maxBytes),
		LastEventID: lastID,
	})
	return sseNamed("overflow", "", b)
}

// sseEvent is one "message" event.
func sseEvent(id string, data []byte) []byte { return sseNamed("message", id, data) }

// sseNamed is one event named name with data. JSON has no raw line breaks; an id with one (never
// written by agentbus) would end the field early, so it is left out.
func sseNamed(name, id string, data []byte) []byte {
	b := make([]byte, 0, len(id)+len(name)+len(data)+24)
	if id != "" && !strings.ContainsAny(id, "\r\n") {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// eventStream is an answer of Server-Sent Events.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startEventStream answers 200 with an event stream. The server's WriteTimeout is sized for one
// request and its answer, and would cut a stream that lives as long as its client; each write
// gets its own deadline instead. (The read deadline needs nothing: net/http clears it when it
// starts watching for the client to go.)
func startEventStream(w http.ResponseWriter) *eventStream {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx would otherwise buffer the stream
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, rc: rc}
}

// write writes one event or comment and flushes it; false means the client is gone, or did not
// take it within sseWriteTimeout.
func (e *eventStream) write(chunk []byte) bool {
	_ = e.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := e.w.Write(chunk); err != nil {
		return false
	}
	return e.rc.Flush() == nil
}

// listeners counts the history listen streams open on this instance, per API key and per
// tenant, and ends those of a key the instance stops accepting (end); keys and tenants at zero
// leave the maps.
type listeners struct {
	perKey, perTenant int
	mu                sync.Mutex
	keys, tenants     map[string]int
	// stops are the open streams' cancel funcs, by key id and stream.
	stops  map[string]map[uint64]context.CancelFunc
	nextID uint64
}

// enter counts a stream of key and tenant, whose request's context stop cancels, unless one of
// them is at its cap: it then names it. id is the stream's, for leave.
func (l *listeners) enter(key, tenant string, stop context.CancelFunc) (id uint64, full string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.keys[key] >= l.perKey:
		return 0, "key"
	case l.tenants[tenant] >= l.perTenant:
		return 0, "tenant"
	}
	l.keys[key]++
	l.tenants[tenant]++
	if l.stops == nil {
		l.stops = make(map[string]map[uint64]context.CancelFunc)
	}
	if l.stops[key] == nil {
		l.stops[key] = make(map[uint64]context.CancelFunc)
	}
	l.nextID++
	l.stops[key][l.nextID] = stop
	return l.nextID, ""
}

func (l *listeners) leave(key, tenant string, id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	decrement(l.keys, key, 1)
	decrement(l.tenants, tenant, 1)
	delete(l.stops[key], id)
	if len(l.stops[key]) == 0 {
		delete(l.stops, key)
	}
}

// end ends every open stream of the key: it was revoked, or its tenant deleted
// (keys.Authenticator.OnRevoked). Each stream then leaves as its client's going would make it.
func (l *listeners) end(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, stop := range l.stops[key] {
		stop()
	}
}

// decrement counts n fewer of k, which leaves m at zero.
func decrement[N int | int64](m map[string]N, k string, n N) {
	if m[k] <= n {
		delete(m, k)
		return
	}
	m[k] -= n
}

// enterListener counts a listen stream of key for tenant, which stop ends when the key is
// revoked; over a cap the answer is a 429 problem. id is the stream's, for leaveListener.
func (s *Server) enterListener(k keys.Key, tenant string, stop context.CancelFunc) (id uint64, p *problem.Problem) {
	tooMany := func(detail string) *problem.Problem {
		return problem.TooManyListeners.New(detail)
	}
	id, full := s.listeners.enter(k.ID, tenant, stop)
	switch full {
	case "key":
		return 0, tooMany(fmt.Sprintf("this API key already has %d listen streams open; close one first", s.listeners.perKey))
	case "tenant":
		return 0, tooMany(fmt.Sprintf("the tenant already has %d listen streams open; close one first", s.listeners.perTenant))
	}
	s.metrics.listeners.Inc()
	return id, nil
}

// leaveListener gives back what enterListener counted.
func (s *Server) leaveListener(k keys.Key, tenant string, id uint64) {
	s.listeners.leave(k.ID, tenant, id)
	s.metrics.listeners.Dec()
}
