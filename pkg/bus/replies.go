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
	waiters map[string]chan *agentbusv1.Reply
}

// NewReplies subscribes to the reply subjects of the ingress instance named instance.
func NewReplies(nc *nats.Conn, instance string, log *slog.Logger) (*Replies, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Replies{instance: instance, log: log, waiters: make(map[string]chan *agentbusv1.Reply)}
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

// Waiter is one pending request's place to receive its reply.
type Waiter struct {
	r       *Replies
	token   string
	Subject string
	C       <-chan *agentbusv1.Reply
}

// Wait registers a new waiter; call Done when no longer waiting.
func (r *Replies) Wait() *Waiter {
	token := strconv.FormatUint(r.next.Add(1), 36)
	ch := make(chan *agentbusv1.Reply, 1)
	r.mu.Lock()
	r.waiters[token] = ch
	r.mu.Unlock()
	return &Waiter{r: r, token: token, Subject: subject.Reply(r.instance, token), C: ch}
}

// Done forgets the waiter; a reply arriving later is dropped (it is still in the result cache
// when the request was idempotent).
func (w *Waiter) Done() {
	w.r.mu.Lock()
	delete(w.r.waiters, w.token)
	w.r.mu.Unlock()
}

// Receive waits for the reply or for ctx to end.
func (w *Waiter) Receive(ctx context.Context) (*agentbusv1.Reply, error) {
	select {
	case rep := <-w.C:
		return rep, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *Replies) deliver(m *nats.Msg) {
	token, ok := subject.ReplyWaiter(r.instance, m.Subject)
	if !ok {
		return
	}
	r.mu.Lock()
	ch := r.waiters[token]
	delete(r.waiters, token)
	r.mu.Unlock()
	if ch == nil {
		return // the caller gave up; nothing waits
	}
	rep := new(agentbusv1.Reply)
	if err := proto.Unmarshal(m.Data, rep); err != nil {
		r.log.Error("decoding reply", "err", err)
		rep = &agentbusv1.Reply{StatusCode: 502, Error: "bad-reply"}
	}
	ch <- rep
}

// Close unsubscribes.
func (r *Replies) Close() error {
	if err := r.sub.Unsubscribe(); err != nil {
		return fmt.Errorf("unsubscribing replies: %w", err)
	}
	return nil
}
