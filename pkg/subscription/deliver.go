package subscription

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/retry"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// Event is one event as it is POSTed.
type Event struct {
	// ID is the webhook-id: "msg_" and the message's id, or "dl_" and the dead letter's id; the
	// same on every attempt and replay.
	ID   string
	Type string
	// Body is the JSON body: {"type", "timestamp", "data"}.
	Body []byte
}

// envelope is an event's body.
type envelope struct {
	Type      string       `json:"type"`
	Timestamp timefmt.Time `json:"timestamp"`
	Data      any          `json:"data"`
}

// messageData is the data of a message event.
type messageData struct {
	TenantID  string          `json:"tenantId"`
	AgentName string          `json:"agentName"`
	Message   history.Message `json:"message"`
}

// deadLetterData is the data of a dead-letter event.
type deadLetterData struct {
	TenantID   string            `json:"tenantId"`
	AgentName  string            `json:"agentName"`
	DeadLetter deadletter.Letter `json:"deadLetter"`
}

// messageEvents returns the events of one history record that the subscription wants.
func messageEvents(sub *Subscription, seq uint64, data []byte) ([]Event, error) {
	msgs, err := history.DecodeRecord(seq, data)
	if err != nil {
		return nil, fmt.Errorf("decoding history record %d: %w", seq, err)
	}
	var out []Event
	for _, m := range msgs {
		typ := MessageIncoming
		if m.Direction == history.Out {
			typ = MessageOutgoing
		}
		wf, _ := ident.ParseWorkflowID(m.WorkflowID)
		if !sub.wants(typ, wf.Agent) {
			continue
		}
		body, err := json.Marshal(envelope{Type: typ, Timestamp: timefmt.Of(m.CreatedAt), Data: messageData{TenantID: sub.TenantID, AgentName: wf.Agent, Message: m}})
		if err != nil {
			return nil, fmt.Errorf("encoding event: %w", err)
		}
		out = append(out, Event{ID: "msg_" + m.ID, Type: typ, Body: body})
	}
	return out, nil
}

// deadLetterEvents returns the event of one dead letter, if the subscription wants it.
func deadLetterEvents(sub *Subscription, raw *jetstream.RawStreamMsg) ([]Event, error) {
	l, err := deadletter.Decode(raw)
	if err != nil {
		return nil, err
	}
	if !sub.wants(DeadLetterCreated, l.AgentName) {
		return nil, nil
	}
	body, err := json.Marshal(envelope{Type: DeadLetterCreated, Timestamp: l.DeadAt, Data: deadLetterData{TenantID: sub.TenantID, AgentName: l.AgentName, DeadLetter: l}})
	if err != nil {
		return nil, fmt.Errorf("encoding event: %w", err)
	}
	return []Event{{ID: "dl_" + strconv.FormatUint(raw.Sequence, 10), Type: DeadLetterCreated, Body: body}}, nil
}

// eventsOf returns the events a consumed message of a source carries for the subscription.
func eventsOf(sub *Subscription, src string, m jetstream.Msg, md *jetstream.MsgMetadata) ([]Event, error) {
	if src == "dead" {
		return deadLetterEvents(sub, &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream,
			Header: m.Headers(), Data: m.Data(), Time: md.Timestamp})
	}
	return messageEvents(sub, md.Sequence.Stream, m.Data())
}

// ErrUnreachable is a delivery that got no answer: the receiver could not be reached, or did not
// answer within the timeout.
var ErrUnreachable = errors.New("the receiver could not be reached")

// StatusError is a delivery the receiver answered with a status other than 2xx.
type StatusError struct{ Code int }

func (e *StatusError) Error() string { return fmt.Sprintf("the receiver answered %d", e.Code) }

// post delivers one event once.
func (s *Store) post(ctx context.Context, sub *Subscription, ev Event) error {
	u, literal, err := s.cfg.Allow.Check(sub.URL)
	if err != nil {
		return err
	}
	client := s.public
	if literal {
		client = s.literal
	}
	hdr, err := webhooksig.Standard{Secret: sub.Secret}.Sign(ev.ID, time.Now(), ev.Body)
	if err != nil {
		return fmt.Errorf("signing the event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(ev.Body))
	if err != nil {
		return fmt.Errorf("building the delivery: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentbus-webhooks")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, errors.Unwrap(err)) // the *url.Error repeats the URL
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &StatusError{Code: resp.StatusCode}
	}
	return nil
}

// policy is the retry policy of an event's delivery: FirstBackoff doubling up to MaxBackoff,
// for RetryFor after the event was stored.
func (s *Store) policy() retry.Policy {
	return retry.Policy{First: FirstBackoff, Max: s.cfg.MaxBackoff, Patience: s.cfg.RetryFor}
}

// Deliver delivers the events of every subscription until ctx ends, starting again after a
// failure. Every workflow host process runs it; each event goes to one of them at a time. It
// publishes the counts of the store's own meter (Meter) while it runs, and the last ones after.
func (s *Store) Deliver(ctx context.Context) {
	if s.ownMeter {
		var wg sync.WaitGroup
		wg.Go(func() { s.meter.Run(ctx) })
		defer func() {
			wg.Wait()
			s.meter.FlushLast(context.WithoutCancel(ctx))
		}()
	}
	for {
		err := s.deliver(ctx)
		if ctx.Err() != nil {
			return
		}
		s.cfg.Logger.Warn("delivering events; starting again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// deliver runs a delivery of every subscription, starting and stopping them as subscriptions
// come and go, until ctx ends or the watch of the subscriptions fails.
func (s *Store) deliver(ctx context.Context) error {
	w, err := s.kv.Watch(ctx, subject.SubscriptionKeys())
	if err != nil {
		return fmt.Errorf("watching subscriptions: %w", err)
	}
	defer func() { _ = w.Stop() }()
	running := make(map[string]context.CancelFunc)
	var wg sync.WaitGroup
	defer func() {
		for _, stop := range running {
			stop()
		}
		wg.Wait()
	}()
	err = bus.FollowContext(ctx, w, 0, nil, func(e jetstream.KeyValueEntry, _ bool) {
		stop, ok := running[e.Key()]
		if e.Operation() != jetstream.KeyValuePut {
			if ok {
				stop()
				delete(running, e.Key())
			}
			return
		}
		sub, err := decode(e.Value())
		if ok || err != nil {
			return
		}
		sctx, stop := context.WithCancel(ctx)
		running[e.Key()] = stop
		for _, src := range s.sources(&sub) {
			wg.Go(func() { s.run(sctx, &sub, src) })
		}
	})
	if err != nil {
		return fmt.Errorf("subscriptions: %w", err)
	}
	return nil
}

// run delivers the subscription's events of one source until ctx ends, starting again a second
// after a failure. A failure is logged only when the run outlives that second: a deleted
// subscription's consumers go right after its record, often before this process's watch of the
// records ends the run, and that failure is no news.
func (s *Store) run(ctx context.Context, sub *Subscription, src source) {
	log := s.cfg.Logger.With("tenant", sub.TenantID, "subscription", sub.ID)
	for {
		err := s.pull(ctx, sub, src)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		log.Warn("delivering events; starting again", "err", err)
	}
}

// pull takes the source's events from the subscription's consumer and delivers them.
func (s *Store) pull(ctx context.Context, sub *Subscription, src source) error {
	cons, err := src.stream.Consumer(ctx, subject.SubscriptionConsumer(sub.TenantID, sub.ID, src.name))
	if err != nil {
		return fmt.Errorf("finding the subscription's consumer: %w", err)
	}
	log := s.cfg.Logger.With("tenant", sub.TenantID, "subscription", sub.ID)
	for {
		err := s.consume(ctx, sub, src.name, cons)
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			return err
		}
		log.Debug("the request for the next event went unanswered; asking again")
	}
}

// consume delivers the events of the consumer's messages, one at a time, until ctx ends or
// pulling fails.
//
// The request for the next event is sent when Next is called, after the previous one was
// acknowledged; the server answers with the event, or with a heartbeat every pullHeartbeat while
// it waits. Now and then (about one run in ten of the receiver-down test, nats-server 2.15.2) the
// server holds no such request afterwards (its consumer info shows none waiting and events
// pending), and no heartbeat comes: Next reports the missing heartbeats after two intervals
// (with nats.go's default heartbeat, after 30 s) and pull asks again with a new iterator. A new
// one, not the same: were the request only slow to be answered, the same iterator would have two
// requests at the server, and an event for the second could find its one-message buffer holding
// a heartbeat and be dropped. The old iterator is drained first: the server gives nothing to its
// requests once its subscription is gone, and an event that came at the last moment is handled.
func (s *Store) consume(ctx context.Context, sub *Subscription, src string, cons jetstream.Consumer) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(1), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return fmt.Errorf("pulling events: %w", err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			it.Drain()
			for {
				m, derr := it.Next(jetstream.NextContext(ctx))
				if derr != nil {
					break // drained (ErrMsgIteratorClosed), or stopping
				}
				s.handle(ctx, sub, src, m)
			}
		}
		if err != nil {
			return fmt.Errorf("pulling events: %w", err)
		}
		s.handle(ctx, sub, src, m)
	}
}

// handle delivers the events of one consumed message, in order, and acknowledges it once each
// was accepted or kept. A failed event is tried again later, alone: the message is negatively
// acknowledged with a delay (the consumer holds back the source's later messages meanwhile), and
// its progress says which of its events are done. Once the retry period of the message has
// passed, an event that fails is kept as undelivered and the next one is tried.
func (s *Store) handle(ctx context.Context, sub *Subscription, src string, m jetstream.Msg) {
	log := s.cfg.Logger.With("tenant", sub.TenantID, "subscription", sub.ID)
	md, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	events, err := eventsOf(sub, src, m, md)
	if err != nil {
		log.Error("skipping a stored message that is not an event", "err", err)
		_ = m.DoubleAck(ctx)
		return
	}
	p := s.progressOf(ctx, sub, src, md, len(events))
	tried := false
	for _, ev := range events {
		if p.done(ev.ID) {
			continue
		}
		if tried {
			_ = m.InProgress() // two attempts may outlast the ack wait
		}
		tried = true
		attempts := p.attempts(md.NumDelivered)
		err := s.post(ctx, sub, ev)
		if err == nil {
			p.finish(ev.ID, md.NumDelivered)
			continue
		}
		if ctx.Err() != nil {
			s.saveProgress(ctx, sub, src, p)
			_ = m.Nak() // stopping: another host takes it now
			return
		}
		if pol := s.policy(); !pol.GaveUp(int(attempts), time.Since(md.Timestamp)) {
			wait := pol.Delay(int(attempts))
			log.Info("delivering an event; trying again", "url", sub.URL, "event", ev.ID, "attempt", attempts, "in", wait, "err", err)
			s.saveProgress(ctx, sub, src, p)
			_ = m.NakWithDelay(wait)
			return
		}
		log.Warn("giving up delivering an event; kept as undelivered", "url", sub.URL, "event", ev.ID, "attempts", attempts, "err", err)
		if kerr := s.keep(ctx, sub, ev, attempts, err); kerr != nil {
			log.Warn("keeping an undelivered event; trying again", "err", kerr)
			s.saveProgress(ctx, sub, src, p)
			_ = m.NakWithDelay(time.Second)
			return
		}
		p.finish(ev.ID, md.NumDelivered)
	}
	// Acknowledged with the server's confirmation before the next request: the consumer allows
	// one message in flight, and the next one is delivered once this one is acknowledged.
	_ = m.DoubleAck(ctx)
}

// keep stores an event the receiver did not accept in time as undelivered.
func (s *Store) keep(ctx context.Context, sub *Subscription, ev Event, attempts uint64, cause error) error {
	msg := &nats.Msg{Subject: subject.Undelivered(sub.TenantID, sub.ID), Data: ev.Body, Header: nats.Header{}}
	msg.Header.Set(subject.HeaderEventID, ev.ID)
	msg.Header.Set(subject.HeaderEventType, ev.Type)
	_, err := s.undelivered.Add(ctx, sub.TenantID, msg, subject.UndeliveredMsgID(sub.TenantID, sub.ID, ev.ID), cause.Error(), attempts)
	return err
}
