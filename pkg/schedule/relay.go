package schedule

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// relayConsumer is the durable consumer, on each timer stream, every host relays fired requests
// through; each fired request goes to one of them.
const relayConsumer = "timer-relay"

// relayAckWait is how long a relaying host may take before another gets the fired request.
const relayAckWait = 10 * time.Second

// relayPullExpiry bounds each request a relaying host makes for fired timers. The server answers
// a waiting request with heartbeats (every half of it) and nats.go asks again when they stop, so a
// request the server no longer holds delays fired timers by at most about this long, not by the
// default expiry of 30 s.
const relayPullExpiry = 5 * time.Second

// RequestID is the request id of what a schedule sent when it fired with the given sequence in
// the stream of timer shard shard: the same for every relay of that firing, new for the next.
func RequestID(shard int, name string, seq uint64) string {
	if shard == subject.LegacyTimers {
		return "timer:" + strconv.FormatUint(seq, 10) + ":" + name
	}
	return "timer:" + strconv.Itoa(shard) + "-" + strconv.FormatUint(seq, 10) + ":" + name
}

// Relay moves fired requests to the inbox until ctx ends, from every timer stream: each gets a
// request id of its firing (RequestID), is published with that id as its de-duplication id, so
// that a relay repeated after a crash stores it once, and is acknowledged; the relayed requests
// leave their stream together, a second after (removeRelayed).
func (s *Store) Relay(ctx context.Context, log *slog.Logger) error {
	streams := s.all()
	consumers, err := relayConsumers(ctx, streams)
	if err != nil {
		return err
	}
	// Each lane relays the requests of the instances hashed to it, one after the other in the
	// order they fired: lanes relay at once, and an instance's timers fired together reach its
	// inbox in order. The streams share the lanes, each feeding them from a consumer of its own,
	// so that a stream whose timers fill its lanes holds the others up by no more than a lane's
	// buffer. They start with the first timer that fires: a deployment whose agents set none
	// keeps no goroutine for them.
	relayed := make([]chan struct{}, len(streams))
	for i := range relayed {
		relayed[i] = make(chan struct{}, 1)
	}
	lanes := make([]chan fired, relayLanes)
	for i := range lanes {
		lanes[i] = make(chan fired, relayLaneBuffer)
	}
	removing, stopRemoving := context.WithCancel(ctx)
	var (
		start sync.Once
		wg    sync.WaitGroup
	)
	startLanes := func() {
		for _, lane := range lanes {
			wg.Go(func() {
				for f := range lane {
					if s.relay(ctx, log, streams[f.stream].shard, f.m) {
						select {
						case relayed[f.stream] <- struct{}{}:
						default:
						}
					}
				}
			})
		}
		for i, st := range streams {
			wg.Go(func() { removeRelayed(removing, log, st, consumers[i], relayed[i]) })
		}
	}
	defer func() {
		start.Do(func() {}) // no lane starts from here on
		stopRemoving()
		for _, l := range lanes {
			close(l)
		}
		wg.Wait()
	}()
	seed := maphash.MakeSeed()
	var consuming []jetstream.ConsumeContext
	defer func() {
		for _, cc := range consuming {
			cc.Drain()
		}
		for _, cc := range consuming {
			<-cc.Closed()
		}
	}()
	for i, cons := range consumers {
		cc, err := cons.Consume(func(m jetstream.Msg) {
			start.Do(startLanes)
			lanes[maphash.String(seed, instanceOf(m.Subject()))%relayLanes] <- fired{m, i}
		}, jetstream.PullMaxMessages(relayLanes*relayLaneBuffer), jetstream.PullExpiry(relayPullExpiry))
		if err != nil {
			return fmt.Errorf("relaying timers: %w", err)
		}
		consuming = append(consuming, cc)
	}
	<-ctx.Done()
	return nil
}

// relayConsumers creates or updates the relay's durable consumer on each timer stream.
func relayConsumers(ctx context.Context, streams []timers) ([]jetstream.Consumer, error) {
	consumers := make([]jetstream.Consumer, len(streams))
	for i, st := range streams {
		cons, err := st.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       relayConsumer,
			Description:   "agentbus hosts relaying fired timers to the inbox",
			FilterSubject: subject.SchedulesFired(st.shard),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       relayAckWait,
			MaxAckPending: 4096,
		})
		if err != nil {
			return nil, fmt.Errorf("creating the timer relay consumer of %s: %w", subject.TimerStream(st.shard), err)
		}
		consumers[i] = cons
	}
	return consumers, nil
}

// fired is a fired request to relay, and the index of its stream in the relay's streams.
type fired struct {
	m      jetstream.Msg
	stream int
}

// relayLanes is how many fired requests a host relays at once: each waits for the inbox's
// acknowledgement. The lanes start with the first timer that fires, and a burst of timers of one
// tenant delays those of the other tenants of its shard by the time the relay takes for it, and
// the others' by a lane's few requests (docs/limits.md#timers-due-at-once).
const relayLanes = 64

// relayLaneBuffer is how many fired requests wait for each lane.
const relayLaneBuffer = 8

// removeEvery is how long after a relay the relayed requests are removed from the stream.
const removeEvery = time.Second

// instanceOf is the part of a fired request's subject (subject.ScheduleFired) before the timer's
// name: its tenant and instance.
func instanceOf(subj string) string {
	if i := strings.LastIndexByte(subj, '.'); i >= 0 {
		return subj[:i]
	}
	return subj
}

// removeRelayed removes the relayed requests from the stream a second after a relay, until ctx
// ends: every fired request up to the relay consumer's acknowledgement floor, all of which
// reached the inbox (or could not be read), in one purge. One purge, not a deletion of each
// request: a deletion is a request to the stream's API, which takes as much of the servers as
// the relay itself, and every tenant's timers wait in the one relay (docs/limits.md). The purges
// of several hosts' relays overlap and cost little when there is nothing left to remove; an idle
// relay makes none. One that fails is tried again a second later.
func removeRelayed(ctx context.Context, log *slog.Logger, st timers, cons jetstream.Consumer, relayed <-chan struct{}) {
	failed := false
	for {
		if !failed {
			select {
			case <-ctx.Done():
				return
			case <-relayed:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(removeEvery):
		}
		err := purgeRelayed(ctx, st, cons)
		failed = err != nil && ctx.Err() == nil
		if failed {
			log.Warn("removing relayed timers; trying again", "err", err)
		}
	}
}

// purgeRelayed removes every fired request of st up to its relay consumer's acknowledgement floor.
func purgeRelayed(ctx context.Context, st timers, cons jetstream.Consumer) error {
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the timer relay's progress: %w", err)
	}
	floor := info.AckFloor.Stream
	if floor == 0 {
		return nil
	}
	if err := st.stream.Purge(ctx, jetstream.WithPurgeSubject(subject.SchedulesFired(st.shard)), jetstream.WithPurgeSequence(floor+1)); err != nil {
		return fmt.Errorf("purging relayed timers: %w", err)
	}
	return nil
}

// relay moves one fired request of timer shard shard's stream to the inbox and reports whether
// it did.
func (s *Store) relay(ctx context.Context, log *slog.Logger, shard int, m jetstream.Msg) bool {
	md, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return false
	}
	req := new(agentbusv1.Request)
	if err := proto.Unmarshal(m.Data(), req); err != nil {
		log.Error("dropping an undecodable timer", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return false
	}
	stored, err := s.forward(ctx, req, RequestID(shard, req.GetTimer(), md.Sequence.Stream))
	if err != nil {
		log.Warn("relaying a timer; it comes again", "timer", req.GetTimer(), "err", err)
		_ = m.NakWithDelay(time.Second)
		return false
	}
	_ = m.Ack()
	// A one-time schedule: the server removed it as it fired. Of relays of one firing (its
	// acknowledgement lost, say), the one that stored the request counts it off.
	if stored && m.Headers().Get(jetstream.ScheduleNextHeader) == scheduleNextPurge {
		s.meter.AddTimers(req.GetTenantId(), -headerBytesValue(m.Headers()))
	}
	return true
}

// scheduleNextPurge is the Nats-Schedule-Next of what a one-time schedule fired: the server
// purged the schedule as it stored it.
const scheduleNextPurge = "purge"

// forward publishes what a schedule fired as the request of that firing, requestID
// (RequestID), and reports whether this publish stored it (not an earlier relay of the same
// firing).
func (s *Store) forward(ctx context.Context, req *agentbusv1.Request, requestID string) (stored bool, err error) {
	req.RequestId = requestID
	req.MessageId = ""
	req.CreatedAtMs = time.Now().UnixMilli()
	msg, err := bus.DedupedRequest(req)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := bus.Publish(ctx, s.js, msg)
	if err != nil {
		return false, fmt.Errorf("publishing timer request: %w", err)
	}
	return !ack.Duplicate, nil
}

func sortByName(s []Schedule) {
	slices.SortFunc(s, func(a, b Schedule) int { return strings.Compare(a.Name, b.Name) })
}
