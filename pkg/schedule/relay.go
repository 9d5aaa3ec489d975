package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// relayConsumer is the durable consumer every host relays fired requests through; each fired
// request goes to one of them.
const relayConsumer = "timer-relay"

// relayAckWait is how long a relaying host may take before another gets the fired request.
const relayAckWait = 10 * time.Second

// relayPullExpiry bounds each request a relaying host makes for fired timers. The server answers
// a waiting request with heartbeats (every half of it) and nats.go asks again when they stop, so a
// request the server no longer holds delays fired timers by at most about this long, not by the
// default expiry of 30 s.
const relayPullExpiry = 5 * time.Second

// RequestID is the request id of what a schedule sent when it fired with the given stream
// sequence: the same for every relay of that firing, new for the next.
func RequestID(name string, seq uint64) string {
	return "timer:" + strconv.FormatUint(seq, 10) + ":" + name
}

// Relay moves fired requests to the inbox until ctx ends: each gets a request id of its firing
// (RequestID), is published with that id as its de-duplication id, so that a relay repeated
// after a crash stores it once, and is then deleted from the schedules stream.
func (s *Store) Relay(ctx context.Context, log *slog.Logger) error {
	cons, err := s.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       relayConsumer,
		Description:   "agentbus hosts relaying fired timers to the inbox",
		FilterSubject: subject.SchedulesFired(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       relayAckWait,
		MaxAckPending: 4096,
	})
	if err != nil {
		return fmt.Errorf("creating the timer relay consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { s.relay(ctx, log, m) }, jetstream.PullMaxMessages(64),
		jetstream.PullExpiry(relayPullExpiry))
	if err != nil {
		return fmt.Errorf("relaying timers: %w", err)
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// relay moves one fired request to the inbox.
func (s *Store) relay(ctx context.Context, log *slog.Logger, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	req := new(agentbusv1.Request)
	if err := proto.Unmarshal(m.Data(), req); err != nil {
		log.Error("dropping an undecodable timer", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	if err := s.forward(ctx, req, md.Sequence.Stream); err != nil {
		log.Warn("relaying a timer; it comes again", "timer", req.GetTimer(), "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
	err = s.stream.DeleteMsg(ctx, md.Sequence.Stream)
	if err != nil {
		log.Debug("deleting a relayed timer", "err", err)
	}
	// A one-time schedule: the server removed it as it fired. Of relays of one firing (its
	// acknowledgement lost, say), the one whose deletion of it succeeded counts it off.
	if m.Headers().Get(jetstream.ScheduleNextHeader) == scheduleNextPurge &&
		(err == nil || !bus.DeletedBefore(ctx, s.stream, md.Sequence.Stream)) {
		s.meter.AddTimers(req.GetTenantId(), -headerBytesValue(m.Headers()))
	}
}

// scheduleNextPurge is the Nats-Schedule-Next of what a one-time schedule fired: the server
// purged the schedule as it stored it.
const scheduleNextPurge = "purge"

// forward publishes what a schedule fired as the request of that firing.
func (s *Store) forward(ctx context.Context, req *agentbusv1.Request, seq uint64) error {
	req.RequestId = RequestID(req.GetTimer(), seq)
	req.MessageId = ""
	req.CreatedAtMs = time.Now().UnixMilli()
	msg, err := bus.DedupedRequest(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := bus.Publish(ctx, s.js, msg); err != nil {
		return fmt.Errorf("publishing timer request: %w", err)
	}
	return nil
}

func sortByName(s []Schedule) {
	slices.SortFunc(s, func(a, b Schedule) int { return strings.Compare(a.Name, b.Name) })
}
