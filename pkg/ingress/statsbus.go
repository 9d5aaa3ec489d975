package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/window"
)

// The stats of calls (docs/metrics.md#per-agent-stats): every ingress instance keeps a rolling
// window of the calls it answered (package window), and answers stats requests on
// subject.StatsWindow with it. A stats route asks every instance at once and merges the
// answers that come within statsDeadline.

// statsVersion is the version of the stats messages; an instance ignores requests and answers
// of another version.
const statsVersion = 1

// How long a stats route waits for the other ingress instances.
const (
	// statsDeadline bounds the wait (a statsService's deadline, which tests lengthen).
	statsDeadline = 300 * time.Millisecond
	// statsGrace is the least wait: once it is over and every instance that answered within
	// statsPeerMemory has answered, the route stops waiting.
	statsGrace = 20 * time.Millisecond
	// statsPeerMemory is how long an instance that answered is waited for by later requests.
	statsPeerMemory = 10 * time.Minute
	// statsRediscover: a request waits the whole deadline, to find instances it has not heard
	// of, when none did for this long.
	statsRediscover = time.Minute
)

// statsRequest is a request on subject.StatsWindow.
type statsRequest struct {
	V int `json:"v"`
	// From is the asking instance, which merges its own window and does not answer itself.
	From string `json:"from"`
	// Tenant limits the answer to one tenant's keys; empty means every key.
	Tenant string `json:"tenant,omitempty"`
}

// statsPart is one message of an instance's answer: its snapshot's series, split so that each
// message fits the connection's payload limit.
type statsPart struct {
	V        int    `json:"v"`
	Instance string `json:"instance"`
	Part     int    `json:"part"`
	Parts    int    `json:"parts"`
	window.Snapshot
}

// statsService answers stats requests with the window of this instance, and gathers the
// windows of every instance.
type statsService struct {
	window   *window.Window
	conn     *nats.Conn
	instance string
	log      *slog.Logger
	sub      *nats.Subscription

	mu sync.Mutex
	// peers are the other instances that answered, with when they last did.
	peers map[string]time.Time
	// fullWait is when a request last waited the whole deadline.
	fullWait time.Time

	// deadline is statsDeadline in nanoseconds, unless a test set another (Server.SetStatsDeadline).
	deadline atomic.Int64
}

// startStats subscribes this instance to stats requests.
func startStats(conn *nats.Conn, instance string, w *window.Window, log *slog.Logger) (*statsService, error) {
	st := &statsService{window: w, conn: conn, instance: instance, log: log, peers: map[string]time.Time{}}
	st.deadline.Store(int64(statsDeadline))
	var err error
	if st.sub, err = conn.Subscribe(subject.StatsWindow, st.answer); err != nil {
		return nil, fmt.Errorf("subscribing to stats requests: %w", err)
	}
	return st, nil
}

// close stops answering stats requests. A connection closed already, or a second close, is
// not an error.
func (st *statsService) close() error {
	err := st.sub.Unsubscribe()
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
		return nil
	}
	return err
}

// answer answers a stats request with this instance's window, in as many messages as it takes.
func (st *statsService) answer(m *nats.Msg) {
	var req statsRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || req.V != statsVersion || m.Reply == "" || req.From == st.instance {
		return
	}
	parts, err := st.parts(st.window.Snapshot(time.Now(), req.Tenant), st.conn.MaxPayload()-1024)
	if err != nil {
		st.log.Error("encoding stats", "err", err)
		return
	}
	for _, p := range parts {
		if err := st.conn.Publish(m.Reply, p); err != nil {
			st.log.Warn("answering a stats request", "err", err)
			return
		}
	}
}

// parts encodes snap as messages of at most limit bytes each (a single series larger than that
// goes alone).
func (st *statsService) parts(snap window.Snapshot, limit int64) ([][]byte, error) {
	var groups [][]window.Series
	var group []window.Series
	size := int64(0)
	for _, sr := range snap.Series {
		b, err := json.Marshal(sr)
		if err != nil {
			return nil, err
		}
		if len(group) > 0 && size+int64(len(b))+1 > limit-256 {
			groups = append(groups, group)
			group, size = nil, 0
		}
		group = append(group, sr)
		size += int64(len(b)) + 1
	}
	groups = append(groups, group)
	out := make([][]byte, 0, len(groups))
	for i, g := range groups {
		part := statsPart{V: statsVersion, Instance: st.instance, Part: i, Parts: len(groups),
			Snapshot: window.Snapshot{SlotMs: snap.SlotMs, Series: g, Dropped: snap.Dropped}}
		if part.Series == nil {
			part.Series = []window.Series{}
		}
		b, err := json.Marshal(part)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// gathered says which instances a gathered snapshot holds.
type gathered struct {
	// Answered counts the instances merged, this one included.
	Answered int `json:"answered"`
	// Unanswered counts the instances that answered a request of this one within
	// statsPeerMemory but not this one within the deadline: stopped, or too slow.
	Unanswered int `json:"unanswered"`
}

// partial is an instance's answer while its parts arrive.
type partial struct {
	snap       window.Snapshot
	got, parts int
}

// gather asks every ingress instance for its window (of tenant's keys, or of all when tenant
// is empty) and merges the answers that come in time with this instance's own window. It
// returns when every instance it knows of answered and statsGrace is over, or at
// its deadline. The error is the bus's: the request could not be sent.
func (st *statsService) gather(ctx context.Context, tenant string) (window.Snapshot, gathered, time.Time, error) {
	inbox := subject.StatsReply(st.instance, nuid.Next())
	sub, err := st.conn.SubscribeSync(inbox)
	if err != nil {
		return window.Snapshot{}, gathered{}, time.Time{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, err := json.Marshal(statsRequest{V: statsVersion, From: st.instance, Tenant: tenant})
	if err != nil {
		return window.Snapshot{}, gathered{}, time.Time{}, err
	}
	start := time.Now()
	if err := st.conn.PublishRequest(subject.StatsWindow, inbox, req); err != nil {
		return window.Snapshot{}, gathered{}, time.Time{}, err
	}
	merged := st.window.Snapshot(start, tenant)
	expected, full := st.expected(start)

	answered := map[string]bool{}
	pending := map[string]*partial{}
	deadline := start.Add(time.Duration(st.deadline.Load()))
	for {
		until := deadline
		if !full && allIn(expected, answered) {
			until = start.Add(statsGrace)
		}
		if !time.Now().Before(until) {
			break
		}
		mctx, cancel := context.WithDeadline(ctx, until)
		m, err := sub.NextMsgWithContext(mctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return window.Snapshot{}, gathered{}, time.Time{}, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return window.Snapshot{}, gathered{}, time.Time{}, err
		}
		var part statsPart
		if json.Unmarshal(m.Data, &part) != nil || part.V != statsVersion || part.Instance == st.instance ||
			part.Instance == "" || answered[part.Instance] || part.Parts < 1 || part.Parts > 1000 {
			continue
		}
		p := pending[part.Instance]
		if p == nil {
			p = &partial{snap: window.Snapshot{SlotMs: part.SlotMs}, parts: part.Parts}
			pending[part.Instance] = p
		}
		if err := p.snap.Merge(part.Snapshot); err != nil {
			st.log.Warn("ignoring the stats of an instance", "instance", part.Instance, "err", err)
			continue
		}
		if p.got++; p.got < p.parts {
			continue
		}
		delete(pending, part.Instance)
		if err := merged.Merge(p.snap); err != nil {
			st.log.Warn("ignoring the stats of an instance", "instance", part.Instance, "err", err)
			continue
		}
		answered[part.Instance] = true
	}
	got := gathered{Answered: 1 + len(answered)}
	for id := range expected {
		if !answered[id] {
			got.Unanswered++
		}
	}
	st.remember(start, answered)
	return merged, got, start, nil
}

// expected returns the instances that answered within statsPeerMemory of now, and whether this
// request is to wait the whole deadline to discover others.
func (st *statsService) expected(now time.Time) (map[string]bool, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := map[string]bool{}
	for id, seen := range st.peers {
		if now.Sub(seen) > statsPeerMemory {
			delete(st.peers, id)
			continue
		}
		out[id] = true
	}
	full := now.Sub(st.fullWait) >= statsRediscover
	if full {
		st.fullWait = now // concurrent requests need not all wait
	}
	return out, full
}

// remember notes the instances that answered.
func (st *statsService) remember(now time.Time, answered map[string]bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for id := range answered {
		st.peers[id] = now
	}
}

// allIn reports whether every key of want is in got.
func allIn(want, got map[string]bool) bool {
	for id := range want {
		if !got[id] {
			return false
		}
	}
	return true
}
