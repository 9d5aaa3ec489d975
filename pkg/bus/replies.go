package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Replies routes replies published by workflow hosts to the requests of this ingress instance
// that wait for them. One subscription serves every waiter: the subject's last token names it.
type Replies struct {
	instance string
	sub      *nats.Subscription
	log      *slog.Logger
	next     atomic.Uint64

	mu      sync.Mutex
	waiters map[string]*Waiter
}

// NewReplies subscribes to the reply subjects of the ingress instance named instance.
func NewReplies(nc *nats.Conn, instance string, log *slog.Logger) (*Replies, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Replies{instance: instance, log: log, waiters: make(map[string]*Waiter)}
	sub, err := nc.Subscribe(subject.ReplyPrefix(instance), r.deliver)
	if err != nil {
		return nil, fmt.Errorf("subscribing to replies: %w", err)
	}
	// Replies must not be dropped when many arrive at once.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("setting reply subscription limits: %w", err)
	}
	r.sub = sub
	return r, nil
}

// Waiter is one pending request's place to receive its reply: partial replies of a streamed
// request first, in order, then the final one.
type Waiter struct {
	r       *Replies
	token   string
	Subject string

	mu     sync.Mutex
	queue  []*agentbusv1.Reply
	first  [1]*agentbusv1.Reply // queue's first backing array: most calls get one reply
	notify chan struct{}        // has a token while queue is not empty
}

// Wait registers a new waiter; call Done when no longer waiting.
func (r *Replies) Wait() *Waiter {
	token := strconv.FormatUint(r.next.Add(1), 36)
	w := &Waiter{r: r, token: token, Subject: subject.Reply(r.instance, token), notify: make(chan struct{}, 1)}
	w.queue = w.first[:0]
	r.mu.Lock()
	r.waiters[token] = w
	r.mu.Unlock()
	return w
}

// Done forgets the waiter; a reply arriving later is dropped (it is still in the result cache
// when the request was idempotent).
func (w *Waiter) Done() {
	w.r.mu.Lock()
	delete(w.r.waiters, w.token)
	w.r.mu.Unlock()
}

// Receive waits for the next reply (partial or final) or for ctx to end.
func (w *Waiter) Receive(ctx context.Context) (*agentbusv1.Reply, error) {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 {
			rep := w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			w.mu.Unlock()
			return rep, nil
		}
		w.mu.Unlock()
		select {
		case <-w.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Final waits for the final reply, dropping partial ones.
func (w *Waiter) Final(ctx context.Context) (*agentbusv1.Reply, error) {
	for {
		rep, err := w.Receive(ctx)
		if err != nil || !rep.GetPartial() {
			return rep, err
		}
	}
}

func (w *Waiter) push(rep *agentbusv1.Reply) {
	w.mu.Lock()
	w.queue = append(w.queue, rep)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (r *Replies) deliver(m *nats.Msg) {
	token, ok := subject.ReplyWaiter(r.instance, m.Subject)
	if !ok {
		return
	}
	r.mu.Lock()
	w := r.waiters[token]
	r.mu.Unlock()
	if w == nil {
		return // the caller gave up; nothing waits
	}
	rep := new(agentbusv1.Reply)
	if err := proto.Unmarshal(m.Data, rep); err != nil {
		r.log.Error("decoding reply", "err", err)
		rep = &agentbusv1.Reply{StatusCode: 502, Error: "bad-reply"}
	}
	w.push(rep)
}

// Close unsubscribes.
func (r *Replies) Close() error {
	if err := r.sub.Unsubscribe(); err != nil {
		return fmt.Errorf("unsubscribing replies: %w", err)
	}
	return nil
}
